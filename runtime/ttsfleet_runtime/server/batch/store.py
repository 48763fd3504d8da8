"""Where batches live: their state and work queue in Redis, their files and audio in S3.

Redis keys, all under `ttsfleet:batch:`:
- `file:<id>`: a file's record (tenant, name, purpose, bytes); its bytes are the
  object `<prefix>/files/<id>` in the bucket;
- `job:<id>`: a batch's record (tenant, status, OpenAI's timestamps, counts, `stop`:
  why claims stopped, "cancelled" or "expired");
- `job:<id>:items` (index -> the line's custom_id and body), `:pending` (indices not
  yet claimed, a list), `:leases` (index -> lease deadline, ms, a sorted set),
  `:holders` (index -> the fencing token of its current claim), `:workers` (index ->
  the worker that claimed it last), `:results` (index -> its output or error line),
  `:recorded` (one "index worker" entry per recorded completion: an audit);
- `tenant:<tenant>:jobs`: the tenant's batches by creation time; `active`: batches
  with work left, which the workers scan; `fence`: the counter fencing tokens come from.

Every change of an item's state is one Lua script, atomic in Redis, timed by Redis's own
clock (no worker's clock matters):
- `claim` returns lapsed leases to `pending`, stops claims once the completion window
  ended, leases the next pending item with a new fencing token, and says when the
  batch is ready to finalise (nothing pending or claims stopped, no lease held);
- `renew` extends a lease only for its token; `complete` records an item's result
  only for the token that holds it now, once (`HSETNX`); `release` hands a held item
  back. A worker that lost its lease (paused, partitioned, its lease lapsed and the
  item went to another) is refused, so no item is recorded twice.
"""

from __future__ import annotations

import json
import time
import urllib.parse

from ..response_cache.s3_client import S3Client

PREFIX = "ttsfleet:batch:"
ACTIVE = PREFIX + "active"
FENCE = PREFIX + "fence"
# How long one worker may take to write a batch's output files before another may.
FINALIZE_LEASE_MS = 120_000
# States in which items may still be claimed or are running.
RUNNING_STATES = ("validating", "in_progress", "cancelling")
FINAL_STATES = ("completed", "failed", "expired", "cancelled")

_CLAIM = """
local job, pending, leases, holders, active, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local workers = KEYS[7]
local lease_ms, want_item, finalize_ms, batch_id = tonumber(ARGV[1]), ARGV[2] == '1', tonumber(ARGV[3]), ARGV[4]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local status = redis.call('HGET', job, 'status')
if not status then
  redis.call('SREM', active, batch_id)
  return {'gone'}
end
if status == 'finalizing' then
  if now < tonumber(redis.call('HGET', job, 'finalize_deadline_ms') or '0') then return {'busy'} end
  redis.call('HSET', job, 'finalize_deadline_ms', now + finalize_ms)
  return {'finalize'}
end
if status ~= 'validating' and status ~= 'in_progress' and status ~= 'cancelling' then
  redis.call('SREM', active, batch_id)
  return {'done'}
end
for _, index in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now)) do
  redis.call('ZREM', leases, index)
  redis.call('HDEL', holders, index)
  redis.call('LPUSH', pending, index)
end
local stop = redis.call('HGET', job, 'stop')
if not stop and now >= tonumber(redis.call('HGET', job, 'expires_at_ms')) then
  stop = 'expired'
  redis.call('HSET', job, 'stop', stop)
end
if not stop and want_item then
  local index = redis.call('LPOP', pending)
  if index then
    local token = redis.call('INCR', fence)
    redis.call('HSET', holders, index, token)
    redis.call('HSET', workers, index, ARGV[5])
    redis.call('ZADD', leases, now + lease_ms, index)
    if status == 'validating' then
      redis.call('HSET', job, 'status', 'in_progress', 'in_progress_at', math.floor(now / 1000))
    end
    return {'item', index, tostring(token)}
  end
end
if redis.call('ZCARD', leases) == 0 and (stop or redis.call('LLEN', pending) == 0) then
  redis.call('HSET', job, 'status', 'finalizing', 'finalizing_at', math.floor(now / 1000),
    'finalize_deadline_ms', now + finalize_ms)
  return {'finalize'}
end
return {'idle'}
"""

