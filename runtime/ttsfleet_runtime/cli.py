"""Runtime subcommands of the `ttsfleet` CLI: `serve` (and the engine's tools).

`register(subparsers)` adds them to the operator's argparse CLI. Nothing heavy
is imported here: each handler imports what it runs. Every `serve` flag has a
`TTSFLEET_*` environment variable as its default, for Kubernetes pods.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def _env(name: str, default=None):
    return os.environ.get(f"TTSFLEET_{name}", default)


def _add_serve(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the speech server (OpenAI-compatible API) over one engine",
        description="Serve a Qwen3-TTS checkpoint over HTTP. Each flag defaults to the env var in brackets.",
    )
    p.add_argument("--model", default=_env("MODEL"), required=_env("MODEL") is None, help="checkpoint dir or hub id [TTSFLEET_MODEL]")
    p.add_argument("--model-revision", default=_env("MODEL_REVISION"), help="hub branch, tag or commit [TTSFLEET_MODEL_REVISION]")
    p.add_argument("--served-model-name", default=_env("SERVED_MODEL_NAME"), help="model id clients send [TTSFLEET_SERVED_MODEL_NAME]")
    p.add_argument("--device", default=_env("DEVICE", "cuda"), help="cpu or cuda [TTSFLEET_DEVICE]")
    p.add_argument("--host", default=_env("HOST", "0.0.0.0"), help="[TTSFLEET_HOST]")
    p.add_argument("--port", type=int, default=int(_env("PORT", "8000")), help="[TTSFLEET_PORT]")
    p.add_argument("--api-keys-file", type=Path, default=_env("API_KEYS_FILE"), help="one 'KEY' or 'TENANT: KEY' per line, e.g. a mounted Secret [TTSFLEET_API_KEYS_FILE]")
    p.add_argument("--auth", choices=["enabled", "disabled"], default=_env("AUTH", "enabled"), help="'disabled' turns API keys off explicitly [TTSFLEET_AUTH]")
    p.add_argument("--voices-dir", type=Path, default=_env("VOICES_DIR"), help="where uploaded voices live (a PVC); unset disables uploads [TTSFLEET_VOICES_DIR]")
    p.add_argument("--anonymous-voices", choices=["on", "off"], default=_env("ANONYMOUS_VOICES", "off"), help="with --auth disabled: allow uploads that every caller shares [TTSFLEET_ANONYMOUS_VOICES]")
    p.add_argument("--max-voices-per-tenant", type=int, default=int(_env("MAX_VOICES_PER_TENANT", "20")), help="uploaded voices one tenant may keep [TTSFLEET_MAX_VOICES_PER_TENANT]")
    p.add_argument("--max-voice-bytes-per-tenant", type=int, default=int(_env("MAX_VOICE_BYTES_PER_TENANT", str(32 * 1024 * 1024))), help="bytes of voice files one tenant may keep [TTSFLEET_MAX_VOICE_BYTES_PER_TENANT]")
    p.add_argument("--max-batch", type=int, default=int(_env("MAX_BATCH", "16")), help="[TTSFLEET_MAX_BATCH]")
    p.add_argument("--max-queue", type=int, default=int(_env("MAX_QUEUE", "64")), help="waiting requests before 429 [TTSFLEET_MAX_QUEUE]")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default=_env("DTYPE"), help="default: bfloat16 on cuda, float32 on cpu [TTSFLEET_DTYPE]")
    p.add_argument("--cuda-graphs", choices=["on", "off"], default=_env("CUDA_GRAPHS", "on"), help="[TTSFLEET_CUDA_GRAPHS]")
    p.add_argument("--first-chunk-frames", type=int, default=int(_env("FIRST_CHUNK_FRAMES", "2")), help="codec frames in the first audio chunk [TTSFLEET_FIRST_CHUNK_FRAMES]")
    p.add_argument("--max-audio-seconds", type=float, default=float(_env("MAX_AUDIO_SECONDS", "120")), help="longest utterance one request may generate [TTSFLEET_MAX_AUDIO_SECONDS]")
    p.add_argument("--drain-timeout", type=float, default=float(_env("DRAIN_TIMEOUT", "30")), help="seconds in-flight streams get after SIGTERM [TTSFLEET_DRAIN_TIMEOUT]")
    p.add_argument("--rate-limit", type=float, default=float(_env("RATE_LIMIT", "0")), help="requests per second per API key, 0 = off [TTSFLEET_RATE_LIMIT]")
    p.add_argument("--rate-limit-burst", type=int, default=int(_env("RATE_LIMIT_BURST", "10")), help="[TTSFLEET_RATE_LIMIT_BURST]")
    p.add_argument("--max-body-bytes", type=int, default=int(_env("MAX_BODY_BYTES", str(64 * 1024))), help="[TTSFLEET_MAX_BODY_BYTES]")
    p.add_argument("--max-input-chars", type=int, default=int(_env("MAX_INPUT_CHARS", "4096")), help="[TTSFLEET_MAX_INPUT_CHARS]")
    p.add_argument("--max-voice-upload-bytes", type=int, default=int(_env("MAX_VOICE_UPLOAD_BYTES", str(10 * 1024 * 1024))), help="[TTSFLEET_MAX_VOICE_UPLOAD_BYTES]")
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "info"), help="[TTSFLEET_LOG_LEVEL]")
    p.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from .server.serve import run
    from .server.settings import ServerSettings

    env_keys = tuple(k.strip() for k in _env("API_KEYS", "").split(",") if k.strip())
    settings = ServerSettings(
        model=args.model,
        model_revision=args.model_revision,
        served_model_name=args.served_model_name,
        device=args.device,
        host=args.host,
        port=args.port,
        api_keys_file=args.api_keys_file,
        api_keys=env_keys,
        auth_disabled=args.auth == "disabled",
        voices_dir=args.voices_dir,
        anonymous_voices=args.anonymous_voices == "on",
        max_voices_per_tenant=args.max_voices_per_tenant,
        max_voice_bytes_per_tenant=args.max_voice_bytes_per_tenant,
        max_batch=args.max_batch,
        max_queue=args.max_queue,
        dtype=args.dtype,
        cuda_graphs=args.cuda_graphs == "on",
        first_chunk_frames=args.first_chunk_frames,
        max_audio_seconds=args.max_audio_seconds,
        drain_timeout_s=args.drain_timeout,
        rate_limit_per_s=args.rate_limit,
        rate_limit_burst=args.rate_limit_burst,
        max_body_bytes=args.max_body_bytes,
        max_input_chars=args.max_input_chars,
        max_voice_upload_bytes=args.max_voice_upload_bytes,
        log_level=args.log_level,
    )
    return run(settings)


def _add_checkpoint(subparsers) -> None:
    p = subparsers.add_parser(
        "checkpoint",
        help="write a Qwen3-TTS checkpoint with random weights in the official layout",
        description="Write config.json, model.safetensors, tokenizer files and speech_tokenizer/ "
                    "with random weights (no download): tiny for CPU tests, real sizes for GPU work.",
    )
    p.add_argument("--random", action="store_true", required=True, help="random weights (the only mode)")
    p.add_argument("--size", choices=["tiny", "0.6B", "1.7B"], default="tiny")
    p.add_argument("--variant", choices=["Base", "CustomVoice", "VoiceDesign"], default="CustomVoice")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default=None,
                   help="default: float32 for tiny, bfloat16 otherwise")
    p.add_argument("--device", default="cpu", help="where random numbers are drawn (cuda is faster for 1.7B)")
    p.set_defaults(handler=_checkpoint)


def _checkpoint(args: argparse.Namespace) -> int:
    import logging

    from .checkpoint.random_checkpoint import write_random_checkpoint

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    write_random_checkpoint(args.out, args.size, args.variant, seed=args.seed, dtype=args.dtype,
                            device=args.device, progress=print)
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


def _add_voices(subparsers) -> None:
    p = subparsers.add_parser(
        "voices",
        help="administer the uploaded-voice store directly (erasure requests)",
        description="Work on a voices directory (--voices-dir of `serve`) without the server.",
    )
    actions = p.add_subparsers(dest="voices_command", required=True)
    delete = actions.add_parser(
        "delete",
        help="erase a tenant's voices, or one voice, whoever owns it",
        description="Erase uploaded voices for a data-protection request: audio, profile and consent "
                    "record, and the staging leftovers of the tenant's interrupted uploads. Prints one "
                    "line per erased folder. Exit 0: something was erased; 1: nothing matched; "
                    "2: bad arguments or no voices directory.",
    )
    which = delete.add_mutually_exclusive_group(required=True)
    which.add_argument("--owner", help="tenant id (the name in the keys file, key_..., or anonymous)")
    which.add_argument("--id", dest="voice_id", help="one voice id (voice_...)")
    delete.add_argument("--voices-dir", type=Path, default=_env("VOICES_DIR"), required=_env("VOICES_DIR") is None,
                        help="the server's voices directory [TTSFLEET_VOICES_DIR]")
    delete.set_defaults(handler=_voices_delete)


def _voices_delete(args: argparse.Namespace) -> int:
    import sys

    from .server.errors import ApiError
    from .server.voice_store import VoiceStore

    if not args.voices_dir.is_dir():
        print(f"no voices directory at {args.voices_dir}", file=sys.stderr)
        return 2
    store = VoiceStore(args.voices_dir)
    if args.owner is not None:
        erased = store.erase_owner(args.owner)
    else:
        try:
            erased = [store.delete(args.voice_id, owner=None)]
        except ApiError:
            erased = []
    for item in erased:
        kind = "upload leftover" if item.staging else "voice"
        print(f"erased {kind} {item.voice_id} (owner {item.owner or 'unknown'}): {item.path}")
    if not erased:
        print(f"nothing to erase: no voices of owner {args.owner!r}" if args.owner is not None
              else f"nothing to erase: no voice {args.voice_id!r}", file=sys.stderr)
        return 1
    return 0


def register(subparsers) -> None:
    """Add the runtime's subcommands; each sets `handler(args) -> exit code`."""
    _add_serve(subparsers)
    _add_checkpoint(subparsers)
    _add_bench(subparsers)
    _add_voices(subparsers)


def main(argv: list[str] | None = None) -> int:
    """`python -m ttsfleet_runtime.cli ...`: the runtime commands without the operator's CLI."""
    parser = argparse.ArgumentParser(prog="ttsfleet-runtime")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
