"""What a batch is to its users: the input file's lines checked, OpenAI's objects, and
the output and error files written once every item has ended.

A line is `{"custom_id": ..., "method": "POST", "url": "/v1/audio/speech", "body": {...}}`
with the body of a speech request. Every line is checked when the batch is created
(the first bad one is refused with its line number), so a batch never fails halfway
for a typo. Each item ends exactly once: in the output file (status 200, its audio's
object) or in the error file (the error it got, or why it never ran: the batch was
cancelled or its completion window ended).
"""

from __future__ import annotations

import json
import secrets
import time

import pydantic

from .. import errors
from ..speech_request import SpeechRequest
from .store import BatchStore

ENDPOINT = "/v1/audio/speech"
# The windows accepted (OpenAI's own is "24h"); longer ones suit audiobook backlogs.
COMPLETION_WINDOWS = {"1h": 3600, "24h": 86_400, "72h": 3 * 86_400, "168h": 7 * 86_400}
MAX_CUSTOM_ID = 512


def new_id(kind: str) -> str:
    return f"{kind}_{secrets.token_hex(12)}"


def parse_input(data: bytes, max_items: int, check) -> list[dict]:
    """The items of an input file, each {"custom_id", "body"}; a 400 naming the first bad
    line. `check(body)` refuses a speech body this server cannot serve (ApiError)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.invalid_request("the input file is not UTF-8 text", "input_file_id") from None
    items: list[dict] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue

        def bad(message: str, number=number) -> errors.ApiError:
            return errors.invalid_request(
                f"line {number} of the input file: {message}", "input_file_id"
            )

        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise bad(f"not JSON ({exc.msg})") from None
        if not isinstance(line, dict):
            raise bad("expected a JSON object with custom_id, method, url and body")
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str) or not 0 < len(custom_id) <= MAX_CUSTOM_ID:
            raise bad(f"custom_id must be a string of 1-{MAX_CUSTOM_ID} characters")
        if custom_id in seen:
            raise bad(f"custom_id {custom_id!r} repeats line {seen[custom_id]}; make each unique")
        seen[custom_id] = number
        if line.get("method") != "POST" or line.get("url") != ENDPOINT:
            raise bad(f'method must be "POST" and url "{ENDPOINT}"')
        unknown = set(line) - {"custom_id", "method", "url", "body"}
        if unknown:
            raise bad(f"unknown field {sorted(unknown)[0]!r}")
        try:
            body = SpeechRequest.model_validate(line.get("body"))
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise bad(
                f"body.{where}: {first['msg']}" if where else f"body: {first['msg']}"
            ) from None
        if body.voice_clone is not None:
            raise bad("voice_clone is not taken in batches: upload the voice and name its id")
        try:
            check(body)
        except errors.ApiError as exc:
            raise bad(exc.message) from None
        items.append({"custom_id": custom_id, "body": line["body"]})
        if len(items) > max_items:
            raise errors.invalid_request(
                f"the input file holds more than {max_items} requests; split it", "input_file_id"
            )
    if not items:
        raise errors.invalid_request("the input file holds no requests", "input_file_id")
    return items


def file_object(record: dict[str, str]) -> dict:
    return {
        "id": record["id"],
        "object": "file",
        "bytes": int(record["bytes"]),
        "created_at": int(record["created_at"]),
        "filename": record["filename"],
        "purpose": record["purpose"],
        "status": "processed",
    }


_TIMES = (
    "in_progress_at",
    "expires_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def batch_object(job: dict[str, str]) -> dict:
    def number(name: str) -> int | None:
        value = job.get(name)
        return int(value) if value else None

    completed, failed = number("completed") or 0, number("failed") or 0
    return {
        "id": job["id"],
        "object": "batch",
        "endpoint": ENDPOINT,
        "errors": None,
        "input_file_id": job["input_file_id"],
        "completion_window": job["completion_window"],
        "status": job["status"],
        "output_file_id": job.get("output_file_id") or None,
        "error_file_id": job.get("error_file_id") or None,
        "created_at": int(job["created_at"]),
        **{name: number(name) for name in _TIMES},
        "request_counts": {"total": int(job["total"]), "completed": completed, "failed": failed},
        "metadata": json.loads(job.get("metadata") or "null"),
    }


def output_line(custom_id: str, request_id: str, body: dict) -> dict:
    return {
        "id": new_id("batch_req"),
        "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": request_id, "body": body},
        "error": None,
    }


def error_line(custom_id: str, request_id: str, error: errors.ApiError) -> dict:
    return {
        "id": new_id("batch_req"),
        "custom_id": custom_id,
        "response": {"status_code": error.status, "request_id": request_id, "body": error.body()},
        "error": None,
    }


def never_ran_line(custom_id: str, stop: str) -> dict:
    why = "was cancelled" if stop == "cancelled" else "reached the end of its completion window"
    return {
        "id": new_id("batch_req"),
        "custom_id": custom_id,
        "response": None,
        "error": {"code": f"batch_{stop}", "message": f"not run: the batch {why}"},
    }


async def finalize(store: BatchStore, batch_id: str) -> None:
    """Write the batch's output and error files and mark it final. Idempotent: the files'
    ids follow from the batch's, so a second finaliser (the first died) overwrites."""
    job = await store.job(batch_id)
    if job is None or job["status"] != "finalizing":
        return
    results, items = await store.results(batch_id)
    outputs: list[dict] = []
    failures: list[dict] = []
    for index in sorted(items, key=int):
        line = results.get(index) or never_ran_line(items[index]["custom_id"], job.get("stop"))
        response = line.get("response")
        (outputs if response and response["status_code"] == 200 else failures).append(line)
    suffix = batch_id.removeprefix("batch_")
    ids = []
    for kind, lines in (("output", outputs), ("error", failures)):
        if not lines and kind == "error":
            ids.append("")
            continue
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        record = {
            "id": f"file-{suffix}-{kind}",
            "tenant": job["tenant"],
            "filename": f"{batch_id}_{kind}.jsonl",
            "purpose": "batch_output",
            "bytes": len(data),
            "created_at": int(time.time()),
        }
        await store.put_file(record, data)
        ids.append(record["id"])
    await store.finalized(batch_id, *ids)