_RENEW = """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1
"""

_COMPLETE = """
local job, leases, holders, results = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('HGET', holders, ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', holders, ARGV[1])
redis.call('ZREM', leases, ARGV[1])
if redis.call('HSETNX', results, ARGV[1], ARGV[3]) == 0 then return 0 end
redis.call('HINCRBY', job, ARGV[4], 1)
redis.call('RPUSH', KEYS[5], ARGV[1] .. ' ' .. redis.call('HGET', KEYS[6], ARGV[1]))
return 1
"""

_RELEASE = """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('LPUSH', KEYS[3], ARGV[1])
return 1
"""

_CANCEL = """
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'validating' or status == 'in_progress' then
  redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', ARGV[1])
  redis.call('HSETNX', KEYS[1], 'stop', 'cancelled')
end
return redis.call('HGET', KEYS[1], 'status')
"""

_FINALIZED = """
if redis.call('HGET', KEYS[1], 'status') ~= 'finalizing' then return 0 end
local stop = redis.call('HGET', KEYS[1], 'stop')
local status = 'completed'
if stop then status = stop end
redis.call('HSET', KEYS[1], 'status', status, status .. '_at', ARGV[1],
  'output_file_id', ARGV[2], 'error_file_id', ARGV[3])
redis.call('SREM', KEYS[2], ARGV[4])
return 1
"""


def file_key(file_id: str) -> str:
    return f"{PREFIX}file:{file_id}"


def job_key(batch_id: str) -> str:
    return f"{PREFIX}job:{batch_id}"


def tenant_jobs_key(tenant: str) -> str:
    return f"{PREFIX}tenant:{tenant}:jobs"


class JobKeys:
    """The Redis keys of one batch."""

    def __init__(self, batch_id: str):
        self.batch_id = batch_id
        self.job = job_key(batch_id)
        self.items = self.job + ":items"
        self.pending = self.job + ":pending"
        self.leases = self.job + ":leases"
        self.holders = self.job + ":holders"
        self.results = self.job + ":results"
        # index -> the worker of its latest claim; and one "index worker" entry per
        # recorded completion (an audit: each index must appear once).
        self.workers = self.job + ":workers"
        self.recorded = self.job + ":recorded"


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _record(raw: dict) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}


