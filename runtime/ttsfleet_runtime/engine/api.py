"""The engine's public surface: what the HTTP server and the benchmarks call.

The server never reaches below this module. A request goes in as a
`SynthesisRequest`; audio comes back as an `AudioStream`, an async iterator of
`AudioChunk`s, while the engine keeps batching other requests. Admission is an
explicit decision made at `submit` time: either the request is queued, or
`QueueFull` (with a retry hint) or `InvalidRequest` (with a reason a person
understands) is raised and nothing is held.
"""

from __future__ import annotations

import dataclasses
import functools
import io
from collections.abc import AsyncIterator
from typing import Literal, Protocol

import numpy as np

FinishReason = Literal["eos", "length", "cancelled", "error", "shutdown"]
# The samples a request's chunks carry: "s16", signed 16-bit by `to_s16le`'s rule (what every
# response format but Opus holds), or "f32", float32 in [-1, 1].
SampleFormat = Literal["s16", "f32"]
SAMPLE_FORMATS: tuple[SampleFormat, ...] = ("s16", "f32")
Priority = Literal["interactive", "batch"]
PRIORITIES: tuple[Priority, ...] = ("interactive", "batch")


class EngineError(Exception):
    """Base class of the errors the engine reports to its callers."""


class InvalidRequest(EngineError, ValueError):
    """The request can never succeed as given (unknown voice, bad parameter).

    `param` names the `SynthesisRequest` field (or sampling parameter) at fault,
    when there is one, so an API can point its client at it."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class QueueFull(EngineError):
    """Admission refused because the waiting queue is at its bound."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineStopped(EngineError):
    """The engine is draining or stopped and admits nothing new."""


@dataclasses.dataclass(frozen=True)
class Bound:
    """A closed range [low, high], or (low, high] with `low_open`."""

    low: float
    high: float
    low_open: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def __str__(self) -> str:
        return f"{'(' if self.low_open else '['}{self.low}, {self.high}]"


# Seeds are 32-bit, as the OpenAI-style APIs the server speaks promise; the runner keeps
# them as int64, and a long text's later pieces derive 31-bit ones from them.
MAX_SEED = 2**32 - 1

