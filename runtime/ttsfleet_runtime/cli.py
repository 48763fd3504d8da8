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
    p.add_argument("--api-keys-file", type=Path, default=_env("API_KEYS_FILE"), help="one key per line, e.g. a mounted Secret [TTSFLEET_API_KEYS_FILE]")
    p.add_argument("--auth", choices=["enabled", "disabled"], default=_env("AUTH", "enabled"), help="'disabled' turns API keys off explicitly [TTSFLEET_AUTH]")
    p.add_argument("--voices-dir", type=Path, default=_env("VOICES_DIR"), help="where uploaded voices live (a PVC); unset disables uploads [TTSFLEET_VOICES_DIR]")
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
    p.add_argument("--ws-idle-timeout", type=float, default=float(_env("WS_IDLE_TIMEOUT", "30")), help="seconds a WebSocket session may wait on its client before it is closed [TTSFLEET_WS_IDLE_TIMEOUT]")
    p.add_argument("--ws-text-stall", type=float, default=float(_env("WS_TEXT_STALL", "5")), help="seconds without text after which an open WebSocket utterance is flushed [TTSFLEET_WS_TEXT_STALL]")
    p.add_argument("--ws-max-sessions-per-key", type=int, default=int(_env("WS_MAX_SESSIONS_PER_KEY", "8")), help="open WebSocket sessions per API key, 0 = no limit [TTSFLEET_WS_MAX_SESSIONS_PER_KEY]")
    p.add_argument("--auth-failure-rate", type=float, default=float(_env("AUTH_FAILURE_RATE", "1")), help="failed authentications per second per client address after the burst [TTSFLEET_AUTH_FAILURE_RATE]")
    p.add_argument("--auth-failure-burst", type=int, default=int(_env("AUTH_FAILURE_BURST", "20")), help="[TTSFLEET_AUTH_FAILURE_BURST]")
    p.add_argument("--http-header-timeout", type=float, default=float(_env("HTTP_HEADER_TIMEOUT", "10")), help="seconds for a request's line and headers to arrive [TTSFLEET_HTTP_HEADER_TIMEOUT]")
    p.add_argument("--http-body-timeout", type=float, default=float(_env("HTTP_BODY_TIMEOUT", "60")), help="seconds for a request's body to arrive [TTSFLEET_HTTP_BODY_TIMEOUT]")
    p.add_argument("--http-keep-alive", type=float, default=float(_env("HTTP_KEEP_ALIVE", "5")), help="seconds an idle keep-alive connection stays open [TTSFLEET_HTTP_KEEP_ALIVE]")
    p.add_argument("--max-header-bytes", type=int, default=int(_env("MAX_HEADER_BYTES", str(16 * 1024))), help="request line and headers, larger is refused with 431 [TTSFLEET_MAX_HEADER_BYTES]")
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
        ws_idle_timeout_s=args.ws_idle_timeout,
        ws_text_stall_s=args.ws_text_stall,
        ws_max_sessions_per_key=args.ws_max_sessions_per_key,
        auth_failure_rate_per_s=args.auth_failure_rate,
        auth_failure_burst=args.auth_failure_burst,
        http_header_timeout_s=args.http_header_timeout,
        http_body_timeout_s=args.http_body_timeout,
        http_keep_alive_s=args.http_keep_alive,
        max_header_bytes=args.max_header_bytes,
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


def register(subparsers) -> None:
    """Add the runtime's subcommands; each sets `handler(args) -> exit code`."""
    _add_serve(subparsers)
    _add_checkpoint(subparsers)
    _add_bench(subparsers)


def main(argv: list[str] | None = None) -> int:
    """`python -m ttsfleet_runtime.cli ...`: the runtime commands without the operator's CLI."""
    parser = argparse.ArgumentParser(prog="ttsfleet-runtime")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
