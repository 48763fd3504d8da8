"""The FastAPI application of one runtime process, over one engine.

`create_app` wires the pieces: the engine (already built, started in the
lifespan), the guard middleware, the routes and the error shapes. Everything a
route needs hangs off `app.state.runtime` (a `Runtime`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import metrics as metric_names
from ..engine import api
from ..settings import ServerSettings
from . import (
    audio_encoding,
    cached_speech,
    errors,
    interpreter,
    playground_routes,
    service_routes,
    speech_routes,
    speech_socket,
    timestamp_routes,
    voice_routes,
)
from .auth import ApiKeys
from .batch import BatchStore, open_batches
from .batch import routes as batch_routes
from .batch.pacing import BatchPacing
from .batch.worker import BatchWorker
from .drain import Drain
from .http_guard import HttpGuard, record_error
from .rate_limit import ConcurrencyLimiter, TokenBucketLimiter
from .response_cache import ResponseCache, open_cache
from .synthesis import Synthesizer
from .voice_library import VoiceLibrary

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Runtime:
    engine: api.Engine
    settings: ServerSettings
    api_keys: ApiKeys
    limiter: TokenBucketLimiter
    # Failed authentications per client address (HTTP and WebSocket alike).
    auth_failures: TokenBucketLimiter
    ws_sessions: ConcurrencyLimiter
    metrics: metric_names.RuntimeMetrics
    drain: Drain
    voices: VoiceLibrary | None
    synthesizer: Synthesizer
    served_models: tuple[str, ...]
    formats: tuple[str, ...]
    # Audio made once for reproducible requests (server/response_cache/); None: off.
    response_cache: ResponseCache | None = None
    # What names this server's audio in a cache key (cached_speech.model_identity).
    model_identity: dict = dataclasses.field(default_factory=dict)
    # Batch jobs' store (server/batch/); None: /v1/files and /v1/batches are off.
    batches: BatchStore | None = None
    # How many items this pod's batch worker may hold now (server/batch/pacing.py), fed
    # by the interactive requests' times to first audio; None: no worker.
    batch_pacing: BatchPacing | None = None
    engine_stopped: bool = False

    def ready(self) -> bool:
        return self.engine.ready and not self.drain.draining

    async def stop_engine(self, drain_timeout_s: float) -> None:
        if not self.engine_stopped:
            self.engine_stopped = True
            await self.engine.stop(drain_timeout_s)


def validation_error(exc: RequestValidationError) -> errors.ApiError:
    """FastAPI's list of validation errors as one 400 naming the first field."""
    first = exc.errors()[0]
    location = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path")]
    param = ".".join(location) or None
    message = f"{param}: {first.get('msg')}" if param else str(first.get("msg"))
    if first.get("type") == "json_invalid":
        message = f"the request body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')})"
    return errors.invalid_request(message, param=param)


class UnhandledErrors:
    """Answers an exception no route handled, before its response started, with the
    500 every error has, logged once. (Starlette's catch-all handler re-raises after
    answering, so the server logged each one a second time.)"""

    def __init__(self, app, answer):
        self.app = app
        self.answer = answer

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def watched_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except Exception as exc:
            if started:
                raise  # the guard around us ends the cut response and counts it
            response = await self.answer(Request(scope), exc)
            await response(scope, receive, send)


