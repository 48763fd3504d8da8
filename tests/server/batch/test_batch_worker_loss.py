"""Workers die mid-job: `ttsfleet serve` processes on one Redis and one bucket run a batch.
One is SIGKILLed while it holds leases (no drain, no hand-back: a node lost): its items
come back when their leases lapse and the others finish the job; every item is recorded
exactly once (counted in the completions audit, not only in the output file), and the
items the dead worker held are recorded by another.
(test_batch_drain.py: a draining worker hands its leases back.)"""

from __future__ import annotations

import collections

import openai

from support.batches import input_file, jsonl, speech_line, wait_status
from support.polling import wait_for
from support.runtime import RuntimeProcess
from support.s3_server import ACCESS_KEY, BUCKET, SECRET_KEY

ITEMS = 12
# Long enough items that the victim is caught holding some, short enough for CPU.
ITEM_AUDIO_S = 4.0
LEASE_S = 3


def worker_flags(prefix: str, s3_endpoint: str) -> tuple[str, ...]:
    return (
        "--batch-api", "on",
        "--batch-worker-concurrency", "2",
        "--batch-lease", str(LEASE_S),
        "--batch-s3-prefix", prefix,
        "--max-audio-seconds", str(ITEM_AUDIO_S),
        "--response-cache-s3-endpoint", s3_endpoint,
        "--response-cache-s3-bucket", BUCKET,
    )  # fmt: skip


def start_pods(count: int, tiny_custom_voice, tmp_path, redis_server, s3_server):
    env = {
        "TTSFLEET_RESPONSE_CACHE_REDIS_URL": redis_server.url,
        "TTSFLEET_RESPONSE_CACHE_S3_ACCESS_KEY": ACCESS_KEY,
        "TTSFLEET_RESPONSE_CACHE_S3_SECRET_KEY": SECRET_KEY,
    }
    serve_flags = worker_flags(f"batch-{tmp_path.name}", s3_server.endpoint)
    return [
        RuntimeProcess(tmp_path, tiny_custom_voice, *serve_flags, name=f"pod-{i}", env=env)
        for i in range(count)
    ]


def submit_book(pod, names: list[str]):
    client = openai.OpenAI(base_url=pod.base + "/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    uploaded = client.files.create(
        file=("book.jsonl", input_file([speech_line(n, model) for n in names])), purpose="batch"
    )
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/audio/speech", completion_window="24h"
    )
    return client, batch


def leases_of(redis, batch_id: str, pod) -> set[bytes]:
    """The items `pod`'s worker holds a lease on now."""
    keys = f"ttsfleet:batch:job:{batch_id}"
    holders = redis.hkeys(keys + ":holders")
    workers = redis.hgetall(keys + ":workers")
    return {i for i in holders if workers.get(i, b"").decode().endswith(f":{pod.process.pid}")}


def test_a_killed_worker_loses_no_item_and_none_is_recorded_twice(
    tiny_custom_voice, tmp_path, redis_server, s3_server
):
    redis = redis_server.client()
    redis.flushdb()
    pods = start_pods(3, tiny_custom_voice, tmp_path, redis_server, s3_server)
    try:
        for pod in pods:
            pod.wait_ready()
        names = [f"page-{i:02d}" for i in range(ITEMS)]
        client, batch = submit_book(pods[0], names)
        victim = pods[2]
        victim_id = f":{victim.process.pid}"
        keys = f"ttsfleet:batch:job:{batch.id}"
        held = wait_for(
            lambda: leases_of(redis, batch.id, victim), 120, interval=0.05,
            what="the victim to hold leases",
        )  # fmt: skip
        victim.process.kill()
        victim.process.wait(timeout=10)

        done = wait_status(client, batch.id, ("completed",), timeout=300)
        assert (done.request_counts.completed, done.request_counts.failed) == (ITEMS, 0)
        audit = [entry.decode().split(" ") for entry in redis.lrange(keys + ":recorded", 0, -1)]
        per_item = collections.Counter(index for index, _ in audit)
        assert per_item == collections.Counter({str(i): 1 for i in range(ITEMS)})
        recorded_by = dict(audit)
        taken_over = [i for i in held if not recorded_by[i.decode()].endswith(victim_id)]
        assert taken_over, "every item the victim held was recorded by it before it died"
        outputs = jsonl(client, done.output_file_id)
        assert sorted(o["custom_id"] for o in outputs) == names
    finally:
        for pod in pods:
            pod.stop()
