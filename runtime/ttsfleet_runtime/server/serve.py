"""Run one runtime process: engine + app under uvicorn, with SIGTERM draining.

SIGTERM (or the first Ctrl-C): readiness turns off and new speech is refused
with 503 while the listener stays open; in-flight utterances get up to the
drain timeout to finish; then the engine stops (cutting what is left) and the
process exits. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from pathlib import Path

from ..model_cache import CacheError, check_checkpoint
from ..settings import ServerSettings
from .app import create_app
from .auth import ApiKeys, KeysFileError

log = logging.getLogger(__name__)


class ConfigError(Exception):
    """The server cannot start as configured; the message says what to change."""


def load_api_keys(settings: ServerSettings) -> ApiKeys:
    """Auth is on whenever keys exist; no keys and no explicit opt-out is an error."""
    if settings.auth_disabled:
        if settings.api_keys or settings.api_keys_file:
            raise ConfigError("API keys were given but auth is disabled: choose one")
        log.warning("authentication is disabled: anyone who reaches this port can use it")
        return ApiKeys(disabled=True)
    if settings.api_keys_file is not None and not settings.api_keys_file.is_file():
        raise ConfigError(f"API keys file {settings.api_keys_file} does not exist")
    try:
        keys = ApiKeys(settings.api_keys, settings.api_keys_file)
    except KeysFileError as exc:
        raise ConfigError(f"API keys: {exc}") from None
    if keys.count == 0:
        raise ConfigError(
            "no API keys: give --api-keys-file (or TTSFLEET_API_KEYS_FILE / TTSFLEET_API_KEYS), "
            "or turn auth off explicitly with --auth disabled (TTSFLEET_AUTH=disabled)"
        )
    return keys


def check_model(settings: ServerSettings) -> None:
    """Refuse, before any weight is read, a local checkpoint that cannot load or a model
    cache whose files differ from what its fill verified (CacheError names the file), and
    a --model path that is no directory (which would be taken for a hub id)."""
    path = Path(settings.model)
    if path.is_dir() or path.is_symlink():  # a model cache's checkpoint is the fill's link
        check_checkpoint(path, full=settings.verify_model == "full")
    elif path.is_absolute() or settings.model.startswith("."):
        raise ConfigError(f"--model {settings.model} is not a directory: point it at a checkpoint")


def build_engine(settings: ServerSettings):
    from ..engine import process_switches  # torch: imported only when serving
    from ..engine.tts_engine import TTSEngine

    # Once, before the engine: process-wide, so not the engine's to set.
    process_switches.set_for_serving(settings.device)
    dtype = settings.dtype or ("float32" if settings.device == "cpu" else "bfloat16")
    engine = TTSEngine.from_pretrained(
        settings.model,
        device=settings.device,
        revision=settings.model_revision,
        first_chunk_frames=settings.first_chunk_frames,
        chunk_frames=settings.chunk_frames,
        codec_conv_route=settings.codec_conv_route,
        decode_priority=settings.decode_priority,
        max_batch=settings.max_batch,
        max_len=settings.max_len,
        kv_cache_memory=settings.kv_cache_memory,
        max_queue=settings.max_queue,
        dtype=dtype,
        weights=settings.weights,
        cuda_graphs=settings.cuda_graphs,
        compile_cache_dir=settings.compile_cache_dir,
    )
    expected, found = settings.tokenizer_rate_hz, engine.info.tokenizer_rate_hz
    if expected is not None and found != expected:
        raise ValueError(
            f"--tokenizer-rate-hz {expected} (the TTSService's model.tokenizerRateHz), but "
            f"{settings.model} has a {found} Hz speech tokenizer: point the service at a "
            f"{expected} Hz checkpoint, or set tokenizerRateHz to {found}"
        )
    return engine


def uvicorn_config(app, settings: ServerSettings, **overrides):
    """How uvicorn serves the app: limits and timeouts included (tests use it too)."""
    import uvicorn

    from .http_protocol import guarded_protocol, guarded_websocket_protocol

    options = {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "access_log": False,  # HttpGuard logs each request with its id
        "lifespan": "on",
        "timeout_graceful_shutdown": 5,
        # A head deadline, a head-size limit, JSON refusals; see http_protocol.py.
        "http": guarded_protocol(
            settings.http_header_timeout_s, settings.max_header_bytes, settings.send_timeout_s
        ),
        # The send timeout for WebSocket sessions too (a client that stops reading).
        "ws": guarded_websocket_protocol(settings.send_timeout_s),
        "timeout_keep_alive": settings.http_keep_alive_s,
        "ws_ping_interval": 20,
        # The session refuses a message over --max-body-bytes itself, with a close
        # handshake (1009). uvicorn's own cap only stops frames far beyond it: it
        # drops the connection while the client may still be writing (the client
        # then sees a reset, 1006, instead of the close frame).
        "ws_max_size": max(4 * settings.max_body_bytes, 1 << 20),
    }
    return uvicorn.Config(app, **{**options, **overrides})


def uvicorn_server(app, settings: ServerSettings):
    import uvicorn

    class DrainingServer(uvicorn.Server):
        async def serve(self, sockets=None):
            self._loop = asyncio.get_running_loop()
            self._draining = False
            await super().serve(sockets=sockets)

        def handle_exit(self, sig, frame):
            if self._draining:
                self.force_exit = True
                return super().handle_exit(sig, frame)
            self._draining = True
            # Signal handlers run between bytecodes; hand the work to the loop.
            self._loop.call_soon_threadsafe(
                lambda: self._loop.create_task(self._drain_then_exit(sig))
            )

        async def _drain_then_exit(self, sig):
            runtime = app.state.runtime
            started = time.monotonic()
            runtime.drain.begin()
            log.info(
                "draining",
                extra={"signal": signal.Signals(sig).name, "inflight": runtime.drain.inflight},
            )
            finished = await runtime.drain.wait_idle(settings.drain_timeout_s)
            left = max(0.5, settings.drain_timeout_s - (time.monotonic() - started))
            await runtime.stop_engine(left)
            if not finished:
                # The engine cut what was left; let those responses end.
                await runtime.drain.wait_idle(5.0)
            log.info(
                "drained",
                extra={
                    "all_finished": finished,
                    "seconds": round(time.monotonic() - started, 2),
                    "inflight": runtime.drain.inflight,
                },
            )
            self.should_exit = True

    config = uvicorn_config(app, settings)
    return DrainingServer(config)


def run(settings: ServerSettings) -> int:
    """Serve until a signal ends it (logging is the caller's: `cli._serve` sets it up
    first). -> the exit code."""
    try:
        api_keys = load_api_keys(settings)
    except ConfigError as exc:
        log.error(str(exc))
        return 2
    try:
        check_model(settings)
    except (ConfigError, CacheError) as exc:
        log.error(str(exc))
        return 2
    from .. import metrics
    from .response_cache import CacheConfigError
    from .voice_store_redis import StoreUrlError

    engine = build_engine(settings)
    try:
        app = create_app(engine, settings, api_keys, gpu=metrics.NvmlReader())
    except (StoreUrlError, CacheConfigError) as exc:
        log.error(str(exc))
        return 2
    uvicorn_server(app, settings).run()
    return 0