def create_app(
    engine: api.Engine, settings: ServerSettings, api_keys: ApiKeys, *, gpu=None
) -> FastAPI:
    from importlib.metadata import PackageNotFoundError, version

    drain = Drain()
    store = voice_routes.open_store(settings, api_keys)
    runtime_metrics = metric_names.RuntimeMetrics(engine.stats, lambda: runtime.ready(), gpu=gpu)
    pacing = None
    if settings.batch_api and settings.batch_worker_concurrency > 0:
        pacing = BatchPacing(settings.batch_worker_concurrency, settings.batch_ttfa_budget_s)
    voices = (
        None
        if store is None
        else VoiceLibrary(
            store,
            engine,
            runtime_metrics,
            timeout_s=settings.voice_store_timeout_s,
            stale_s=settings.voice_cache_stale_s,
        )
    )
    runtime = Runtime(
        engine=engine,
        settings=settings,
        api_keys=api_keys,
        limiter=TokenBucketLimiter(settings.rate_limit_per_s, settings.rate_limit_burst),
        auth_failures=TokenBucketLimiter(
            settings.auth_failure_rate_per_s, settings.auth_failure_burst
        ),
        ws_sessions=ConcurrencyLimiter(settings.ws_max_sessions_per_key),
        metrics=runtime_metrics,
        drain=drain,
        voices=voices,
        synthesizer=Synthesizer(
            engine,
            runtime_metrics,
            drain,
            voices,
            settings.max_input_chars,
            settings.max_audio_seconds,
            settings.stream_buffer_seconds,
            on_first_audio=pacing.first_audio if pacing is not None else None,
        ),
        batch_pacing=pacing,
        served_models=tuple(
            dict.fromkeys(n for n in (settings.served_model_name, engine.info.name) if n)
        ),
        formats=audio_encoding.supported_formats(),
    )
    try:
        package_version = version("ttsfleet")
    except PackageNotFoundError:
        package_version = "unknown"
    info = engine.info
    runtime.response_cache = open_cache(settings, runtime_metrics)
    runtime.model_identity = cached_speech.model_identity(settings, info, package_version)
    runtime.batches = open_batches(settings)
    runtime_metrics.registry.register(api_keys.collector())
    runtime_metrics.build_info.labels(
        version=package_version, model=info.name, variant=info.variant, size=info.size
    ).set(1)

    async def lifespan(app: FastAPI):
        await engine.start()
        log.info(
            "engine started",
            extra={"model": info.name, "variant": info.variant, "formats": runtime.formats},
        )
        interpreter.tune_for_serving()
        cache = runtime.response_cache
        if cache is not None and voices is not None:
            # Erasures are announced on the store's threads; the cache lives on this loop.
            loop = asyncio.get_running_loop()
            voices.store.on_erased(
                lambda voice_id: loop.call_soon_threadsafe(cache.erase_voice_soon, voice_id)
            )
        housekeeping = None
        if voices is not None:
            await asyncio.to_thread(voices.store.watch)
            housekeeping = asyncio.create_task(voices.keep())
        worker = None
        if runtime.batches is not None and runtime.batch_pacing is not None:
            worker = BatchWorker(
                runtime.batches, runtime, runtime.batch_pacing, settings.batch_lease_s
            )
            worker.start()
        yield
        if worker is not None:
            await worker.stop()
        if runtime.batches is not None:
            await runtime.batches.close()
        if housekeeping is not None:
            housekeeping.cancel()
            voices.close()
        await runtime.stop_engine(settings.drain_timeout_s)
        if cache is not None:
            await cache.close()
        interpreter.restore()
        log.info("engine stopped")

    app = FastAPI(
        title="ttsfleet runtime",
        version=package_version,
        summary="OpenAI-compatible streaming speech synthesis (Qwen3-TTS)",
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.reference_decoder = voice_routes.reference_decoder(settings, info.sample_rate)
    app.include_router(speech_routes.router)
    app.include_router(timestamp_routes.router)
    app.include_router(speech_socket.router)
    app.include_router(voice_routes.router)
    app.include_router(service_routes.router)
    app.include_router(playground_routes.router)
    app.include_router(batch_routes.router)

    @app.exception_handler(errors.ApiError)
    async def api_error(request: Request, exc: errors.ApiError):
        record_error(request.scope.setdefault("state", {}), runtime_metrics, exc.code)
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())

    @app.exception_handler(speech_routes.ClientGone)
    async def client_gone(request: Request, exc: speech_routes.ClientGone):
        return Response(status_code=speech_routes.CLIENT_CLOSED)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError):
        return await api_error(request, validation_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def framework_error(request: Request, exc: StarletteHTTPException):
        # Unknown route (404), wrong method (405), a body FastAPI cannot parse
        # (400: invalid UTF-8, JSON nested too deep): the same shape as ours.
        message = exc.detail if isinstance(exc.detail, str) else None
        if exc.status_code == 400 and message == "There was an error parsing the body":
            message = "the request body is not valid JSON (undecodable, or nested too deeply)"
        error = errors.for_status(exc.status_code, message)
        response = await api_error(request, error)
        response.headers.update(exc.headers or {})
        return response

    async def unexpected(request: Request, exc: Exception):
        log.error(
            "unhandled error",
            exc_info=exc,
            extra={"request_id": request.scope.get("state", {}).get("request_id")},
        )
        return await api_error(request, errors.internal())

    # Inside the guard, so the guard still sees errors after a response started.
    app.add_middleware(UnhandledErrors, answer=unexpected)
    app.add_middleware(
        HttpGuard,
        settings=settings,
        api_keys=api_keys,
        limiter=runtime.limiter,
        auth_failures=runtime.auth_failures,
        metrics=runtime_metrics,
        one_shot_cloning=info.supports_voice_clone,
    )
    return app