class BatchStore:
    """The batches of one fleet: records and queues in Redis, bytes in the bucket."""

    def __init__(self, redis_client, s3: S3Client, prefix: str, worker: str = ""):
        self.redis = redis_client
        self.worker = worker  # who claims (pod name and pid), in the audit
        self.s3 = s3
        self.prefix = prefix.strip("/")
        self._claim = redis_client.register_script(_CLAIM)
        self._renew = redis_client.register_script(_RENEW)
        self._complete = redis_client.register_script(_COMPLETE)
        self._release = redis_client.register_script(_RELEASE)
        self._cancel = redis_client.register_script(_CANCEL)
        self._finalized = redis_client.register_script(_FINALIZED)

    # ------------------------------------------------------------ files
    def file_object(self, file_id: str) -> str:
        return f"{self.prefix}/files/{file_id}"

    def audio_object(self, batch_id: str, custom_id: str, fmt: str) -> str:
        """The item's audio: deterministic, so a retried item overwrites, never adds."""
        return f"{self.prefix}/outputs/{batch_id}/{urllib.parse.quote(custom_id, safe='')}.{fmt}"

    async def put_file(self, record: dict, data: bytes) -> None:
        await self.s3.put(self.file_object(record["id"]), data, "application/jsonl")
        await self.redis.hset(file_key(record["id"]), mapping=record)

    async def file(self, file_id: str) -> dict[str, str] | None:
        raw = await self.redis.hgetall(file_key(file_id))
        return _record(raw) if raw else None

    async def file_content(self, file_id: str) -> bytes | None:
        return await self.s3.get(self.file_object(file_id))

    async def delete_file(self, file_id: str) -> None:
        await self.s3.delete(self.file_object(file_id))
        await self.redis.delete(file_key(file_id))

    # ------------------------------------------------------------ batches
    async def create(self, record: dict, items: list[dict]) -> None:
        keys = JobKeys(record["id"])
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                keys.items, mapping={str(i): json.dumps(item) for i, item in enumerate(items)}
            )
            pipe.rpush(keys.pending, *range(len(items)))
            pipe.hset(keys.job, mapping=record)
            pipe.zadd(tenant_jobs_key(record["tenant"]), {record["id"]: record["created_at"]})
            pipe.sadd(ACTIVE, record["id"])
            await pipe.execute()

    async def job(self, batch_id: str) -> dict[str, str] | None:
        raw = await self.redis.hgetall(job_key(batch_id))
        return _record(raw) if raw else None

    async def tenant_jobs(self, tenant: str, after: str | None, limit: int) -> list[str]:
        """The tenant's batch ids, newest first, those after `after` (an id) only."""
        ids = [_text(i) for i in await self.redis.zrevrange(tenant_jobs_key(tenant), 0, -1)]
        if after is not None and after in ids:
            ids = ids[ids.index(after) + 1 :]
        return ids[: limit + 1]

    async def active(self) -> list[str]:
        return [_text(i) for i in await self.redis.smembers(ACTIVE)]

    async def item(self, batch_id: str, index: str) -> dict:
        return json.loads(await self.redis.hget(JobKeys(batch_id).items, index))

    async def claim(self, batch_id: str, lease_s: float, want_item: bool = True) -> list[str]:
        """["item", index, token], ["finalize"] (this caller writes the output files
        now), or ["idle"|"busy"|"done"|"gone"]."""
        k = JobKeys(batch_id)
        answer = await self._claim(
            keys=[k.job, k.pending, k.leases, k.holders, ACTIVE, FENCE, k.workers],
            args=[
                int(lease_s * 1000),
                "1" if want_item else "0",
                FINALIZE_LEASE_MS,
                batch_id,
                self.worker,
            ],
        )
        return [_text(a) for a in answer]

    async def renew(self, batch_id: str, index: str, token: str, lease_s: float) -> bool:
        k = JobKeys(batch_id)
        return bool(
            await self._renew(keys=[k.leases, k.holders], args=[index, token, int(lease_s * 1000)])
        )

    async def complete(
        self, batch_id: str, index: str, token: str, line: dict, outcome: str
    ) -> bool:
        """Record the item's output (`outcome` "completed") or error ("failed") line;
        False when `token` no longer holds the item (nothing is recorded)."""
        k = JobKeys(batch_id)
        return bool(
            await self._complete(
                keys=[k.job, k.leases, k.holders, k.results, k.recorded, k.workers],
                args=[index, token, json.dumps(line), outcome],
            )
        )

    async def release(self, batch_id: str, index: str, token: str) -> bool:
        k = JobKeys(batch_id)
        return bool(await self._release(keys=[k.leases, k.holders, k.pending], args=[index, token]))

    async def cancel(self, batch_id: str) -> str:
        return _text(await self._cancel(keys=[job_key(batch_id)], args=[int(time.time())]))

    async def results(self, batch_id: str) -> tuple[dict[str, dict], dict[str, dict]]:
        """(index -> recorded line, index -> item) of the batch."""
        k = JobKeys(batch_id)
        results = await self.redis.hgetall(k.results)
        items = await self.redis.hgetall(k.items)
        return (
            {_text(i): json.loads(v) for i, v in results.items()},
            {_text(i): json.loads(v) for i, v in items.items()},
        )

    async def finalized(self, batch_id: str, output_file_id: str, error_file_id: str) -> bool:
        return bool(
            await self._finalized(
                keys=[job_key(batch_id), ACTIVE],
                args=[int(time.time()), output_file_id, error_file_id, batch_id],
            )
        )

    async def close(self) -> None:
        await self.redis.aclose()
        await self.s3.close()
