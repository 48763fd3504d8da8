"""Routes for the platform rather than the user: models, health, metrics.

`/health/*` and `/metrics` need no key: the kubelet and Prometheus call them.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .speech_routes import ERROR_RESPONSES

router = APIRouter()


@router.get("/v1/models", responses=ERROR_RESPONSES, summary="The model this server serves")
async def list_models(request: Request) -> dict:
    runtime = request.app.state.runtime
    info = runtime.engine.info
    return {
        "object": "list",
        "data": [
            {
                "id": runtime.served_models[0],
                "object": "model",
                "created": 0,
                "owned_by": "ttsfleet",
                "variant": info.variant,
                "size": info.size,
                "sample_rate": info.sample_rate,
                "speakers": list(info.speakers),
                "languages": list(info.languages),
                "supports_instructions": info.supports_instructions,
                "supports_voice_clone": info.supports_voice_clone,
                "response_formats": list(runtime.formats),
            }
        ],
    }


@router.get("/health/live", summary="The process is up")
async def live() -> dict:
    return {"status": "ok"}


@router.get(
    "/health/ready",
    summary="The engine admits work",
    responses={503: {"description": "Not ready or draining"}},
)
async def ready(request: Request):
    runtime = request.app.state.runtime
    if runtime.drain.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    if not runtime.engine.ready:
        return JSONResponse({"status": "starting"}, status_code=503)
    return {"status": "ready"}


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    # The request of the scrape itself would make every scrape count itself.
    request.scope["state"]["count_request"] = False
    body, content_type = request.app.state.runtime.metrics.render()
    return Response(body, media_type=content_type)
