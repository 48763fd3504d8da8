"""Turns generated frames into audio on its own thread (and, on a GPU, its own
CUDA stream), so the decode loop never waits for the codec.

The engine thread hands over jobs in order: a chunk of a stream's frames, or
the end of a stream, each naming its stream by a `CodecStream` (what the worker
reads of a sequence, a snapshot: it never sees or writes the engine's
`Sequence`). The worker keeps its own state per stream, keyed by the sequence's
`key` (the decoder's slot, opened at a stream's first chunk with the voice's
decoder conditioning and closed at its end; the reference audio still to drop;
whether it failed) and delivers chunks and ends to the callers in the order they
were handed over.
It drives the checkpoint's speech tokenizer through `FrameDecoder`
(frame_decoder.py), so the same worker serves the 12 Hz codec and the 25 Hz
DiT decoder. Chunks of different streams that are waiting together are decoded
in one batched call per frame count (the decoder pads it to the smallest
captured batch bucket that holds it: the smallest is captured at start-up, the
others on this thread soon after, `capture_later`, the largest first; a batch
larger than every captured bucket meanwhile runs the same step eagerly, slower),
and the batch's audio comes to the host in one copy.

A call returns the audio that is final: all of it for the 12 Hz codec, whole
DiT blocks whose look-ahead has arrived for the 25 Hz decoder (none, early in a
stream). A job whose call made no audio delivers nothing; its frames are
counted in the next chunk the stream gets, so chunks (numbered as delivered)
carry every frame and a stream's first chunk is its first audio. The last
chunk of a stream also takes what the decoder held back (`finish`).

A causal decoder's last chunk may be shorter than any captured frame count;
it is padded up to the next one (`frame_buckets`) and the audio cut back, so it
replays a CUDA graph instead of running the codec eagerly (hundreds of kernel
launches from Python, under the GIL the engine thread needs). The padding
changes no sample of the real frames; it only spoils the stream's codec state,
which nothing reads after the last chunk. A non-causal decoder (25 Hz) never
pads: its last chunk runs at its own length.

A stream that clones a voice in context continues a reference recording:
the reference decodes its codes together with the generated ones and cuts
the recording's audio off. The worker does the same to a stream's codec
state: `prime` hands over the recording's codes before the first chunk, as
pieces of the captured frame counts (so they replay CUDA graphs and batch
with other streams' chunks; a remainder shorter than any runs eagerly,
never padded, as padding would enter the state), and their audio is dropped.
The first chunk's audio then follows the recording's without a seam.

A failed decode ends only the streams that make it fail: the codecs write a
stream's state back only after a successful call, so a failed batched call is
retried one stream at a time, and a stream that fails alone ends with "error"
(`on_failure(key)` tells the engine, which finishes the sequence and frees its
batch slot; until the engine's end arrives the worker drops the stream's chunks). The decode and the
end of an utterance (`finish`) are retried apart: a retry must never repeat a
call that succeeded, or a bystander would hear a chunk twice.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable

import numpy as np
import torch

from ..speech_tokenizer.protocol import DecodedAudio, FrameDecoder
from ..transfers import to_host
from .api import S16_FULL_SCALE, AudioChunk, FinishReason, SampleFormat
from .isolation import together_else_alone

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CodecStream:
    """What the worker reads of one sequence, handed over with each of its jobs."""

    key: int  # the sequence's engine-unique key: the worker's state is keyed by it
    request_id: str
    stream: object  # its EngineStream: the worker delivers chunks and ends to it
    voice: object  # its VoicePrompt: the decoder's conditioning (25 Hz)
    t_admitted: float | None
    sample_format: SampleFormat = "f32"  # what its chunks carry (`SynthesisRequest`)
    background: bool = False  # batch work: nobody waits for its first audio


@dataclasses.dataclass
class _StreamState:
    """The worker's own state of one stream (codec thread only)."""

    slot: int | None = None  # the decoder's slot, from its first chunk
    # Audio of primed reference frames still to drop: a decoder that holds audio back
    # (25 Hz) makes some of it only with the first chunks.
    skip_samples: int = 0
    failed: bool = False  # ended with "error" here: its later chunks are dropped
    # Timed words of chunks that made no audio yet (25 Hz look-ahead): with the next.
    words: tuple = ()


