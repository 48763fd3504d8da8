"""The runtime's command line, `ttsfleet-runtime` (or `python -m ttsfleet_runtime`):
`serve`, `checkpoint`, `fetch`, `bench`, `loadtest` and `voices`.

The runtime image runs it without the operator installed. Where both are installed the
operator's `ttsfleet` CLI offers the same subcommands, found through the `ttsfleet.commands`
entry point that names `register(subparsers)` (pyproject.toml), so `ttsfleet serve` works
too. Nothing heavy is imported here: each handler imports what it runs.

`serve`'s flags are the settings catalogue's (`ttsfleet_runtime.settings`), each
defaulting to its `TTSFLEET_*` variable, so a Kubernetes pod is configured by env alone.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path

from .checkpoint.sizes import TOKENIZER_RATES
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
    from .engine import cuda_context
    from .server import json_logging

    # First of all: CUDA's context is made on a thread while the server and torch
    # import (engine/cuda_context.py), its log lines already in the server's format.
    json_logging.configure(args.log_level)
    cuda_context.retain_in_background(args.device)
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
    p.add_argument(
        "--tokenizer-rate",
        type=int,
        choices=TOKENIZER_RATES,
        default=12,
        help="speech tokenizer: 12 Hz (16 code groups) or 25 Hz (one codebook, DiT decoder)",
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
        tokenizer_rate_hz=args.tokenizer_rate,
        progress=print,
    )
    return 0


def _add_fetch(subparsers) -> None:
    from .model_cache import PERMANENT_FAILURES  # the standard library only

    exit_codes = "; ".join(f"{f.exit_code} {f.message}" for f in PERMANENT_FAILURES)
    p = subparsers.add_parser(
        "fetch",
        help="fill a model cache volume: download a hub revision, verify it, write the marker",
        description="Download REPO at --revision into a fresh folder under OUT/fills, check "
        "every file against the hub's sizes and hashes, then link OUT/checkpoint to it and "
        "write OUT/ttsfleet-model.json. A volume whose marker names the same repository and "
        "commit, its files intact, is left as it is. The token comes from HF_TOKEN. Exit "
        f"codes: 0 filled; {exit_codes}; others: worth retrying.",
    )
    p.add_argument("repo", help="hub repository id, owner/name")
    p.add_argument("--revision", default="main", help="branch, tag or commit (default: main)")
    p.add_argument("--out", type=Path, required=True, help="where the cache volume is mounted")
    p.add_argument(
        "--verify-model",
        choices=["sample", "full"],
        default="sample",
        help="how a volume filled already is checked before it is left as it is: sizes and "
        "the first and last MiB of each file (default), or every byte",
    )
    p.set_defaults(handler=_fetch)


def _fetch(args: argparse.Namespace) -> int:
    import logging
    import sys

    from .checkpoint.fetch import FetchError, HuggingFaceHub, fill

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        fill(
            args.out,
            args.repo,
            args.revision,
            HuggingFaceHub(os.environ.get("HF_TOKEN")),
            full_check=args.verify_model == "full",
        )
    except FetchError as error:
        print(f"fetch failed: {error}", file=sys.stderr)
        return error.exit_code
    return 0


def _add_bench(subparsers) -> None:
    from .bench import register  # argparse only: the benchmarks import torch when they run

    register(subparsers)


def _add_loadtest(subparsers) -> None:
    p = subparsers.add_parser(
        "loadtest",
        help="load a running server: TTFA, underruns and capacity knee per arrival rate",
        description="Open-loop arrivals (or a burst) against a server's public API, streaming "
        "over HTTP or WebSocket; writes loadtest.json and loadtest.png into --out. "
        "`loadtest chart RESULT.json --out X.png` redraws the chart.",
    )
    from .loadtest.command import add_arguments, add_chart_action  # argparse only

    add_arguments(p)
    add_chart_action(p.add_subparsers(dest="loadtest_action"))
    p.set_defaults(handler=_loadtest)


def _loadtest(args: argparse.Namespace) -> int:
    from .loadtest.command import run

    return run(args)


def _add_voices(subparsers) -> None:
    p = subparsers.add_parser(
        "voices",
        help="administer the uploaded-voice store directly (erasure requests)",
        description="Work on the voice store of `serve` without the server: the shared store "
        f"of {SETTINGS['voice_store_url'].env} when it is set, else a voices directory.",
    )
    actions = p.add_subparsers(dest="voices_command", required=True)
    delete = actions.add_parser(
        "delete",
        help="erase a tenant's voices, or one voice, whoever owns it",
        description="Erase uploaded voices for a data-protection request: audio, prompt, profile "
        "and consent record, and the staging leftovers of the tenant's interrupted uploads. "
        "Servers sharing a store stop speaking an erased voice within seconds. Prints one "
        "line per erased voice. Exit 0: something was erased; 1: nothing matched; "
        "2: bad arguments or no store.",
    )
    which = delete.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--owner", help="tenant id (the name in the keys file, key_..., or anonymous)"
    )
    which.add_argument("--id", dest="voice_id", help="one voice id (voice_...)")
    voices_dir = SETTINGS["voices_dir"]
    delete.add_argument(
        "--voices-dir",
        type=Path,
        help=f"the server's voices directory [{voices_dir.env}; "
        f"unused when {SETTINGS['voice_store_url'].env} is set]",
    )
    delete.set_defaults(handler=_voices_delete)


def _voices_store(args: argparse.Namespace):
    """The store to erase on, or an error message: --voices-dir, else the server's
    own variables (the shared store's URL first, as `serve` reads them)."""
    from .server.voice_store_local import LocalVoiceStore
    from .server.voice_store_redis import RedisVoiceStore, StoreUrlError

    url = os.environ.get(SETTINGS["voice_store_url"].env)
    if args.voices_dir is None and url:
        try:
            return RedisVoiceStore.from_url(url)
        except StoreUrlError as exc:
            return str(exc)
    voices_dir = args.voices_dir or os.environ.get(SETTINGS["voices_dir"].env)
    if not voices_dir:
        return (
            f"give --voices-dir, or set {SETTINGS['voices_dir'].env} or "
            f"{SETTINGS['voice_store_url'].env}"
        )
    if not Path(voices_dir).is_dir():
        return f"no voices directory at {voices_dir}"
    return LocalVoiceStore(Path(voices_dir))


def _voices_delete(args: argparse.Namespace) -> int:
    import sys

    from .server.errors import ApiError

    store = _voices_store(args)
    if isinstance(store, str):
        print(store, file=sys.stderr)
        return 2
    try:
        if args.owner is not None:
            erased = store.erase_owner(args.owner)
        else:
            try:
                erased = [store.delete(args.voice_id, owner=None)]
            except ApiError as exc:
                if exc.status != 404:
                    raise
                erased = []
    except ApiError as exc:  # the shared store unreachable
        print(exc.message, file=sys.stderr)
        return 2
    except OSError as exc:  # the directory: permissions, a disk error
        print(
            f"cannot erase in the {store.describe()}: {exc.strerror or exc}; "
            "check the directory's owner and permissions",
            file=sys.stderr,
        )
        return 2
    finally:
        store.close()
    for item in erased:
        kind = "upload leftover" if item.staging else "voice"
        print(f"erased {kind} {item.voice_id} (owner {item.owner or 'unknown'}): {item.where}")
    if not erased:
        print(
            f"nothing to erase: no voices of owner {args.owner!r}"
            if args.owner is not None
            else f"nothing to erase: no voice {args.voice_id!r}",
            file=sys.stderr,
        )
        return 1
    return 0


def register(subparsers) -> None:
    """Add the runtime's subcommands; each sets `handler(args) -> exit code`."""
    _add_serve(subparsers)
    _add_checkpoint(subparsers)
    _add_fetch(subparsers)
    _add_bench(subparsers)
    _add_loadtest(subparsers)
    _add_voices(subparsers)


def main(argv: list[str] | None = None) -> int:
    """`ttsfleet-runtime ...`: the runtime commands, without the operator's CLI."""
    parser = argparse.ArgumentParser(prog="ttsfleet-runtime")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