# The one home of the sampling ranges: `SamplingParams.validate` checks them, and the
# server's request schema (server/speech_request.py) publishes them to clients.
SAMPLING_BOUNDS: dict[str, Bound] = {
    "temperature": Bound(0.0, 2.0),
    "top_k": Bound(0, 1000),  # 0 disables top-k
    "top_p": Bound(0.0, 1.0, low_open=True),
    "repetition_penalty": Bound(0.0, 10.0, low_open=True),
    "subtalker_temperature": Bound(0.0, 2.0),
    "subtalker_top_k": Bound(0, 1000),
    "subtalker_top_p": Bound(0.0, 1.0, low_open=True),
    "seed": Bound(0, MAX_SEED),
}


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling for the talker and the code predictor (sub-talker)."""

    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    seed: int | None = None
    # Hard cap on generated codec frames (`ModelInfo.frame_rate_hz` a second of
    # audio), over the whole request: all pieces of a long text together.
    max_frames: int = 4096
    # EOS is suppressed before this many frames (of the whole request): benchmarks
    # fix the length with min_frames == max_frames.
    min_frames: int = 0

    def validate(self) -> None:
        """Raise InvalidRequest naming the first parameter out of range."""
        checks = [
            (bound.holds(getattr(self, param)), param, f"must be in {bound}")
            for param, bound in SAMPLING_BOUNDS.items()
            if getattr(self, param) is not None  # a seed of None: the engine draws one
        ]
        checks += [
            (self.max_frames >= 1, "max_frames", "must be >= 1"),
            (0 <= self.min_frames <= self.max_frames, "min_frames", "must be in [0, max_frames]"),
        ]
        for ok, param, rule in checks:
            if not ok:
                raise InvalidRequest(f"{param} {rule}", param=param)


@dataclasses.dataclass(frozen=True)
class ClonedVoice:
    """A reference recording turned into what a Base model's prompt needs.

    Computed once by `Engine.clone_voice` (on upload) and stored next to the audio, so
    speaking a stored voice costs no encoder work. `speaker_embedding` is the
    checkpoint's speaker encoder on the recording (float32 [D]). With `ref_codes` (the
    speech tokenizer encoder's codes, int64 [frames, code_groups]) and `ref_text` (its
    transcript) the model clones in context; without them, from the embedding alone
    (qwen-tts' x-vector-only mode). `model` is the `ModelInfo.name` it was computed
    for: another checkpoint's speaker space is not this one's.

    A 25 Hz model's codes are one codebook (`ref_codes` int64 [frames]), and its decoder
    is conditioned on the voice too: `xvector` (campplus.onnx's embedding, float32 [192],
    unit norm) and `ref_mel` (the recording's log-mel, float32 [frames at 100 Hz, 80]),
    the parts of `speech_tokenizer.rate25.DecoderVoice`. Both are None for 12 Hz voices.
    """

    speaker_embedding: np.ndarray
    ref_codes: np.ndarray | None = None
    ref_text: str | None = None
    model: str = ""
    xvector: np.ndarray | None = None
    ref_mel: np.ndarray | None = None

    @property
    def in_context(self) -> bool:
        return self.ref_codes is not None

    def to_bytes(self) -> bytes:
        """An .npz (no pickled objects) that `from_bytes` reads back."""
        arrays = {
            "speaker_embedding": np.asarray(self.speaker_embedding, np.float32),
            "model": np.array(self.model),
        }
        if self.ref_codes is not None:
            arrays["ref_codes"] = np.asarray(self.ref_codes, np.int64)
            arrays["ref_text"] = np.array(self.ref_text or "")
        if self.xvector is not None and self.ref_mel is not None:
            arrays["xvector"] = np.asarray(self.xvector, np.float32)
            arrays["ref_mel"] = np.asarray(self.ref_mel, np.float32)
        out = io.BytesIO()
        np.savez(out, **arrays)
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> ClonedVoice:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            in_context = "ref_codes" in z.files
            conditioned = "xvector" in z.files
            return cls(
                speaker_embedding=z["speaker_embedding"],
                ref_codes=z["ref_codes"] if in_context else None,
                ref_text=str(z["ref_text"]) if in_context else None,
                model=str(z["model"]),
                xvector=z["xvector"] if conditioned else None,
                ref_mel=z["ref_mel"] if conditioned else None,
            )


@dataclasses.dataclass
class SynthesisRequest:
    """One utterance to synthesise.

    `text` is either the whole text, or an async iterator of text deltas (an
    LLM's tokens as they arrive); the engine starts speaking before the text
    iterator ends when it has enough text. A whole text longer than the model
    speaks in one go is split at sentence boundaries and its pieces are spoken
    in order into the one stream (engine/text_pieces.py); a streamed text must
    stay within one piece, or its stream ends with an `InvalidRequest` error.
    """

    text: str | AsyncIterator[str]
    voice: str | None = None  # built-in speaker (CustomVoice); for Base: see cloned_voice
    cloned_voice: ClonedVoice | None = None  # Base models: the voice to clone (required)
    instructions: str | None = None  # VoiceDesign description / style instruction
    language: str = "auto"
    params: SamplingParams = dataclasses.field(default_factory=SamplingParams)
    request_id: str = ""
    # Backpressure: while more than this many seconds of audio wait for the caller to
    # take them from its stream, the request's decode steps pause (it keeps its slot);
    # they resume once the caller has taken half of it. None: never paused.
    buffer_s: float | None = None
    # What `AudioChunk.pcm` holds. "s16" is made on the device for a whole batch of
    # streams at once, so a server that sends 16-bit samples only copies bytes.
    sample_format: SampleFormat = "f32"
    # Word timestamps from the engine's text-to-frame alignment, in the chunks'
    # `words` (engine/word_timing.py). Off by default: it costs the engine thread a
    # little bookkeeping per frame and a tokenisation with offsets.
    timestamps: bool = False
    # "batch": batch jobs on spare capacity (docs/batch.md). The scheduler admits such a
    # request only when no interactive one waits, into at most its background slots, and
    # does not count it against the waiting-queue bound interactive callers see as 429.
    priority: Priority = "interactive"

    def __post_init__(self) -> None:
        if self.priority not in PRIORITIES:
            raise InvalidRequest(
                f"priority must be one of {', '.join(PRIORITIES)}, not {self.priority!r}",
                param="priority",
            )
        if self.sample_format not in SAMPLE_FORMATS:
            raise InvalidRequest(
                f"sample_format must be one of {', '.join(SAMPLE_FORMATS)}, "
                f"not {self.sample_format!r}",
                param="sample_format",
            )


S16_FULL_SCALE = 32767.0  # float 1.0 as a signed 16-bit sample


def to_s16le(pcm: np.ndarray) -> bytes:
    """PCM as signed 16-bit little-endian samples, the samples of every output format
    but Opus. Float samples are clipped to [-1, 1], scaled by `S16_FULL_SCALE` and
    rounded half to even; int16 ones are taken as they are. The codec worker applies
    the same rule on the device for requests that ask for "s16" samples
    (`SynthesisRequest.sample_format`)."""
    if pcm.dtype == np.int16:
        return pcm.astype("<i2", copy=False).tobytes()
    clipped = np.clip(np.asarray(pcm, dtype=np.float32), -1.0, 1.0)
    return (clipped * S16_FULL_SCALE).round().astype("<i2").tobytes()


def to_float32(pcm: np.ndarray) -> np.ndarray:
    """PCM as float32 samples in [-1, 1]: int16 ones scaled by `S16_FULL_SCALE`."""
    if pcm.dtype == np.int16:
        return pcm.astype(np.float32) / S16_FULL_SCALE
    return np.asarray(pcm, dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class TimedWord:
    """One word with its time in the stream's audio, in seconds from its start (the
    rule: engine/word_timing.py).

    `characters` are the request text's characters from the end of the word before
    (`leading`: the whitespace between them, which takes no time) to the end of this
    word, so the `characters` of all words of a request, joined, are its text up to its
    last timed word. `char_start_s`/`char_end_s` are theirs, one each: each of the
    word's tokens shares its span evenly among its characters (`token_spans`: the
    number of the word's characters in each token and that token's start and end).
    They are computed where they are read (the server), not on the engine thread."""

    word: str
    start_s: float
    end_s: float
    text_offset: int  # where `characters` start in the request's text
    leading: str  # the whitespace before the word
    token_spans: tuple[tuple[int, float, float], ...]  # (characters, start_s, end_s)

    @property
    def characters(self) -> tuple[str, ...]:
        return (*self.leading, *self.word)

    @property
    def char_start_s(self) -> tuple[float, ...]:
        return self._char_times()[0]

    @property
    def char_end_s(self) -> tuple[float, ...]:
        return self._char_times()[1]

    def _char_times(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        starts = [self.start_s] * len(self.leading)
        ends = [self.start_s] * len(self.leading)
        for n, t0, t1 in self.token_spans:
            starts.extend(t0 + (t1 - t0) * i / n for i in range(n))
            ends.extend(t0 + (t1 - t0) * (i + 1) / n for i in range(n))
        return tuple(starts), tuple(ends)


@dataclasses.dataclass(frozen=True)
class AudioChunk:
    """A piece of the waveform, in order: mono samples in the format its request named
    (`SynthesisRequest.sample_format`), float32 in [-1, 1] or int16.

    The int16 samples are made on the device for a whole batch of streams at once, by
    `to_s16le`'s rule: the server's event loop then only copies bytes. Converting each
    chunk there with numpy cost the loop a fifth of its busy time at 120 req/s on the
    H100, and its numpy calls released and re-took the interpreter lock that the
    engine's threads wait for. Only the format asked for crosses from the device."""

    pcm: np.ndarray  # float32 or int16, by the request's sample_format
    sample_rate: int
    index: int  # 0-based chunk number within the stream
    frames: int  # codec frames this chunk covers
    t_admitted: float  # time.monotonic() when the request entered a batch slot
    t_emitted: float  # time.monotonic() when this chunk was handed out
    # The words whose timing became known up to this chunk (requests that ask for
    # `SynthesisRequest.timestamps`), as the engine thread marked them (`words`).
    word_marks: tuple = ()

    @functools.cached_property
    def words(self) -> tuple[TimedWord, ...]:
        """The words timed with this chunk: usually ahead of the audio that speaks them
        (engine/word_timing.py). Built here, on the reader's thread, at first access."""
        return tuple(mark.timed() for mark in self.word_marks)

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate

    def s16le(self) -> bytes:
        """The chunk as signed 16-bit little-endian samples (`to_s16le`)."""
        return to_s16le(self.pcm)

    def float32(self) -> np.ndarray:
        """The chunk as float32 samples in [-1, 1] (`to_float32`)."""
        return to_float32(self.pcm)


class AudioStream(Protocol):
    """What `Engine.submit` returns: iterate it for audio, cancel it to stop."""

    request_id: str

    def __aiter__(self) -> AsyncIterator[AudioChunk]: ...

    def cancel(self) -> None:
        """Stop generation and free the slot at once; iteration then ends."""

    def release(self) -> None:
        """The caller is done with the stream (after iterating, or giving up): one
        still running is cancelled, and the engine's bookkeeping of it may be freed
        at once (`finish_reason` and `error` stay readable)."""

    @property
    def finish_reason(self) -> FinishReason | None:
        """Why the stream ended; None while it runs."""

    @property
    def error(self) -> EngineError | None:
        """For a stream that ended with "error": what went wrong, when known
        (an `InvalidRequest` when the request itself was at fault)."""


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    name: str  # served model id, e.g. "Qwen3-TTS-12Hz-1.7B-CustomVoice"
    size: str  # "0.6B" | "1.7B" | "tiny"
    variant: str  # "Base" | "CustomVoice" | "VoiceDesign"
    tokenizer_rate_hz: int  # 12 or 25: the checkpoint's speech tokenizer
    sample_rate: int
    # One talker frame's audio: 12.5 frames of 1,920 samples a second at 12 Hz, 25
    # of 960 at 25 Hz (speech_tokenizer/protocol.py's FrameTiming, read from the checkpoint).
    frame_rate_hz: float
    samples_per_frame: int
    speakers: tuple[str, ...]
    languages: tuple[str, ...]
    supports_instructions: bool
    supports_voice_clone: bool


@dataclasses.dataclass(frozen=True)
class EngineStats:
    queue_depth: int  # admitted but waiting for a batch slot
    active: int  # streams in a batch slot
    max_batch: int
    max_queue: int
    frames_total: int  # codec frames generated since start
    # Playing streams' lead over playback (audio delivered - seconds since their
    # first chunk) at the last step: the smallest; None while nobody plays.
    min_lead_s: float | None = None
    # Streams in a slot whose decode steps wait for their caller to take audio.
    paused: int = 0
    underrun_steps_total: int = 0  # steps at which some playing stream's lead was below 0
    prefill_deferred_total: int = 0  # iterations whose prefill the lead guard cut short
    # Seconds the engine's threads were busy, by phase: the engine thread's "plan",
    # "prefill", "decode" (waiting for the device included), "postprocess", and the
    # codec thread's "codec". Their rates over wall time say where a busy engine's
    # time goes. Empty before the engine has loaded.
    busy_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    gpu_memory_used_bytes: int | None = None
    gpu_memory_total_bytes: int | None = None
    # The talker's paged KV cache: bytes of the blocks streams hold, and of the pool
    # (per stream: used / active). 0 before the engine has loaded.
    kv_cache_used_bytes: int = 0
    kv_cache_total_bytes: int = 0
    # Seconds of each start-up phase that has ended (metrics.STARTUP_PHASES).
    startup_seconds: dict[str, float] = dataclasses.field(default_factory=dict)


class Engine(Protocol):
    info: ModelInfo

    @property
    def ready(self) -> bool:
        """True once weights are loaded, the start's graphs captured and a warm-up
        synthesis spoken (on a GPU), until draining."""

    async def start(self) -> None: ...

    def clone_voice(
        self, audio: np.ndarray, sample_rate: int, transcript: str | None
    ) -> ClonedVoice:
        """A Base model's voice from a mono float32 recording: speaker embedding, and
        with a transcript the reference codes for in-context cloning. Blocking (encoder
        work on the device): call it from a worker thread. Raises InvalidRequest (model
        without cloning, audio the encoders cannot take)."""

    def submit(self, request: SynthesisRequest) -> AudioStream:
        """Admit or refuse now: raises InvalidRequest, QueueFull or EngineStopped."""

    def stats(self) -> EngineStats: ...

    async def stop(self, drain_timeout_s: float = 30.0) -> None:
        """Refuse new work, let running streams finish within the deadline,
        cancel what is left, release the device."""