@dataclasses.dataclass
class ChunkJob:
    request: CodecStream
    codes: np.ndarray  # [n, groups]
    last: bool = False  # the stream's final chunk: its codec state is not needed after it
    prime: bool = False  # reference codes: decoded into the codec state, audio dropped
    words: tuple = ()  # WordMarks that go out with this chunk's audio (timestamps)


@dataclasses.dataclass
class EndJob:
    request: CodecStream
    reason: FinishReason


@dataclasses.dataclass
class CaptureLater:
    """Graphs (batch, frames) to capture whenever no chunk waits; `captured`
    is called after each one, from the codec thread."""

    graphs: list[tuple[int, int]]
    captured: Callable[[], None]


class CodecWorker:
    def __init__(
        self,
        codec: FrameDecoder,
        device: str,
        frame_buckets: tuple[int, ...] = (),
        on_failure: Callable[[int], None] = lambda key: None,
        capture_lock: threading.Lock | None = None,
    ):
        self.codec = codec
        # Shared with the model runner: one graph capture at a time in the process.
        self.capture_lock = capture_lock or threading.Lock()
        self._later: CaptureLater | None = None
        self.on_failure = on_failure
        self.frame_buckets = tuple(
            sorted(frame_buckets)
        )  # frame counts with a captured codec graph
        self.device = torch.device(device)
        self.sample_rate = codec.timing.sample_rate
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[int, _StreamState] = {}  # by CodecStream.key; codec thread only
        self.busy_s = 0.0  # seconds spent decoding (waits for jobs excluded)
        self._thread = threading.Thread(target=self._run, name="tts-codec", daemon=True)
        self._thread.start()

    def chunk(
        self, request: CodecStream, codes: np.ndarray, last: bool = False, words: tuple = ()
    ) -> None:
        self._jobs.put(ChunkJob(request, codes, last, words=words))

    def prime(self, request: CodecStream, codes: np.ndarray) -> None:
        """Decode a reference recording's codes [n, groups] into the stream's codec
        state before its first chunk; their audio is dropped, also where the decoder
        makes it only with later calls."""
        for start, stop in prime_pieces(len(codes), self.frame_buckets):
            self._jobs.put(ChunkJob(request, codes[start:stop], prime=True))

    def end(self, request: CodecStream, reason: FinishReason) -> None:
        self._jobs.put(EndJob(request, reason))

    def capture_later(self, graphs: list[tuple[int, int]], captured: Callable[[], None]) -> None:
        """Capture these graphs on the codec thread while it has nothing to decode
        (after start-up: a chunk waits for at most one capture)."""
        self._jobs.put(CaptureLater(list(graphs), captured))

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join()

    def _run(self) -> None:
        if self.stream is not None:
            torch.cuda.set_device(self.device.index if self.device.index is not None else 0)
        while True:
            if self._later is not None and self._jobs.empty():
                self._capture_one()
                continue
            jobs = [self._jobs.get()]
            while not self._jobs.empty():
                jobs.append(self._jobs.get())
            stop = None in jobs
            for job in jobs:
                if isinstance(job, CaptureLater):
                    self._later = job
            jobs = [j for j in jobs if j is not None and not isinstance(j, CaptureLater)]
            started = time.monotonic()
            try:
                with torch.inference_mode(), _on(self.stream):
                    self._process(jobs)
            except Exception:
                # Not a decode (those are isolated per stream below): a fault of
                # the worker itself, with these jobs in hand.
                log.exception("codec worker failed; ending the streams it was serving")
                for job in jobs:
                    if isinstance(job, EndJob):  # the engine has finished it already
                        self._streams.pop(job.request.key, None)
                        job.request.stream.end("error")
                    else:
                        self._fail(job.request)
            self.busy_s += time.monotonic() - started
            if stop:
                return

    def _capture_one(self) -> None:
        later = self._later
        batch, frames = later.graphs.pop(0)
        if not later.graphs:
            self._later = None
        started = time.monotonic()
        try:
            with self.capture_lock, torch.inference_mode(), _on(self.stream):
                self.codec.capture([batch], [frames])
        except Exception:
            # Its batches replay a larger captured graph instead (or run eagerly).
            log.exception(
                "capturing a codec graph failed; capturing no more",
                extra={"batch": batch, "frames": frames},
            )
            self._later = None
            return
        log.debug(
            "captured a graph after ready",
            extra={
                "worker": "codec",
                "batch": batch,
                "frames": frames,
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        later.captured()

    def _process(self, jobs: list) -> None:
        # Waves: a stream appears at most once per wave, so its chunks decode in order.
        wave: list = []
        seen: set[int] = set()
        for job in jobs:
            if job.request.key in seen:
                self._run_wave(wave)
                wave, seen = [], set()
            wave.append(job)
            seen.add(job.request.key)
        self._run_wave(wave)

    def _run_wave(self, wave: list) -> None:
        # Ends first: the codec has one slot per batch slot, and a stream that
        # took an ended stream's batch slot may have its first chunk in this
        # wave. A wave holds a stream once, so no end here has a chunk here.
        by_len: dict[int, list[ChunkJob]] = {}
        for job in wave:
            if isinstance(job, EndJob):
                # The engine's last word on this stream: nothing of it follows.
                state = self._streams.pop(job.request.key, None)
                if state is not None and state.slot is not None:
                    self.codec.close(state.slot)
                job.request.stream.end(job.reason)
            else:
                by_len.setdefault(self._decode_length(job), []).append(job)
        for n, chunk_jobs in sorted(by_len.items(), key=_urgency):
            self._decode(n, chunk_jobs)

    def _decode_length(self, job: ChunkJob) -> int:
        """Frames to decode for `job`: its own, or a causal decoder's last chunk padded
        up to a captured count."""
        n = len(job.codes)
        if job.last and self.codec.causal and n not in self.frame_buckets:
            return next((b for b in self.frame_buckets if b > n), n)
        return n

    def _decode(self, n: int, jobs: list[ChunkJob]) -> None:
        """Decode `jobs` (chunks of `n` frames, one per stream) and deliver their audio.
        Two steps, each batched and, when the batch raises, retried one stream at a
        time (`together_else_alone`): the decode, then what the decoder held back for
        the streams whose last chunk this is. Each step leaves the decoder's state as
        it was when it raises, and a retry never repeats a step that succeeded, so no
        bystander's frames are decoded twice."""
        # A stream that failed here, or one the engine ended at once (a cancel, a
        # failure elsewhere): its chunks until the engine's end are nobody's audio.
        jobs = [j for j in jobs if not (self._state(j.request).failed or j.request.stream.ended)]
        audio: dict[int, np.ndarray] = {}

        def decode(some: list[ChunkJob]) -> None:
            audio.update(zip(map(id, some), self._decode_together(n, some), strict=True))

        def finish(some: list[ChunkJob]) -> None:
            rest = _on_host(
                self.codec.finish([self._state(job.request).slot for job in some]),
                [job.request.sample_format for job in some],
            )
            for job, tail in zip(some, rest, strict=True):
                self._state(job.request).slot = None  # finish closed it
                if len(tail):
                    audio[id(job)] = np.concatenate([audio[id(job)], tail])

        decoded = together_else_alone(jobs, decode, self._decode_failed, "batched codec decode")
        ending = [job for job in decoded if job.last]
        finished = together_else_alone(ending, finish, self._decode_failed, "codec finish")
        failed = {id(job) for job in ending} - {id(job) for job in finished}
        self._deliver(n, [(j, audio[id(j)]) for j in decoded if id(j) not in failed])

    def _state(self, request: CodecStream) -> _StreamState:
        state = self._streams.get(request.key)
        if state is None:  # its first job
            state = self._streams[request.key] = _StreamState()
        return state

    def _decode_failed(self, job: ChunkJob, exc: Exception) -> None:
        log.error(
            "codec decode failed; ending the stream",
            exc_info=exc,
            extra={"request_id": job.request.request_id},
        )
        self._fail(job.request)

    def _fail(self, request: CodecStream) -> None:
        """End the stream with "error", drop its later chunks and tell the engine."""
        state = self._state(request)
        if state.slot is not None:
            self.codec.close(state.slot)
            state.slot = None
        state.failed = True
        request.stream.end("error")
        self.on_failure(request.key)

    def _decode_together(self, n: int, jobs: list[ChunkJob]) -> list[np.ndarray]:
        """One decoder call over `jobs`' chunks -> each one's audio on the host."""
        states = [self._state(job.request) for job in jobs]
        for job, state in zip(jobs, states, strict=True):
            if state.slot is None:
                state.slot = self.codec.open(job.request.voice)
        # Padding repeats a chunk's last frame (any valid codes would do). The codes stay
        # on the host: the decoder moves them where it reads them.
        codes = torch.from_numpy(
            np.stack(
                [np.concatenate([j.codes, j.codes[-1:].repeat(n - len(j.codes), 0)]) for j in jobs]
            )
        )
        decoded = self.codec.decode([state.slot for state in states], codes)
        return _on_host(decoded, [job.request.sample_format for job in jobs])

    def _deliver(self, n: int, decoded: list[tuple[ChunkJob, np.ndarray]]) -> None:
        now = time.monotonic()
        spf = self.codec.timing.samples_per_frame
        for job, pcm in decoded:
            frames = len(job.codes)
            if n > frames:  # a padded last chunk: the padding's audio is cut off
                pcm = pcm[: frames * spf]
            state = self._state(job.request)
            if job.prime:  # the reference recording's audio, now or with later calls
                state.skip_samples += frames * spf
            if state.skip_samples:
                cut = min(state.skip_samples, len(pcm))
                pcm, state.skip_samples = pcm[cut:], state.skip_samples - cut
            if job.prime:
                continue
            stream = job.request.stream
            stream.frames_decoded += frames
            state.words += job.words
            if not len(pcm):
                continue  # nothing final yet: these frames (and words) go with the next chunk
            words, state.words = state.words, ()
            stream.deliver(
                AudioChunk(
                    pcm=pcm,
                    sample_rate=self.sample_rate,
                    index=stream.chunks_delivered,
                    frames=stream.frames_decoded - stream.frames_delivered,
                    t_admitted=job.request.t_admitted,
                    t_emitted=now,
                    word_marks=words,
                )
            )


def _urgency(group: tuple[int, list[ChunkJob]]) -> tuple[bool, int]:
    """The order of a wave's decoder calls (one per frame count): first a call with a
    stream that has no audio out yet (its time to first audio is running), then the
    smaller chunks (streams early in the ramp, with the least lead). Under load a
    wave holds first chunks beside other streams' 8-frame chunks; those callers have
    seconds of audio ahead of them. A batch job's first chunk is not urgent: nobody
    listens for it. A stream is in one call of a wave, so its own chunks keep their
    order."""
    frames, jobs = group
    first_audio = any(
        not job.prime and not job.request.background and job.request.stream.chunks_delivered == 0
        for job in jobs
    )
    return (not first_audio, frames)


def _on_host(decoded: DecodedAudio, formats: list[SampleFormat]) -> list[np.ndarray]:
    """Each stream's audio of one decoder call on the host, in the sample format its
    request named (`formats`, one per stream): int16 is made on the device for the whole
    batch at once, and one copy brings back only the formats some stream asked for."""
    if not any(decoded.lengths):
        return [np.zeros(0, _NUMPY_TYPES[fmt]) for fmt in formats]
    samples = decoded.samples.float().contiguous()
    wanted = set(formats)
    # Both formats in one copy (one wait): the float32 samples travel as int16 pairs.
    parts = []
    if "f32" in wanted:
        parts.append(samples.view(torch.int16))
    if "s16" in wanted:
        parts.append(samples.clamp(-1.0, 1.0).mul_(S16_FULL_SCALE).round_().to(torch.int16))
    host = to_host(torch.cat(parts) if len(parts) > 1 else parts[0]).numpy()
    n = samples.shape[0]
    by_format = {}
    if "f32" in wanted:
        by_format["f32"] = host[: 2 * n].view(np.float32)
    if "s16" in wanted:
        by_format["s16"] = host[-n:]
    bounds = np.cumsum([0, *decoded.lengths])
    return [
        by_format[fmt][start:stop]
        for fmt, start, stop in zip(formats, bounds[:-1], bounds[1:], strict=True)
    ]


_NUMPY_TYPES = {"f32": np.float32, "s16": np.int16}


def prime_pieces(frames: int, buckets: tuple[int, ...]) -> list[tuple[int, int]]:
    """[start, stop) pieces of `frames` reference frames: the largest captured
    frame counts first, then what is left as one piece."""
    pieces, start = [], 0
    for size in sorted(buckets, reverse=True):
        while frames - start >= size:
            pieces.append((start, start + size))
            start += size
    if start < frames:
        pieces.append((start, frames))
    return pieces


class _on:
    """`torch.cuda.stream(s)` when there is a stream, else nothing."""

    def __init__(self, stream):
        self.ctx = torch.cuda.stream(stream) if stream is not None else None

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)
