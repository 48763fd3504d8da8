"""Helpers for the batch job tests: input files, a batch server's settings, and the
batch's state read straight from Redis (what the workers recorded, not what the API says)."""

from __future__ import annotations

import json
import uuid

from support.polling import wait_for
from support.s3_server import ACCESS_KEY, BUCKET, SECRET_KEY

# Seconds of audio each item makes (random weights never say EOS: every item runs to it).
ITEM_AUDIO_S = 0.8


def speech_line(custom_id: str, model: str, **body) -> dict:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/audio/speech",
        "body": {"model": model, "input": f"Line {custom_id} of the book.", "voice": "Vivian",
                 "response_format": "wav", "seed": 7, **body},
    }  # fmt: skip


def input_file(lines: list[dict]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def batch_settings(redis_server, s3_server, **fields) -> dict:
    """ServerSettings fields of a server with the batch API and a worker, its own prefix."""
    return {
        "max_audio_seconds": ITEM_AUDIO_S,
        "batch_api": True,
        "batch_worker_concurrency": 2,
        "batch_lease_s": 5.0,
        "batch_s3_prefix": f"batch-test-{uuid.uuid4().hex[:12]}",
        "response_cache_redis_url": redis_server.url,
        "response_cache_s3_endpoint": s3_server.endpoint,
        "response_cache_s3_bucket": BUCKET,
        "response_cache_s3_access_key": ACCESS_KEY,
        "response_cache_s3_secret_key": SECRET_KEY,
        **fields,
    }


def recorded(redis_client, batch_id: str) -> dict[int, dict]:
    """index -> the line a worker recorded for the item (store.py's `:results` hash)."""
    raw = redis_client.hgetall(f"ttsfleet:batch:job:{batch_id}:results")
    return {int(k): json.loads(v) for k, v in raw.items()}


def wait_status(client, batch_id: str, statuses: tuple[str, ...], timeout: float = 240):
    """The batch once its status is one of `statuses` (polled through the SDK)."""
    return wait_for(
        lambda: (b := client.batches.retrieve(batch_id)).status in statuses and b,
        timeout,
        interval=0.2,
        what=f"batch {batch_id} to be {' or '.join(statuses)}",
    )


def submit(client, lines: list[dict]):
    """Upload `lines` as an input file and create a batch of them (through the SDK)."""
    uploaded = client.files.create(file=("book.jsonl", input_file(lines)), purpose="batch")
    return client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/audio/speech", completion_window="24h"
    )


def jsonl(client, file_id: str) -> list[dict]:
    """The lines of a file, read through `client.files.content`."""
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def model(server) -> str:
    """The model id a live server serves."""
    return server.runtime.served_models[0]
