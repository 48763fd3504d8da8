"""The order of the codec worker's calls within a wave: chunks of different frame
counts are separate decoder calls, and the one that brings a stream its first audio
goes first. A recording decoder stands in for the codec (the order is the worker's
decision, not the decoder's)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import torch

from ttsfleet_runtime.engine.codec_worker import ChunkJob, CodecStream, CodecWorker
from ttsfleet_runtime.speech_tokenizer.protocol import DecodedAudio

SAMPLES_PER_FRAME = 4


class RecordingDecoder:
    """A FrameDecoder that makes silence and logs each call's (streams, frames)."""

    causal = True
    code_groups = 2
    timing = SimpleNamespace(sample_rate=16, samples_per_frame=SAMPLES_PER_FRAME)

    def __init__(self):
        self.calls: list[tuple[int, int]] = []
        self._slots = 0

    def open(self, voice) -> int:
        self._slots += 1
        return self._slots

    def decode(self, slots, codes) -> DecodedAudio:
        frames = codes.shape[1]
        self.calls.append((len(slots), frames))
        per_stream = frames * SAMPLES_PER_FRAME
        return DecodedAudio(torch.zeros(len(slots) * per_stream), (per_stream,) * len(slots))

    def finish(self, slots) -> DecodedAudio:
        return DecodedAudio(torch.zeros(0), (0,) * len(slots))

    def close(self, slot) -> None:
        pass


class Listener:
    def __init__(self, chunks_delivered: int):
        self.chunks_delivered = chunks_delivered
        self.frames_decoded = self.frames_delivered = 0
        self.got: list = []
        self.ended = False

    def deliver(self, chunk) -> None:
        self.got.append(chunk)
        self.chunks_delivered += 1


_keys = itertools.count()


def stream_seq(chunks_delivered: int, background: bool = False) -> CodecStream:
    return CodecStream(
        key=next(_keys),
        request_id="",
        stream=Listener(chunks_delivered),
        voice=None,
        t_admitted=0.0,
        background=background,
    )


def chunk(request: CodecStream, frames: int) -> ChunkJob:
    return ChunkJob(request, np.zeros((frames, RecordingDecoder.code_groups), dtype=np.int64))


def test_a_first_chunk_is_decoded_before_the_chunks_of_playing_streams():
    decoder = RecordingDecoder()
    worker = CodecWorker(decoder, "cpu")
    try:
        playing = [stream_seq(chunks_delivered=5) for _ in range(3)]
        ramping = stream_seq(chunks_delivered=2)
        new = stream_seq(chunks_delivered=0)
        # Handed over in this order by the engine thread: the steady chunks first.
        wave = [chunk(s, 8) for s in playing] + [chunk(ramping, 4), chunk(new, 2)]
        worker._run_wave(wave)
        assert decoder.calls == [(1, 2), (1, 4), (3, 8)]
        assert [len(s.stream.got) for s in [*playing, ramping, new]] == [1, 1, 1, 1, 1]
    finally:
        worker.stop()


def test_a_first_chunk_goes_first_even_when_it_is_the_longest_call():
    decoder = RecordingDecoder()
    worker = CodecWorker(decoder, "cpu")
    try:
        # A larger first chunk (first_chunk_frames 4) beside a stream ramping at 2.
        worker._run_wave([chunk(stream_seq(1), 2), chunk(stream_seq(0), 4)])
        assert decoder.calls == [(1, 4), (1, 2)]
    finally:
        worker.stop()


def test_a_batch_jobs_first_chunk_waits_its_turn_by_length():
    # Nobody listens for batch work's first audio: its 2-frame first chunk is not put
    # ahead of the interactive streams' calls; by length it still goes before the 4s.
    decoder = RecordingDecoder()
    worker = CodecWorker(decoder, "cpu")
    try:
        batch_first = chunk(stream_seq(0, background=True), 2)
        interactive_first = chunk(stream_seq(0), 8)
        worker._run_wave([chunk(stream_seq(2), 4), batch_first, interactive_first])
        assert decoder.calls == [(1, 8), (1, 2), (1, 4)]
    finally:
        worker.stop()
