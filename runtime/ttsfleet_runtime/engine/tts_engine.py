"""TTSEngine: the `Engine` of engine/api.py, the async front end.

Threads: the server's asyncio loop calls `submit`/`cancel`/`stats` here; the
engine thread (engine_core.py) owns the device and loops prefill -> decode
step -> codec -> deliver. This side only sends the engine thread commands
(`EngineCore.add`, `abort`): it never changes the scheduler or a running
`Sequence`. Chunks reach the caller's loop through its `EngineStream`, so GPU
work never blocks the event loop.

Admission decides everything that can be known before a request runs, so a
request that cannot be served is refused here and never reaches a batch:
bad sampling parameters, an unknown voice or language, a cloned voice this
model cannot speak, instructions or a reference recording longer than a prompt
may be, empty text. A whole text longer than one piece is split
here (text_pieces.py) and spoken piece after piece into its one stream.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import torch

from ..model.config import TTSConfig
from ..model.prompt import PromptBuilder, PromptError, ReferenceTranscriptError
from ..model.text_tokenizer import InvalidText, TextTokenizer
from ..model.weights import resolve_checkpoint
from .api import (
    ClonedVoice,
    EngineStats,
    EngineStopped,
    InvalidRequest,
    ModelInfo,
    QueueFull,
    SamplingParams,
    SynthesisRequest,
)
from .engine_core import EngineCore
from .frame_decoder import read_timing
from .kv_blocks import BLOCK_POSITIONS
from .scheduler import QueueFullError
from .sequence import Sequence, TextFeed
from .startup import StartupClock
from .stream import EngineStream
from .text_pieces import split_text
from .voice_encoders import VoiceEncoders
from .word_timing import WordClock

log = logging.getLogger(__name__)

_SIZE_NAMES = {"0b6": "0.6B", "1b7": "1.7B", "tiny": "tiny"}
_VARIANT_NAMES = {"base": "Base", "custom_voice": "CustomVoice", "voice_design": "VoiceDesign"}


class TTSEngine:
    def __init__(
        self,
        model: str,
        device: str = "cpu",
        *,
        revision: str | None = None,
        max_batch: int = 256,
        max_queue: int = 256,
        cuda_graphs: bool = True,
        dtype: str = "bfloat16",
        weights: str = "bf16",  # "fp8": the decoder layers' matrices in e4m3 (model/fp8.py)
        first_chunk_frames: int = 2,
        chunk_frames: int = 8,
        codec_conv_route: str = "routed",  # on a GPU: see settings.codec_conv_route
        decode_priority: bool = False,
        max_len: int = 4608,  # KV positions per stream: prompt + up to ~6 min of audio
        max_text_tokens: int = 1024,
        piece_tokens: int = 256,  # a long text's pieces: about a minute of speech each
        capture_all_graphs: bool = True,
        progress: Callable[[str], None] | None = None,
        kv_cache_memory: float = 0.5,  # share of the GPU memory free after the weights
        kv_blocks: int | None = None,  # the KV pool's blocks instead (tests)
        kv_block_size: int = BLOCK_POSITIONS,
        compile_cache_dir: str | Path | None = None,  # Triton's cache kept here
        warm_up: bool | None = None,  # a synthesis before ready; None: on a GPU
        keep_codes: bool = False,  # keep every frame's codes on the Sequence (tests, debugging)
    ):
        # First, so the start-up phases are measured from the process's start.
        self.startup = StartupClock()
        if not 1 <= piece_tokens <= max_text_tokens:
            raise ValueError(f"piece_tokens must be in [1, max_text_tokens={max_text_tokens}]")
        self.model_ref = model
        self.device = device
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.piece_tokens = piece_tokens
        self.keep_codes = keep_codes
        self._draining = False
        self.warm_up = device.startswith("cuda") if warm_up is None else warm_up
        self._ready = False
        self._started = False
        path = resolve_checkpoint(model, revision)
        config = TTSConfig.from_file(path / "config.json")
        name = model_name(model)
        self.timing = timing = read_timing(path)
        self.builder = PromptBuilder(config, TextTokenizer.from_checkpoint(path), name)
        self.info = ModelInfo(
            name=name,
            size=_SIZE_NAMES.get(config.tts_model_size, config.tts_model_size),
            variant=_VARIANT_NAMES.get(config.tts_model_type, config.tts_model_type),
            tokenizer_rate_hz=config.tokenizer_rate_hz,
            sample_rate=timing.sample_rate,
            frame_rate_hz=timing.frame_rate_hz,
            samples_per_frame=timing.samples_per_frame,
            speakers=self.builder.speakers,
            languages=self.builder.languages,
            supports_instructions=self.builder.supports_instructions,
            supports_voice_clone=self.builder.supports_voice_clone,
        )
        self._checkpoint = path
        self._voice_encoders = None  # Base only: loaded by start(), or by the first clone
        self._voice_encoders_lock = threading.Lock()
        self.core = EngineCore(
            path,
            config,
            self.builder,
            timing,
            device=device,
            max_batch=max_batch,
            max_queue=max_queue,
            cuda_graphs=cuda_graphs,
            dtype=dtype,
            weights=weights,
            first_chunk_frames=first_chunk_frames,
            chunk_frames=chunk_frames,
            codec_conv_route=codec_conv_route,
            decode_priority=decode_priority,
            max_len=max_len,
            max_text_tokens=max_text_tokens,
            capture_all_graphs=capture_all_graphs,
            progress=progress or (lambda msg: log.info(msg)),
            kv_cache_memory=kv_cache_memory,
            kv_blocks=kv_blocks,
            kv_block_size=kv_block_size,
            compile_cache_dir=Path(compile_cache_dir) if compile_cache_dir else None,
            startup=self.startup,
        )

    @classmethod
    def from_pretrained(
        cls, model: str, device: str = "cpu", revision: str | None = None, **kwargs
    ) -> TTSEngine:
        """`model`: a checkpoint folder, or a hub id (fetched at `revision`)."""
        return cls(str(model), device, revision=revision, **kwargs)

    # The engine thread's parts, for benchmarks and tests.
    @property
    def scheduler(self):
        return self.core.scheduler

    @property
    def runner(self):
        return self.core.runner

    @property
    def model(self):
        return self.core.model

    @property
    def codec(self):
        return self.core.codec

    @property
    def codec_worker(self):
        return self.core.codec_worker

    @property
    def voice_encoders(self) -> VoiceEncoders:
        """Base models only: the voice encoders (loaded on first use)."""
        return self._loaded_voice_encoders()

    # ------------------------------------------------------------ lifecycle
    @property
    def ready(self) -> bool:
        return self._ready and not self._draining

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        # A Base model's voice encoders load before the talker: its KV cache is sized
        # from the memory left after both.
        first = self._loaded_voice_encoders if self.info.supports_voice_clone else None
        await asyncio.get_running_loop().run_in_executor(None, self.core.load, first)
        self.core.start()
        if self.warm_up:
            await self._warm_up()
            self.startup.done("warm_up")
        self._ready = True
        self.startup.ready()
        self.core.start_background_capture()

    async def _warm_up(self) -> None:
        """One short synthesis through the whole path (admission, prefill, decode
        steps, a chunk of every size the ramp makes, the codec, delivery) before
        ready, so the first user request pays no first-call costs. It counts like
        any request in the engine's counters (docs/metrics.md); only the slot time
        behind retry hints is put back. A failure here fails the start: an engine
        that cannot speak must not turn ready."""
        voice = instructions = cloned = None
        if self.builder.speakers:
            voice = self.builder.speakers[0]
        elif self.builder.supports_instructions:
            instructions = "A calm voice."
        elif self.info.supports_voice_clone:
            # A Base model speaks clones only: one of a second of a tone (x-vector),
            # which is the speaker encoder's first call too.
            rate = self.timing.sample_rate
            tone = np.sin(2 * np.pi * 220 * np.arange(rate) / rate)
            cloned = await asyncio.to_thread(
                self.clone_voice, (0.3 * tone).astype(np.float32), rate, None
            )
        else:
            log.info("no warm-up: the model has no voice to speak with")
            return
        frames = self.core.rules.ramp_frames()
        request = SynthesisRequest(
            text="Hello there.",
            voice=voice,
            cloned_voice=cloned,
            instructions=instructions,
            params=SamplingParams(seed=0, max_frames=frames, min_frames=frames),
            request_id="warm-up",
        )
        stream = self._submit(request)  # before ready: not in the retry hints' clock
        async for _ in stream:
            pass
        if stream.finish_reason not in ("eos", "length"):
            raise RuntimeError(f"the warm-up synthesis failed: {stream.error!r}")

    async def stop(self, drain_timeout_s: float = 30.0) -> None:
        self._draining = True
        deadline = time.monotonic() + drain_timeout_s
        while time.monotonic() < deadline and self.core.busy:
            await asyncio.sleep(0.02)
        self.core.abort(None, "shutdown")  # what is left; applied before the thread stops
        if self._started:
            await asyncio.get_running_loop().run_in_executor(None, self.core.stop)
            self._started = False
        self._ready = False

    # ------------------------------------------------------------ voices
    def clone_voice(
        self, audio: np.ndarray, sample_rate: int, transcript: str | None
    ) -> ClonedVoice:
        """See `Engine.clone_voice`: blocking, safe from any thread beside the engine loop
        (engine/voice_encoders.py)."""
        if not self.info.supports_voice_clone:
            raise InvalidRequest(
                f"{self.info.name} is a {self.info.variant} model: only Base models clone voices",
                param="model",
            )
        cloned = self._loaded_voice_encoders().clone(audio, sample_rate, transcript, self.info.name)
        # A voice is stored to be spoken: what its every request would be refused for
        # (a transcript longer than its frames, a prompt past the prefill) is refused now.
        # The prefill's size is known once the engine started (its runner exists).
        runner = self.core.runner
        try:
            voice = self.builder.voice(None, None, "auto", cloned)
            if runner is not None:
                self.builder.check_fits(voice, runner.max_prompt, self.timing.frame_rate_hz)
        except (ReferenceTranscriptError, InvalidText) as e:
            raise InvalidRequest(str(e), param="transcript") from e
        except PromptError as e:
            raise InvalidRequest(str(e), param="audio") from e
        return cloned

    def _loaded_voice_encoders(self) -> VoiceEncoders:
        with self._voice_encoders_lock:
            if self._voice_encoders is None:
                self._voice_encoders = VoiceEncoders(self._checkpoint, self.device)
            return self._voice_encoders

    # ------------------------------------------------------------ requests
    def submit(self, request: SynthesisRequest) -> EngineStream:
        if self._draining or not self._ready:
            raise EngineStopped("the engine is not accepting requests")
        return self._submit(request)

    def _submit(self, request: SynthesisRequest) -> EngineStream:
        params = request.params
        params.validate()
        if request.buffer_s is not None and not request.buffer_s > 0:
            raise InvalidRequest(
                f"buffer_s must be a positive number of seconds, got {request.buffer_s!r}",
                param="buffer_s",
            )
        # Refuse under overload before the admission work (tokenising the
        # voice, instructions and text); `add` checks again.
        self._admit(lambda: self.core.inbox.check_room(request.priority == "batch"))
        try:
            voice = self.builder.voice(
                request.voice, request.instructions, request.language, request.cloned_voice
            )
            prompt_length = self.builder.check_fits(
                voice, self.core.runner.max_prompt, self.timing.frame_rate_hz
            )
        except PromptError as e:
            raise InvalidRequest(str(e), param=e.param) from e
        except InvalidText as e:
            where = "cloned_voice" if request.cloned_voice is not None else "instructions"
            raise InvalidRequest(f"{where}: {e}", param=where) from e
        # Word timestamps map tokens to words by their characters (engine/word_timing.py).
        encode_offsets = self.builder.tokenizer.encode_offsets if request.timestamps else None
        if isinstance(request.text, str):
            # Tokenised here, once: the first piece's ids go with it (split_text
            # counts every piece it returns), so the engine thread need not.
            tokenised: dict[str, list[int]] = {}

            def count(part: str) -> int:
                if part not in tokenised:
                    tokenised[part] = self.builder.text_ids(part)
                return len(tokenised[part])

            try:
                pieces = split_text(request.text, count, self.piece_tokens)
            except InvalidText as e:
                raise InvalidRequest(str(e), param="text") from e
            if not pieces:
                raise InvalidRequest("text is empty", param="text")
            first = TextFeed(
                self.builder.text_ids,
                pieces[0],
                tokenised.get(pieces[0]),
                encode_offsets=encode_offsets,
                # Here, on the caller's loop: the engine thread then only counts frames.
                offsets=encode_offsets(pieces[0])[1] if encode_offsets else None,
            )
            text, later = first, pieces[1:]
        else:
            text, later = TextFeed(self.builder.text_ids, encode_offsets=encode_offsets), []
        loop = asyncio.get_running_loop()
        request_id = request.request_id or uuid.uuid4().hex
        stream = EngineStream(
            request_id,
            loop,
            self._cancel,
            self.core.pace,
            request.buffer_s,
            request.sample_format,
        )
        seed = params.seed if params.seed is not None else secrets.randbits(31)
        seq = Sequence(
            request_id,
            params,
            seed,
            voice,
            text,
            stream,
            later_pieces=later,
            prompt_length=prompt_length,
            keep_codes=self.keep_codes,
            # Retry hints speak of users' slots: only the warm-up comes before ready.
            times_slot=self._ready,
            background=request.priority == "batch",
        )
        if request.timestamps:
            whole = request.text if isinstance(request.text, str) else None
            seq.word_clock = WordClock(
                self.timing.frame_rate_hz,
                voice.prompt_text_ids,
                len(voice.ref_text_ids),
                whole,
                [text.committed, *later] if whole is not None else None,
            )
        stream.seq = seq
        self._admit(lambda: self.core.add(seq))
        if not isinstance(request.text, str):
            # Kept on the sequence (a task nobody references may be collected
            # mid-flight) and cancelled when its stream ends: a text source
            # that goes quiet would otherwise hold the task forever.
            seq.text_pump = loop.create_task(self._pump_text(seq, request.text))
            stream.on_end.append(seq.text_pump.cancel)
        self.core.wake()
        return stream

    def _admit(self, step: Callable[[], None]) -> None:
        """Run an admission step; a full queue is QueueFull."""
        try:
            step()
        except QueueFullError as e:
            raise QueueFull(str(e), e.retry_after_s) from e

    async def _pump_text(self, seq: Sequence, deltas: AsyncIterator[str]) -> None:
        try:
            async for delta in deltas:
                if seq.finished:
                    return
                # A delta inside a word commits nothing: waking the engine thread
                # for it would cost an iteration (a plan) and no frame.
                if seq.text.feed(delta):
                    self.core.wake()
            seq.text.close()
        except Exception as e:  # the caller's text source failed
            seq.text.close(e)
        self.core.wake()

    def _cancel(self, seq: Sequence) -> None:
        self.core.abort(seq, "cancelled")

    def interactive_waiting(self) -> int:
        """Interactive requests the engine's last plan left waiting for a slot: a cheap
        hint for the batch worker, which asks before every claim. It takes no lock and
        touches no device, unlike `stats`, so the event loop never waits for the engine
        thread to ask it; requests submitted since that plan are not in it yet."""
        return self.core.interactive_waiting

    def stats(self) -> EngineStats:
        waiting, active = self.core.inbox.counts()
        with self.core.lock:
            kv = self.core.scheduler.kv
            kv_used, kv_total = (kv.used, kv.total) if kv is not None else (0, 0)
        block_bytes = self.core.runner.cache.bytes_per_block if self.core.runner else 0
        busy = dict(self.core.busy_s)
        if self.core.codec_worker is not None:
            busy["codec"] = self.core.codec_worker.busy_s
        used = total = None
        if self.device.startswith("cuda") and torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            used = total - free
        return EngineStats(
            queue_depth=waiting,
            active=active,
            paused=self.core.inbox.paused(),
            max_batch=self.max_batch,
            max_queue=self.max_queue,
            frames_total=self.core.frames_total,
            min_lead_s=self.core.min_lead_s,
            underrun_steps_total=self.core.underrun_steps,
            prefill_deferred_total=self.core.prefill_deferred,
            busy_seconds=busy,
            gpu_memory_used_bytes=used,
            gpu_memory_total_bytes=total,
            kv_cache_used_bytes=kv_used * block_bytes,
            kv_cache_total_bytes=kv_total * block_bytes,
            startup_seconds=self.startup.seconds,
        )


def model_name(model: str) -> str:
    """The served name of `model`: a folder's name, or a hub id's last part
    (never the hash-named snapshot folder a hub download lands in)."""
    path = Path(model)
    return path.name if path.is_dir() else model.rstrip("/").rsplit("/", 1)[-1]
