"""The batch worker inside a runtime pod: batch items on the room interactive traffic leaves.

It claims an item only while no interactive request waits for the engine and it holds
fewer items than its pacing allows (at most `--batch-worker-concurrency`, fewer while
interactive requests' time to first audio is over `--batch-ttfa-budget`: pacing.py),
and submits each with priority "batch",
so the scheduler gives it only slots no interactive request wants (engine/scheduler.py).
While an item is synthesised its lease is renewed at a third of its length; the audio
goes to the bucket under the item's deterministic key, then the result is recorded
with the claim's fencing token (store.py: a worker that lost its claim is refused).

Interruption-aware: when the pod starts draining (SIGTERM: a rollout, a scale-in, a
spot preemption notice) the worker stops claiming, abandons the items it runs and hands
their leases back at once, so another pod takes them now rather than after the lease
lapses. An item that fails for a reason of its own (an unknown voice) is recorded as
failed; one the server could not serve (draining, the engine stopped) goes back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import random
import time

import numpy as np
import pydantic

from ...engine import api
from .. import audio_encoding, errors
from ..speech_request import SpeechRequest
from ..synthesis import engine_refusal, generation_failure
from . import jobs
from .pacing import BatchPacing
from .store import BatchStore

log = logging.getLogger(__name__)

# Refusals that say nothing about the item: it goes back to the queue for another pod.
_NOT_THE_ITEMS_FAULT = {"draining", "engine_stopped", "queue_full", "cuda_oom"}


class LeaseLost(Exception):
    pass


class BatchWorker:
    def __init__(self, store: BatchStore, runtime, pacing: BatchPacing, lease_s: float):
        self.store = store
        self.runtime = runtime
        self.pacing = pacing  # how many items it may hold now
        self.metrics = runtime.metrics
        self.lease_s = lease_s
        self.poll_s = min(0.25, lease_s / 10)
        # (batch id, index) -> (token, task) of each item this worker runs.
        self.held: dict[tuple[str, str], tuple[str, asyncio.Task]] = {}
        self.stopping = False
        self._loop_task: asyncio.Task | None = None
        self._stopped: asyncio.Task | None = None

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._run())
        self.runtime.drain.on_begin(self.stop_soon)

    def stop_soon(self) -> None:
        """Stop claiming and hand every lease back (called when draining begins)."""
        if self._stopped is None:
            self._stopped = asyncio.get_running_loop().create_task(self.stop())

    async def stop(self) -> None:
        self.stopping = True
        if self._loop_task is not None:
            self._loop_task.cancel()
        held = list(self.held.items())
        for _, task in (entry for _, entry in held):
            task.cancel()
        await asyncio.gather(*(task for _, (_, task) in held), return_exceptions=True)
        handed = 0
        for (batch_id, index), (token, _) in held:
            try:
                released = await self.store.release(batch_id, index, token)
            except Exception:  # the lease lapses by itself
                log.warning("could not hand a batch lease back", extra={"batch_id": batch_id})
                released = False
            handed += released
            self._counted("released" if released else "lost")
        if held:
            log.info("batch worker stopped", extra={"leases_handed_back": handed})

    # ------------------------------------------------------------ claiming
    def _room(self) -> bool:
        allowed = self.pacing.allowed()
        self.metrics.batch_items_allowed.set(allowed)
        if self.stopping or len(self.held) >= allowed:
            return False
        return self.runtime.engine.interactive_waiting() == 0

    async def _run(self) -> None:
        while not self.stopping:
            try:
                busy = self._room() and await self._claim_one()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("batch worker pass failed; retrying")
                busy = False
            if not busy:
                await asyncio.sleep(self.poll_s * (0.5 + random.random()))

    async def _claim_one(self) -> bool:
        """Claim one item (or finalise one batch); False when there was nothing to do."""
        batch_ids = await self.store.active()
        random.shuffle(batch_ids)  # pods spread over batches
        for batch_id in batch_ids:
            answer = await self.store.claim(batch_id, self.lease_s)
            if answer[0] == "item":
                index, token = answer[1], answer[2]
                if self.stopping:  # drain began while claiming
                    await self.store.release(batch_id, index, token)
                    return False
                task = asyncio.create_task(self._item(batch_id, index, token))
                self.held[(batch_id, index)] = (token, task)
                self.metrics.batch_items_held.set(len(self.held))
                return True
            if answer[0] == "finalize":
                await jobs.finalize(self.store, batch_id)
                return True
        return False

    # ------------------------------------------------------------ one item
    async def _item(self, batch_id: str, index: str, token: str) -> None:
        renewing = asyncio.create_task(self._renew(batch_id, index, token))
        try:
            item = await self.store.item(batch_id, index)
            job = await self.store.job(batch_id)
            request_id = f"{batch_id}:{index}"
            audio_s = 0.0
            try:
                line, audio_s = await self._synthesise(job, item, request_id, renewing)
                outcome = "completed"
            except pydantic.ValidationError as exc:  # checked at create; a newer server's?
                refusal = errors.invalid_request(f"the body is not a speech request: {exc}")
                line, outcome = jobs.error_line(item["custom_id"], request_id, refusal), "failed"
            except errors.ApiError as exc:
                if exc.code in _NOT_THE_ITEMS_FAULT:
                    released = await self.store.release(batch_id, index, token)
                    self._counted("released" if released else "lost")
                    return
                line, outcome = jobs.error_line(item["custom_id"], request_id, exc), "failed"
            if await self.store.complete(batch_id, index, token, line, outcome):
                self._counted(outcome, audio_s)
            else:
                self._counted("lost")
                log.warning(
                    "batch item done after its lease was lost; not recorded",
                    extra={"batch_id": batch_id, "custom_id": item["custom_id"]},
                )
        except LeaseLost:
            self._counted("lost")
        except asyncio.CancelledError:
            pass  # stopping: `stop` hands the lease back and counts it
        except Exception:
            self._counted("lost")  # nothing recorded: the lease lapses, another pod takes it
            log.exception("batch item failed", extra={"batch_id": batch_id})
        finally:
            renewing.cancel()
            self.held.pop((batch_id, index), None)
            self.metrics.batch_items_held.set(len(self.held))

    def _counted(self, outcome: str, audio_s: float = 0.0) -> None:
        self.metrics.batch_items.labels(outcome=outcome).inc()
        if audio_s:
            self.metrics.batch_audio_seconds.inc(audio_s)

    async def _renew(self, batch_id: str, index: str, token: str) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            if not await self.store.renew(batch_id, index, token, self.lease_s):
                return  # lost: the item's task sees it and stops

    async def _synthesise(
        self, job: dict, item: dict, request_id: str, renewing: asyncio.Task
    ) -> tuple[dict, float]:
        """The item's output line once its audio is in the bucket, and the audio's seconds."""
        runtime = self.runtime
        body = SpeechRequest.model_validate(item["body"])
        voice = await runtime.synthesizer.speaking_voice(body.voice, job["tenant"])
        request = runtime.synthesizer.build_request(
            text=body.input,
            voice=voice,
            instructions=body.instructions,
            language=body.language,
            sampling=body.sampling_overrides(),
            request_id=request_id,
            sample_format=audio_encoding.sample_format(body.response_format),
        )
        request = dataclasses.replace(request, priority="batch")
        if runtime.drain.draining:
            raise errors.unavailable("this server is draining", code="draining")
        try:
            stream = runtime.engine.submit(request)
        except api.EngineError as exc:
            raise engine_refusal(exc) from None
        try:
            parts = []
            async for chunk in stream:
                if renewing.done():
                    stream.cancel()
                    raise LeaseLost()
                parts.append(chunk.pcm)
            if stream.finish_reason in ("error", "shutdown"):
                cause = getattr(stream, "error", None) or api.EngineStopped("engine stopped")
                raise generation_failure(cause)
        except BaseException:
            stream.cancel()
            raise
        finally:
            stream.release()
        rate = runtime.engine.info.sample_rate
        # Encoding (an mp3 of a minute takes tens of ms) and hashing run off the event
        # loop, which streams the interactive requests' audio meanwhile.
        data, digest, duration_s = await asyncio.to_thread(
            _stored_audio, parts, rate, body.response_format
        )
        key = self.store.audio_object(job["id"], item["custom_id"], body.response_format)
        if renewing.done():
            raise LeaseLost()  # another worker has the item: leave its object alone
        started = time.monotonic()
        await self.store.s3.put(key, data, audio_encoding.CONTENT_TYPES[body.response_format])
        log.debug(
            "batch item stored",
            extra={"key": key, "put_s": round(time.monotonic() - started, 3)},
        )
        return (
            jobs.output_line(
                item["custom_id"],
                request_id,
                {
                    "object": "batch.speech",
                    "bucket": self.store.s3.bucket,
                    "key": key,
                    "content_type": audio_encoding.CONTENT_TYPES[body.response_format],
                    "bytes": len(data),
                    "duration_s": round(duration_s, 3),
                    "sha256": digest,
                },
            ),
            duration_s,
        )


def _stored_audio(parts: list[np.ndarray], rate: int, fmt: str) -> tuple[bytes, str, float]:
    """An item's audio as the file stored for it: (bytes, their sha256, seconds)."""
    pcm = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
    data = audio_encoding.encode_file(pcm, rate, fmt)
    return data, hashlib.sha256(data).hexdigest(), len(pcm) / rate
