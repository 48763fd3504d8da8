"""TTSEngine: the `Engine` of engine/api.py over the model runner, the
scheduler and the streaming codec.

Threads: the server's asyncio loop calls `submit`/`cancel`/`stats`; one engine
thread owns the device and loops prefill -> decode step -> codec -> deliver.
Chunks reach the caller's loop through `call_soon_threadsafe`, so GPU work
never blocks the event loop.
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

from ..codec.decoder import load_speech_tokenizer
from ..codec.streaming import StreamingCodec
from ..model.prompt import PromptBuilder, PromptError
from ..model.text_tokenizer import TextTokenizer
from ..model.weights import LoadedModel, load_model, resolve_checkpoint
from .api import (
    AudioChunk,
    EngineStats,
    EngineStopped,
    FinishReason,
    InvalidRequest,
    ModelInfo,
    QueueFull,
    SynthesisRequest,
)
from .codec_worker import CODEC_BATCH, CodecWorker
from .model_runner import ModelRunner, SlotParams
from .scheduler import QueueFullError, Scheduler
from .sequence import Sequence, Status, TextFeed

log = logging.getLogger(__name__)

SAMPLE_RATE = 24000
_SIZE_NAMES = {"0b6": "0.6B", "1b7": "1.7B", "tiny": "tiny"}
_VARIANT_NAMES = {"base": "Base", "custom_voice": "CustomVoice", "voice_design": "VoiceDesign"}


class _Stream:
    """The caller's side of a sequence: an async iterator of AudioChunks."""

    def __init__(self, engine: TTSEngine, request_id: str, loop: asyncio.AbstractEventLoop):
        self.request_id = request_id
        self._engine = engine
        self._loop = loop
        self._queue: asyncio.Queue[AudioChunk | None] = asyncio.Queue()
        self._finish_reason: FinishReason | None = None
        self.seq: Sequence | None = None
        self._end_lock = threading.Lock()
        self._ended = False

    def __aiter__(self) -> AsyncIterator[AudioChunk]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[AudioChunk]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    def cancel(self) -> None:
        if self.seq is not None:
            self._engine._cancel(self.seq)

    @property
    def finish_reason(self) -> FinishReason | None:
        return self._finish_reason

    # Called from the engine thread.
    def deliver(self, chunk: AudioChunk) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, chunk)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            pass

    def end(self, reason: FinishReason) -> None:
        with self._end_lock:
            if self._ended:
                return
            self._ended = True

        def _end():
            self._finish_reason = reason
            self._queue.put_nowait(None)

        try:
            self._loop.call_soon_threadsafe(_end)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            pass


