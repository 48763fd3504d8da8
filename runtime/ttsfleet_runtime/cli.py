"""The runtime's command line, `ttsfleet-runtime` (or `python -m ttsfleet_runtime`):
`serve`, `checkpoint` and `bench`.

The runtime image runs it without the operator installed. In a checkout the operator's
`ttsfleet` CLI offers the same subcommands (`register(subparsers)`), so `ttsfleet serve`
works too. Nothing heavy is imported here: each handler imports what it runs.

`serve`'s flags are the settings catalogue's (`ttsfleet_runtime.settings`), each
defaulting to its `TTSFLEET_*` variable, so a Kubernetes pod is configured by env alone.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

from .settings import SETTINGS, ServerSettings, Setting


class _FromEnvironment(str):
    """A flag's default taken from its TTSFLEET_* variable (errors name the variable)."""


def _parser_of(entry: Setting):
    def parse(text: str):
        try:
            return entry.parse(text)
        except ValueError as error:
            where = f" (from {entry.env}={text})" if isinstance(text, _FromEnvironment) else ""
            raise argparse.ArgumentTypeError(f"{error}{where}") from None

    return parse


def _add_setting_flags(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
    """One flag per catalogue setting, defaulting to its variable, else the catalogue default."""
    for entry in SETTINGS.values():
        if entry.flag is None:
            continue  # environment only (API keys)
        default = _FromEnvironment(environ[entry.env]) if entry.env in environ else entry.default
        if entry.kind is bool:
            metavar = "{" + ",".join(entry.words) + "}"
        elif entry.choices:
            metavar = "{" + ",".join(entry.choices) + "}"
        else:
            metavar = entry.flag[2:].upper().replace("-", "_")  # the flag's name, not the field's
        shown = (
            "" if entry.default in (None, "", ()) else f" (default: {entry.format(entry.default)})"
        )
        parser.add_argument(
            entry.flag,
            dest=entry.name,
            type=_parser_of(entry),
            default=default,
            required=entry.required and entry.env not in environ,
            metavar=metavar,
            help=f"{entry.help}{shown} [{entry.env}]".replace("%", "%%"),  # argparse formats help
        )


def _add_serve(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the speech server (OpenAI-compatible API) over one engine",
        description="Serve a Qwen3-TTS checkpoint over HTTP. Each flag defaults to the env var in brackets; "
        "API keys may also come from TTSFLEET_API_KEYS (comma-separated).",
    )
    _add_setting_flags(p, os.environ)
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from .server.serve import run

    values = {}
    for entry in SETTINGS.values():
        if entry.flag is not None:
            values[entry.name] = getattr(args, entry.name)
        elif entry.env in os.environ:  # environment only (API keys): never on the command line
            values[entry.name] = entry.parse(os.environ[entry.env])
    return run(ServerSettings(**values))


def _add_checkpoint(subparsers) -> None:
    p = subparsers.add_parser(
        "checkpoint",
        help="write a Qwen3-TTS checkpoint with random weights in the official layout",
        description="Write config.json, model.safetensors, tokenizer files and speech_tokenizer/ "
        "with random weights (no download): tiny for CPU tests, real sizes for GPU work.",
    )
    p.add_argument(
        "--random", action="store_true", required=True, help="random weights (the only mode)"
    )
    p.add_argument("--size", choices=["tiny", "0.6B", "1.7B"], default="tiny")
    p.add_argument(
        "--variant", choices=["Base", "CustomVoice", "VoiceDesign"], default="CustomVoice"
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dtype",
        choices=["bfloat16", "float32"],
        default=None,
        help="default: float32 for tiny, bfloat16 otherwise",
    )
    p.add_argument(
        "--device", default="cpu", help="where random numbers are drawn (cuda is faster for 1.7B)"
    )
    p.set_defaults(handler=_checkpoint)


def _checkpoint(args: argparse.Namespace) -> int:
    import logging

    from .checkpoint.random_checkpoint import write_random_checkpoint

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    write_random_checkpoint(
        args.out,
        args.size,
        args.variant,
        seed=args.seed,
        dtype=args.dtype,
        device=args.device,
        progress=print,
    )
    return 0


def _add_bench(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="time the engine on this GPU (ms per frame, time to first audio, throughput)",
        description="Benchmark the engine through its public API; writes ours.json into --out.",
    )
    from .benchmark import add_arguments  # argparse only: benchmark imports torch lazily

    add_arguments(p)
    p.set_defaults(handler=_bench)


def _bench(args: argparse.Namespace) -> int:
    from .benchmark import run

    return run(args)


def register(subparsers) -> None:
    """Add the runtime's subcommands; each sets `handler(args) -> exit code`."""
    _add_serve(subparsers)
    _add_checkpoint(subparsers)
    _add_bench(subparsers)


def main(argv: list[str] | None = None) -> int:
    """`ttsfleet-runtime ...`: the runtime commands, without the operator's CLI."""
    parser = argparse.ArgumentParser(prog="ttsfleet-runtime")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
