"""`/v1/files` and `/v1/batches`: OpenAI's Batch API for speech requests.

Why OpenAI's shape and not a TTSBatch resource: the teams that submit audiobooks and
podcasts call us with the `openai` SDK and hold an API key, not kubectl access to the
cluster; `client.files.create` + `client.batches.create` is what they (and AIBrix's
users) already know. A batch and its files belong to the caller's tenant: another
tenant gets 404, as for an id that never existed.
"""

from __future__ import annotations

import json
import time
from typing import Literal

from fastapi import APIRouter, File, Form, Query, Request, UploadFile
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from .. import errors
from ..auth import ANONYMOUS
from ..speech_routes import check_request
from . import jobs
from .store import BatchStore

router = APIRouter()


def _store(request: Request) -> BatchStore:
    store = request.app.state.runtime.batches
    if store is None:
        raise errors.not_found("batches are not enabled on this server (--batch-api)")
    return store


def _tenant(request: Request) -> str:
    return request.scope["state"].get("caller", ANONYMOUS)


async def _own_file(request: Request, file_id: str) -> dict[str, str]:
    record = await _store(request).file(file_id)
    if record is None or record["tenant"] != _tenant(request):
        raise errors.not_found(f"no file {file_id!r}")
    return record


async def _own_batch(request: Request, batch_id: str) -> dict[str, str]:
    store = _store(request)
    job = await store.job(batch_id)
    if job is None or job["tenant"] != _tenant(request):
        raise errors.not_found(f"no batch {batch_id!r}")
    if job["status"] in ("validating", "in_progress", "cancelling", "finalizing"):
        # Cancelled with nothing running, or past its window with no worker about: the
        # caller's look finalises it (a worker would on its next pass).
        if (await store.claim(batch_id, 1.0, want_item=False))[0] == "finalize":
            await jobs.finalize(store, batch_id)
        job = await store.job(batch_id)
    return job


# ------------------------------------------------------------------ files
@router.post("/v1/files", summary="Upload a batch input file (JSONL)")
async def create_file(
    request: Request,
    file: UploadFile = File(description="JSONL: one speech request per line"),
    purpose: str = Form(description='"batch"'),
):
    store = _store(request)
    if purpose != "batch":
        raise errors.invalid_request(
            'purpose must be "batch": this server keeps batch input files only', "purpose"
        )
    data = await file.read()
    record = {
        "id": jobs.new_id("file"),
        "tenant": _tenant(request),
        "filename": file.filename or "input.jsonl",
        "purpose": purpose,
        "bytes": len(data),
        "created_at": int(time.time()),
    }
    await store.put_file(record, data)
    return jobs.file_object(record)


@router.get("/v1/files/{file_id}", summary="A file's record")
async def retrieve_file(file_id: str, request: Request):
    return jobs.file_object(await _own_file(request, file_id))


@router.get("/v1/files/{file_id}/content", summary="A file's bytes")
async def file_content(file_id: str, request: Request):
    await _own_file(request, file_id)
    data = await _store(request).file_content(file_id)
    if data is None:
        raise errors.not_found(f"file {file_id!r} has no content in the bucket")
    return Response(data, media_type="application/jsonl")


@router.delete("/v1/files/{file_id}", summary="Delete a file")
async def delete_file(file_id: str, request: Request):
    await _own_file(request, file_id)
    await _store(request).delete_file(file_id)
    return {"id": file_id, "object": "file", "deleted": True}


# ------------------------------------------------------------------ batches
class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(min_length=1, max_length=128)
    endpoint: Literal["/v1/audio/speech"]
    # jobs.COMPLETION_WINDOWS's keys.
    completion_window: Literal["1h", "24h", "72h", "168h"] = Field(
        description="How long the batch may take; items not done by then end as batch_expired."
    )
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


@router.post("/v1/batches", summary="Create a batch of speech requests")
async def create_batch(body: BatchCreate, request: Request):
    store = _store(request)
    runtime = request.app.state.runtime
    source = await _own_file(request, body.input_file_id)
    if source["purpose"] != "batch":
        raise errors.invalid_request(
            f"file {body.input_file_id!r} is not a batch input file", "input_file_id"
        )
    data = await store.file_content(body.input_file_id)
    if data is None:
        raise errors.invalid_request(
            f"file {body.input_file_id!r} has no content in the bucket", "input_file_id"
        )
    items = jobs.parse_input(
        data,
        runtime.settings.batch_max_items,
        lambda speech: check_request(speech, runtime, streamed=False),
    )
    now = time.time()
    window_s = jobs.COMPLETION_WINDOWS[body.completion_window]
    record = {
        "id": jobs.new_id("batch"),
        "tenant": _tenant(request),
        "status": "validating",
        "input_file_id": body.input_file_id,
        "completion_window": body.completion_window,
        "created_at": int(now),
        "expires_at": int(now + window_s),
        "expires_at_ms": int((now + window_s) * 1000),
        "total": len(items),
        "completed": 0,
        "failed": 0,
        "metadata": json.dumps(body.metadata),
    }
    await store.create(record, items)
    return jobs.batch_object(await store.job(record["id"]))


@router.get("/v1/batches/{batch_id}", summary="A batch's status and counts")
async def retrieve_batch(batch_id: str, request: Request):
    return jobs.batch_object(await _own_batch(request, batch_id))


@router.post("/v1/batches/{batch_id}/cancel", summary="Cancel a batch")
async def cancel_batch(batch_id: str, request: Request):
    store = _store(request)
    job = await _own_batch(request, batch_id)
    if job["status"] in ("completed", "failed", "expired"):
        raise errors.ApiError(
            409,
            f"batch {batch_id!r} is {job['status']}; only a running batch can be cancelled",
            code="batch_not_running",
        )
    await store.cancel(batch_id)
    return jobs.batch_object(await _own_batch(request, batch_id))


@router.get("/v1/batches", summary="The caller's batches, newest first")
async def list_batches(
    request: Request,
    after: str | None = Query(default=None, max_length=128),
    limit: int = Query(default=20, ge=1, le=100),
):
    store = _store(request)
    ids = await store.tenant_jobs(_tenant(request), after, limit)
    objects = [jobs.batch_object(await _own_batch(request, i)) for i in ids[:limit]]
    return {
        "object": "list",
        "data": objects,
        "first_id": objects[0]["id"] if objects else None,
        "last_id": objects[-1]["id"] if objects else None,
        "has_more": len(ids) > limit,
    }