class TTSEngine:
    def __init__(
        self,
        model: str,
        device: str = "cpu",
        *,
        max_batch: int = 64,
        max_queue: int = 256,
        cuda_graphs: bool = True,
        dtype: str = "bfloat16",
        first_chunk_frames: int = 2,
        chunk_frames: int = 8,
        max_len: int = 4608,  # KV positions per slot: prompt + up to ~6 min of audio
        max_text_tokens: int = 1024,
        capture_all_graphs: bool = True,
        progress: Callable[[str], None] | None = None,
    ):
        self.model_ref = model
        self.device = device
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.cuda_graphs = cuda_graphs
        self.dtype = dtype
        self.first_chunk_frames = first_chunk_frames
        self.chunk_frames = chunk_frames
        self.max_len = max_len
        self.max_text_tokens = max_text_tokens
        # False: decode graphs are captured on first use of a bucket (quicker
        # start; the first step of each new bucket pays the capture).
        self.capture_all_graphs = capture_all_graphs
        self._progress = progress or (lambda msg: log.info(msg))
        self.scheduler: Scheduler[Sequence] = Scheduler(max_batch, max_queue)
        self._lock = threading.RLock()  # scheduler + sequence status
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = False
        self._stopping = False
        self._draining = False
        self._to_release: list[Sequence] = []  # finished; their batch slots to reset
        self.frames_total = 0
        self.model: LoadedModel | None = None
        self.runner: ModelRunner | None = None
        self.codec: StreamingCodec | None = None
        self.codec_worker: CodecWorker | None = None
        path = resolve_checkpoint(model)
        from ..model.config import TTSConfig

        self._config = TTSConfig.from_file(path / "config.json")
        self.builder = PromptBuilder(self._config, TextTokenizer.from_checkpoint(path))
        self._path = path
        self.info = ModelInfo(
            name=_model_name(model, self._config),
            size=_SIZE_NAMES.get(self._config.tts_model_size, self._config.tts_model_size),
            variant=_VARIANT_NAMES.get(self._config.tts_model_type, self._config.tts_model_type),
            tokenizer_rate_hz=25 if "25hz" in self._config.tokenizer_type else 12,
            sample_rate=SAMPLE_RATE,
            speakers=self.builder.speakers,
            languages=self.builder.languages,
            supports_instructions=self.builder.supports_instructions,
            supports_voice_clone=False,
        )

    @classmethod
    def from_pretrained(cls, model: str, device: str = "cpu", **kwargs) -> TTSEngine:
        return cls(str(model), device, **kwargs)

    # ------------------------------------------------------------ lifecycle
    @property
    def ready(self) -> bool:
        return self._ready and not self._draining

    async def start(self) -> None:
        if self._thread is not None:
            return
        await asyncio.get_running_loop().run_in_executor(None, self._load)
        self._thread = threading.Thread(target=self._run, name="tts-engine", daemon=True)
        self._thread.start()
        self._ready = True

    def _load(self) -> None:
        t0 = time.monotonic()
        say = self._progress
        self.model = load_model(self._path, self.device, self.dtype, max_positions=self.max_len, progress=say)
        self.runner = ModelRunner(self.model, max_batch=self.max_batch, max_len=self.max_len,
                                  max_text=self.max_text_tokens, device=self.device,
                                  cuda_graphs=self.cuda_graphs)
        say("loading the codec decoder")
        codec_dtype = torch.float32 if self.dtype == "float32" else torch.bfloat16
        decoder = load_speech_tokenizer(self._path / "speech_tokenizer", self.device, codec_dtype)
        self.codec = StreamingCodec(decoder, self.max_batch, self.device)
        if self.runner.use_graphs:
            if self.capture_all_graphs:
                self.runner.capture_all(say)
            buckets = [b for b in self.runner.batch_buckets if b <= CODEC_BATCH] or [self.max_batch]
            frame_buckets = sorted({self.first_chunk_frames, self.chunk_frames})
            self.codec.capture(buckets, frame_buckets)
            say("captured codec graphs")
        else:
            frame_buckets = []
        self.codec_worker = CodecWorker(self.codec, self.device, SAMPLE_RATE, tuple(frame_buckets))
        say(f"engine ready in {time.monotonic() - t0:.1f}s")

    async def stop(self, drain_timeout_s: float = 30.0) -> None:
        self._draining = True
        deadline = time.monotonic() + drain_timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                busy = bool(self.scheduler.running) or bool(self.scheduler.waiting)
            if not busy:
                break
            await asyncio.sleep(0.02)
        with self._lock:
            left = list(self.scheduler.waiting) + list(self.scheduler.running.values())
        for seq in left:
            self._finish_off_thread(seq, "shutdown")
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
            self._thread = None
        self._ready = False
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()

    # ------------------------------------------------------------ requests
    def submit(self, request: SynthesisRequest) -> _Stream:
        if self._draining or self._stopping or not self._ready:
            raise EngineStopped("the engine is not accepting requests")
        params = request.params
        params.validate()
        try:
            voice = self.builder.voice(request.voice, request.instructions, request.language)
        except PromptError as e:
            raise InvalidRequest(str(e)) from e
        loop = asyncio.get_running_loop()
        request_id = request.request_id or uuid.uuid4().hex
        stream = _Stream(self, request_id, loop)
        if isinstance(request.text, str):
            if not request.text.strip():
                raise InvalidRequest("text is empty")
            text = TextFeed(self.builder.text_ids, request.text)
        else:
            text = TextFeed(self.builder.text_ids)
        seed = params.seed if params.seed is not None else secrets.randbits(31)
        seq = Sequence(request_id, params, seed, voice, text, stream)
        stream.seq = seq
        with self._lock:
            try:
                self.scheduler.admit(seq)
            except QueueFullError as e:
                raise QueueFull(str(e), e.retry_after_s) from e
        if not isinstance(request.text, str):
            loop.create_task(self._pump_text(seq, request.text))
        self._wake.set()
        return stream

    async def _pump_text(self, seq: Sequence, deltas: AsyncIterator[str]) -> None:
        try:
            async for delta in deltas:
                if seq.finished:
                    return
                seq.text.feed(delta)
                self._wake.set()
            seq.text.close()
        except Exception as e:  # the caller's text source failed
            seq.text.close(e)
        self._wake.set()

    def _cancel(self, seq: Sequence) -> None:
        self._finish_off_thread(seq, "cancelled")

    def _finish_off_thread(self, seq: Sequence, reason: FinishReason) -> None:
        # Frees the slot now; the engine thread releases device-side state.
        with self._lock:
            if seq.finished:
                return
            self._finish(seq, reason)
        self._wake.set()

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        """Under the lock: take seq out of the scheduler now. Its stream ends
        after its last chunk (codec worker); a cancelled or failed one at once."""
        held = time.monotonic() - seq.t_admitted if seq.t_admitted else None
        self.scheduler.remove(seq, held)
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        self._to_release.append(seq)
        if reason not in ("eos", "length"):
            seq.stream.end(reason)
        if self.codec_worker is not None:
            self.codec_worker.end(seq, reason)
        else:
            seq.stream.end(reason)

    def stats(self) -> EngineStats:
        with self._lock:
            waiting, active = len(self.scheduler.waiting), len(self.scheduler.running)
        used = total = None
        if self.device.startswith("cuda") and torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            used = total - free
        return EngineStats(queue_depth=waiting, active=active, max_batch=self.max_batch,
                           max_queue=self.max_queue, frames_total=self.frames_total,
                           gpu_memory_used_bytes=used, gpu_memory_total_bytes=total)

    # ------------------------------------------------------------ engine thread
    def _run(self) -> None:
        if self.device.startswith("cuda"):
            # Work on the device the model was loaded to ("cuda" = the current one).
            index = torch.device(self.device).index
            torch.cuda.set_device(index if index is not None else torch.cuda.current_device())
        while not self._stopping:
            try:
                did_work = self._iteration()
            except Exception:
                log.exception("engine step failed; failing the running streams")
                with self._lock:
                    for seq in list(self.scheduler.running.values()):
                        self._finish(seq, "error")
                did_work = True
            if not did_work:
                self._wake.wait(timeout=0.05)
                self._wake.clear()
        self._release_finished()
        if self.codec_worker is not None:
            self.codec_worker.stop()

    def _release_finished(self) -> None:
        with self._lock:
            done, self._to_release = self._to_release, []
        for seq in done:
            if seq.slot is not None and self.scheduler.running.get(seq.slot) is None:
                self.runner.release(seq.slot)

    @torch.inference_mode()
    def _iteration(self) -> bool:
        self._release_finished()
        with self._lock:
            for seq in list(self.scheduler.waiting) + list(self.scheduler.running.values()):
                self._take_text(seq)
            plan = self.scheduler.plan()
        for seq in plan.prefill:
            self._prefill(seq)
        with self._lock:
            running = [s for s in self.scheduler.running.values() if not s.finished]
            for seq in running:
                self._take_text(seq)
        if not running:
            return bool(plan.prefill)
        batch = max(s.slot for s in running) + 1
        active = [False] * batch
        live = 0
        for seq in running:
            live = max(live, seq.position + 1)
            if seq.runnable:
                active[seq.slot] = True
        if not any(active):
            return bool(plan.prefill)
        codes, nxt = self.runner.decode(batch, active, live)
        self._after_step(running, codes.numpy(), nxt.numpy())
        return True

    def _take_text(self, seq: Sequence) -> None:
        """Commit newly arrived text ids; hand the runner the trailing ones."""
        if seq.text.refresh() and seq.text.error is not None and not seq.finished:
            self._finish(seq, "error")
            return
        if seq.slot is None or seq.status is not Status.RUNNING or seq.text_final:
            return
        ids = seq.text.ids
        trailing = ids[1:]
        if seq.text.closed:
            trailing = trailing + [self._config.tts_eos_token_id]
        new = trailing[seq.text_sent:]
        if new:
            self.runner.set_text(seq.slot, new, seq.text_sent)
            seq.text_sent += len(new)
        seq.text_final = seq.text.closed

    def _prefill(self, seq: Sequence) -> None:
        seq.t_admitted = time.monotonic()  # it holds a batch slot from here
        if not seq.text.ids:  # the text stream ended empty
            with self._lock:
                self._finish(seq, "eos")
            return
        p = seq.params
        try:
            embeds = self.builder.prefill_embeds(self.model.talker, seq.voice, seq.text.ids[0])
            params = SlotParams(p.temperature, p.top_k, p.top_p, p.repetition_penalty,
                                p.subtalker_temperature, p.subtalker_top_k, p.subtalker_top_p,
                                seq.seed, p.min_frames)
            self.runner.prefill(seq.slot, embeds, params)
        except ValueError as e:
            log.warning("prefill refused", extra={"request_id": seq.request_id, "error": str(e)})
            with self._lock:
                self._finish(seq, "error")
            return
        seq.position = embeds.shape[0]
        with self._lock:
            if not seq.finished:
                seq.status = Status.RUNNING
                self._take_text(seq)

    def _after_step(self, running: list[Sequence], codes: np.ndarray, nxt: np.ndarray) -> None:
        eos = self._config.talker.codec_eos_token_id
        ready: list[Sequence] = []
        ending: list[tuple[Sequence, FinishReason]] = []
        for seq in running:
            if seq.finished or not seq.runnable:
                continue
            frame = codes[seq.slot].copy()
            seq.pending.append(frame)
            seq.all_codes.append(frame)
            seq.frames += 1
            seq.position += 1
            self.frames_total += 1
            reason: FinishReason | None = None
            if nxt[seq.slot] == eos:
                reason = "eos"
            elif seq.frames >= seq.params.max_frames or seq.position + 1 >= self.max_len:
                reason = "length"
            limit = self.first_chunk_frames if seq.chunks == 0 else self.chunk_frames
            if reason is not None or len(seq.pending) >= limit:
                ready.append(seq)
            if reason is not None:
                ending.append((seq, reason))
        self._emit(ready, {id(seq) for seq, _ in ending})
        with self._lock:
            for seq, reason in ending:
                if not seq.finished:
                    self._finish(seq, reason)

    def _emit(self, ready: list[Sequence], ending: set[int]) -> None:
        """Hand the ready chunks to the codec worker (`ending`: ids of the
        sequences whose chunk is their last)."""
        for seq in ready:
            if seq.pending and not seq.finished:
                self.codec_worker.chunk(seq, np.stack(seq.pending), seq.chunks, last=id(seq) in ending)
                seq.chunks += 1
            seq.pending = []


def _model_name(model: str, config) -> str:
    path = Path(model)
    return path.name if path.is_dir() else model.rsplit("/", 1)[-1]
