"""The codec worker's retry of a failed batch: the decode and the end of an utterance
(`finish`) are retried apart, so a bystander's frames are never decoded twice, and
the stream that fails alone ends, reported to the engine by its key. A stand-in
decoder counts what each slot was given (the order of calls is the worker's
decision, not the decoder's)."""

from __future__ import annotations

import itertools
from collections import Counter
from types import SimpleNamespace

import numpy as np
import torch

from ttsfleet_runtime.engine.codec_worker import ChunkJob, CodecStream, CodecWorker
from ttsfleet_runtime.speech_tokenizer.protocol import DecodedAudio

SAMPLES_PER_FRAME = 4
_keys = itertools.count()


class CountingDecoder:
    """Makes silence; counts the frames each slot decoded; its `finish` raises for a
    batch that holds the slot of a voice named "broken" (a corrupt stored voice)."""

    causal = False
    code_groups = 1
    timing = SimpleNamespace(sample_rate=16, samples_per_frame=SAMPLES_PER_FRAME)

    def __init__(self):
        self.decoded: Counter[int] = Counter()
        self.voices: dict[int, str] = {}
        self.open_slots: set[int] = set()
        self._slots = itertools.count()

    def open(self, voice) -> int:
        slot = next(self._slots)
        self.voices[slot] = voice
        self.open_slots.add(slot)
        return slot

    def decode(self, slots, codes) -> DecodedAudio:
        per_stream = codes.shape[1] * SAMPLES_PER_FRAME
        for slot in slots:
            self.decoded[slot] += codes.shape[1]
        return DecodedAudio(torch.zeros(len(slots) * per_stream), (per_stream,) * len(slots))

    def finish(self, slots) -> DecodedAudio:
        if any(self.voices[slot] == "broken" for slot in slots):
            raise RuntimeError("injected: the stored voice is corrupt")
        for slot in slots:
            self.close(slot)
        return DecodedAudio(torch.zeros(0), (0,) * len(slots))

    def close(self, slot) -> None:
        self.open_slots.remove(slot)


class Listener:
    def __init__(self):
        self.chunks_delivered = self.frames_decoded = self.frames_delivered = 0
        self.samples = 0
        self.reason: str | None = None

    @property
    def ended(self) -> bool:
        return self.reason is not None

    def deliver(self, chunk) -> None:
        self.chunks_delivered += 1
        self.samples += len(chunk.pcm)

    def end(self, reason) -> None:
        self.reason = self.reason or reason


def last_chunk(voice: str, frames: int = 6) -> ChunkJob:
    request = CodecStream(next(_keys), voice, Listener(), voice, 0.0)
    return ChunkJob(request, np.zeros((frames, 1), dtype=np.int64), last=True)


def test_a_failed_finish_decodes_no_bystander_twice():
    decoder = CountingDecoder()
    failed: list[int] = []
    worker = CodecWorker(decoder, "cpu", on_failure=failed.append)
    try:
        jobs = [last_chunk("calm"), last_chunk("broken"), last_chunk("bright")]
        worker._run_wave(jobs)
        bystanders, victim = [jobs[0], jobs[2]], jobs[1]
        assert sorted(decoder.decoded.values()) == [6, 6, 6]  # each stream's frames once
        for job in bystanders:
            assert job.request.stream.samples == 6 * SAMPLES_PER_FRAME
        assert victim.request.stream.reason == "error" and failed == [victim.request.key]
        assert decoder.open_slots == set()  # finished, or closed for the failure
    finally:
        worker.stop()
