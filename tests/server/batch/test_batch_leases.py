"""The work queue's leases on the real Redis: an item is claimed with a fencing token,
a lapsed lease returns it to the queue, and only the claim that holds the item now may
record it, once. A worker that was paused past its lease cannot record an item twice."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from ttsfleet_runtime.server.batch.store import BatchStore


@pytest.fixture
async def store(redis_server):
    import redis.asyncio

    batches = BatchStore(redis.asyncio.Redis.from_url(redis_server.url), None, "unused")
    yield batches
    await batches.redis.aclose()


async def new_batch(store: BatchStore, items: int, window_s: float = 3600) -> str:
    batch_id = f"batch_{uuid.uuid4().hex}"
    now = time.time()
    record = {
        "id": batch_id,
        "tenant": "t",
        "status": "validating",
        "input_file_id": "file-x",
        "completion_window": "1h",
        "created_at": int(now),
        "expires_at": int(now + window_s),
        "expires_at_ms": int((now + window_s) * 1000),
        "total": items,
        "completed": 0,
        "failed": 0,
    }
    await store.create(record, [{"custom_id": f"c{i}", "body": {}} for i in range(items)])
    return batch_id


def line(name: str) -> dict:
    return {"custom_id": name, "response": {"status_code": 200}}


async def test_a_lapsed_lease_goes_to_the_next_claim_and_the_old_holder_is_fenced_off(store):
    batch_id = await new_batch(store, 1)
    kind, index, paused_token = await store.claim(batch_id, lease_s=0.05)
    assert kind == "item"
    assert await store.claim(batch_id, lease_s=30) == ["idle"]  # held: nothing to claim

    # The holder is paused past its lease; another worker's claim takes the item back.
    taken = await claimed_within(store, batch_id, 10)
    assert taken[0] == "item" and taken[1] == index and taken[2] != paused_token

    # The paused worker wakes: its renewal and its completion are refused, nothing recorded.
    assert not await store.renew(batch_id, index, paused_token, 30)
    assert not await store.complete(batch_id, index, paused_token, line("paused"), "completed")
    assert await store.complete(batch_id, index, taken[2], line("current"), "completed")
    # Recorded once: a second completion, even by the holder, changes nothing.
    assert not await store.complete(batch_id, index, taken[2], line("again"), "completed")
    results, _ = await store.results(batch_id)
    assert results == {index: line("current")}
    assert (await store.job(batch_id))["completed"] == "1"
    assert await store.redis.lrange(f"ttsfleet:batch:job:{batch_id}:recorded", 0, -1) == [
        f"{index} ".encode()  # one accepted completion (this store names no worker)
    ]


async def claimed_within(store: BatchStore, batch_id: str, timeout_s: float) -> list[str]:
    """The first claim that gets an item, polled until the deadline."""
    deadline = time.monotonic() + timeout_s
    while (answer := await store.claim(batch_id, 30))[0] != "item":
        assert time.monotonic() < deadline, f"no item claimable in {timeout_s} s: {answer}"
        await asyncio.sleep(0.02)
    return answer


async def test_a_renewed_lease_keeps_the_item_and_a_released_one_is_claimed_again_at_once(store):
    batch_id = await new_batch(store, 2)
    _, first, token = await store.claim(batch_id, lease_s=30)
    assert await store.renew(batch_id, first, token, 30)
    _, second, _ = await store.claim(batch_id, lease_s=30)
    assert second != first
    assert await store.release(batch_id, first, token)  # drain: handed back now
    again = await store.claim(batch_id, lease_s=30)
    assert again[:2] == ["item", first] and again[2] != token
    assert not await store.complete(batch_id, first, token, line("stale"), "completed")


async def test_cancel_stops_claims_and_the_batch_finalises_once_running_items_end(store):
    batch_id = await new_batch(store, 3)
    _, index, token = await store.claim(batch_id, lease_s=30)
    assert await store.cancel(batch_id) == "cancelling"
    assert await store.claim(batch_id, lease_s=30) == ["idle"]  # no new claims, one runs
    assert await store.complete(batch_id, index, token, line("ran"), "completed")
    assert await store.claim(batch_id, lease_s=30) == ["finalize"]
    assert await store.claim(batch_id, lease_s=30) == ["busy"]  # one finaliser at a time


async def test_the_completion_window_stops_claims(store):
    batch_id = await new_batch(store, 2, window_s=-1)
    assert await store.claim(batch_id, lease_s=30) == ["finalize"]
    assert (await store.job(batch_id))["stop"] == "expired"
