"""EngineCore: the engine thread. It owns the device and loops

    plan (scheduler) -> prefill -> decode step (model runner) -> postprocess
    (scheduler) -> chunks to the codec worker -> audio to the streams.

Host and device overlap: an iteration launches its decode step and leaves
it running; the next iteration plans and prefills the newcomers while the
device steps (the prefill's kernels queue behind the step on the engine's one
stream, into slots the step does not advance), and only then waits for the
step's codes, applies them and launches the next step. Everything the engine
thread sends the device goes down that one stream, so the device sees it in
the order the thread issued it; what the thread must not do meanwhile is read
the step's results early or reuse host memory a queued copy still reads
(transfers.py).

The async front end (tts_engine.py) and the codec worker only send commands
(commands.py: add, abort, pause/resume, a codec failure) into `inbox`, which this thread
drains at the top of each iteration; so the scheduler and every `Sequence`
change on this thread alone, and every status change goes through the
scheduler (`Scheduler.finish` and friends). `lock` is held while this thread
changes the scheduler, so that readers on other threads (stats, the queue bound
at admission) see it whole; nothing else takes it to write.

Failure isolation: one request must never end another. Each per-sequence
phase (taking its text: text_intake.py, its prefill, its codec decode) fails
only that sequence; a decode step that fails is bisected down to the rows that
make it fail (step_launch.py).

Beside the loop: the graphs captured while idle after ready (background_capture.py).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..model import ops as talker_ops
from ..model.config import TTSConfig
from ..model.prompt import PromptBuilder
from ..model.weights import LoadedModel, load_model
from ..speech_tokenizer.rate12 import convs as codec_convs
from .api import EngineError, FinishReason
from .background_capture import BackgroundCapture
from .codec_worker import CodecStream, CodecWorker
from .commands import CodecFailed, Inbox
from .compile_cache import use_compile_cache
from .frame_decoder import FrameDecoder, FrameTiming, load_frame_decoder
from .graph_capture import buckets_before_ready, prefill_buckets
from .isolation import together_else_alone
from .kv_blocks import KVBlocks
from .model_runner import ModelRunner
from .prefill_rows import PREFILL_PROMPTS, Prompt, SlotParams
from .scheduler import Scheduler, StepRules, end_with_error, failure
from .sequence import Sequence
from .startup import StartupClock
from .step_launch import StepInFlight, launch_isolating
from .text_intake import TextIntake

log = logging.getLogger(__name__)

# The engine thread's phases (`EngineCore.busy_s`); the codec thread's time is
# the codec worker's `busy_s`.
BUSY_PHASES = ("plan", "prefill", "decode", "step_wait", "postprocess")


class EngineCore:
    def __init__(
        self,
        path: Path,
        config: TTSConfig,
        builder: PromptBuilder,
        timing: FrameTiming,
        *,
        device: str,
        max_batch: int,
        max_queue: int,
        cuda_graphs: bool,
        dtype: str,
        weights: str,
        first_chunk_frames: int,
        chunk_frames: int,
        codec_conv_route: str,
        decode_priority: bool,
        max_len: int,
        max_text_tokens: int,
        capture_all_graphs: bool,
        progress: Callable[[str], None],
        kv_cache_memory: float,
        kv_blocks: int | None,
        kv_block_size: int,
        compile_cache_dir: Path | None = None,
        startup: StartupClock | None = None,
    ):
        self.path = path
        self.compile_cache_dir = compile_cache_dir
        self.startup = startup or StartupClock()
        self.background_capture = BackgroundCapture(self.startup)
        self.config = config
        self.builder = builder
        self.timing = timing
        self.device = device
        self.max_batch = max_batch
        self.cuda_graphs = cuda_graphs
        self.dtype = dtype
        self.weights = weights  # the decoder layers' matrices: bf16 or fp8 (model/fp8.py)
        # Chunks are whole emission steps of the decoder (25 Hz: DiT blocks).
        self.first_chunk_frames = first_chunk_frames = timing.chunk_frames(first_chunk_frames)
        self.chunk_frames = chunk_frames = timing.chunk_frames(chunk_frames)
        self.codec_conv_route = codec_conv_route
        self.decode_priority = decode_priority
        self.max_len = max_len
        self.max_text_tokens = max_text_tokens
        self.kv_cache_memory = kv_cache_memory
        self.kv_blocks = kv_blocks
        self.kv_block_size = kv_block_size
        # True: a few graphs before ready, the rest while idle after it (see
        # `start_background_capture`). False (benchmarks): decode and prefill
        # graphs are captured on first use of a bucket, the codec's all at load.
        self.capture_all_graphs = capture_all_graphs
        self.progress = progress
        self.scheduler: Scheduler[Sequence] = Scheduler(
            max_batch,
            max_queue,
            max_prefill_prompts=PREFILL_PROMPTS,
            max_prefill_tokens=prefill_buckets(max_len)[-1],
        )
        self.rules = StepRules(
            eos_id=config.talker.codec_eos_token_id,
            max_len=max_len,
            first_chunk_frames=first_chunk_frames,
            chunk_frames=chunk_frames,
        )
        # Held by the engine thread while it changes the scheduler; readers elsewhere
        # take it for a whole view (see the module's docstring).
        self.lock = threading.RLock()
        self.inbox = Inbox(self.scheduler, self.lock)  # commands from other threads
        self.text_intake = TextIntake(self.scheduler, builder, max_text_tokens)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.frames_total = 0
        # Running streams' lead over playback (see `_leads`), for the stats.
        self.min_lead_s: float | None = None
        self.underrun_steps = 0
        self.prefill_deferred = 0
        # Interactive requests left waiting by the last plan: what a batch worker asks
        # before it claims more (read without the lock; a plan's worth stale at most).
        self.interactive_waiting = 0
        self.step_s = 0.0  # seconds between decode steps while stepping (moving average)
        self._in_flight: StepInFlight | None = None  # launched, not applied yet
        # Seconds the engine thread spent in each phase of its iterations (idle
        # waits excluded): where a busy engine's time goes, without a profiler.
        # "decode" is launching the step, "step_wait" waiting for its results
        # (the device still busy with it once the next iteration is prepared).
        self.busy_s = dict.fromkeys(BUSY_PHASES, 0.0)
        self.model: LoadedModel | None = None
        self.runner: ModelRunner | None = None
        self.codec: FrameDecoder | None = None
        self.codec_worker: CodecWorker | None = None

    # ------------------------------------------------------------ lifecycle
    def load(self, load_first: Callable[[], object] | None = None) -> None:
        """Weights, KV cache pool, codec and graphs. `load_first`: weights to put on the
        device before the talker's, whose KV pool takes a share of what is left (a Base
        model's voice encoders); their time counts as load_weights."""
        t0 = time.monotonic()
        say = self.progress
        clock = self.startup
        clock.done("import")
        if load_first is not None:
            load_first()
        use_compile_cache(self.compile_cache_dir, self.device)
        self.model = load_model(
            self.path,
            self.device,
            self.dtype,
            max_positions=self.max_len,
            progress=say,
            ops=talker_ops.for_device(self.device, self.cuda_graphs),
            weights=self.weights,
        )
        self.runner = ModelRunner(
            self.model,
            max_batch=self.max_batch,
            max_len=self.max_len,
            max_text=self.max_text_tokens,
            device=self.device,
            cuda_graphs=self.cuda_graphs,
            kv_cache_memory=self.kv_cache_memory,
            kv_blocks=self.kv_blocks,
            kv_block_size=self.kv_block_size,
        )
        cache = self.runner.cache
        self.scheduler.kv = KVBlocks(cache.num_blocks, cache.block_size)
        say("loading the codec decoder")
        codec_dtype = torch.float32 if self.dtype == "float32" else torch.bfloat16
        conv_route = codec_convs.EAGER
        if torch.device(self.device).type == "cuda":
            conv_route = codec_convs.ROUTES[self.codec_conv_route]
        self.codec = load_frame_decoder(
            self.path, self.device, codec_dtype, self.max_batch, conv_route
        )
        clock.done("load_weights")
        frame_buckets = []
        if self.runner.use_graphs:
            self.runner.compile()
            clock.done("compile")
            frame_buckets = list(self.rules.chunk_sizes())
            codec_buckets = self.runner.batch_buckets
            if self.capture_all_graphs:
                # Now only what the warm-up synthesis and single streams use (the
                # smallest buckets), the rest once the engine serves, the largest
                # first: the start grows with neither the number nor the size of
                # the buckets (at --max-batch 256 the largest took most of ~2 s).
                self.runner.capture_decode_for_start()
                clock.done("capture_decode_graphs")
                self.runner.capture_prefill_for_start()
                clock.done("capture_prefill_graphs")
                codec_buckets = buckets_before_ready(codec_buckets)
            self.codec.capture(list(codec_buckets), frame_buckets)
            clock.done("capture_codec_graphs")
        self.codec_worker = CodecWorker(
            self.codec,
            self.device,
            tuple(frame_buckets),
            on_failure=self._codec_failed,
            capture_lock=self.runner.capture_lock,
        )
        say(f"engine loaded in {time.monotonic() - t0:.1f}s")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tts-engine", daemon=True)
        self._thread.start()

    def start_background_capture(self) -> None:
        """Once serving: capture the graphs the start left out, each thread while it
        has nothing else to do (background_capture.py)."""
        self.background_capture.start(
            self.runner, self.codec, self.codec_worker, self.capture_all_graphs
        )
        self._wake.set()

    def stop(self) -> None:
        """Stop the thread (callers first finish what is left); blocks until it ends."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        # load() started the codec worker, with or without the engine thread: its
        # thread holds this core (and the KV cache) until it is stopped.
        if self.codec_worker is not None:
            self.codec_worker.stop()
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()

    @property
    def busy(self) -> bool:
        with self.lock:
            scheduler = self.scheduler
            return bool(scheduler.running or scheduler.waiting) or self.inbox.pending

    def wake(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------ commands (any thread)
    def add(self, seq: Sequence) -> None:
        """Send an admitted request to the engine thread, or raise QueueFullError."""
        self.inbox.add(seq)
        self._wake.set()

    def abort(self, seq: Sequence | None, reason: FinishReason) -> None:
        """End `seq` (None: every request) at the top of the engine thread's next
        iteration: its slot is free for that iteration's plan, its stream ends then."""
        self.inbox.abort(seq, reason)
        self._wake.set()

    def pace(self, seq: Sequence, paused: bool) -> None:
        """Pause or resume `seq`'s decode steps (its stream's backpressure) at the top
        of the engine thread's next iteration."""
        self.inbox.pace(seq, paused)
        self._wake.set()

    def _codec_failed(self, key: int) -> None:
        # Codec worker thread: its audio is lost, so its slot is wasted GPU time.
        self.inbox.send(CodecFailed(key))
        self._wake.set()

    # ------------------------------------------------------------ engine thread
    def _drain_commands(self) -> None:
        """Apply the commands sent since the last iteration, in order."""
        if self.inbox.drain():
            self._hand_over_ends()

    def _hand_over_ends(self) -> None:
        """Tell the codec worker (and so the streams) of the sequences that ended: after
        the audio of the chunks handed over before, and a cancelled or failed one's
        stream at once."""
        with self.lock:
            ends = self.scheduler.take_ends()
        for end in ends:
            if end.reason not in ("eos", "length"):
                end.seq.stream.end(end.reason)
            if self.codec_worker is not None:
                self.codec_worker.end(_codec_stream(end.seq), end.reason)
            else:
                end.seq.stream.end(end.reason)

    def _run(self) -> None:
        if self.device.startswith("cuda"):
            # Work on the device the model was loaded to ("cuda" = the current one).
            index = torch.device(self.device).index
            torch.cuda.set_device(index if index is not None else torch.cuda.current_device())
        with _engine_stream(self.device, self.decode_priority):
            self._loop()
            in_flight, self._in_flight = self._in_flight, None
            if in_flight is not None:  # stopped between a launch and its results
                with torch.inference_mode():
                    self._complete(in_flight, time.monotonic())
        self._drain_commands()  # the last ones (shutdown)
        self._release_finished()

    def _loop(self) -> None:
        while not self._stopping:
            try:
                did_work = self._iteration()
            except Exception as exc:
                # Per-sequence failures are caught below this; what reaches here
                # is a fault of the loop itself, which no sequence can be blamed for.
                log.exception(
                    "engine iteration failed outside any one request; failing the running streams"
                )
                self._in_flight = None  # its rows are among those ended here
                with self.lock:
                    for seq in list(self.scheduler.running.values()):
                        self.scheduler.finish(seq, "error", failure("the engine failed", exc))
                self._hand_over_ends()
                did_work = True
            if not did_work and not self.background_capture.capture_one():
                self._wake.wait(timeout=0.05)
                self._wake.clear()

    def _release_finished(self) -> None:
        """Reset the device rows of the slots that finished sequences left, then let
        the scheduler free their KV blocks."""
        with self.lock:
            releases = self.scheduler.take_releases()
        if releases is None:
            return
        self.runner.release(*releases.slots)  # one call for all: one index op per state tensor
        with self.lock:
            self.scheduler.free(releases)

    def _sync_block_tables(self) -> None:
        """Mirror the scheduler's block assignments into the runner's table
        (sent to the device once, before the next step)."""
        with self.lock:
            changed = self.scheduler.take_kv_changes()
        for slot, blocks in changed:
            self.runner.set_blocks(slot, blocks)

    def _spent(self, phase: str, since: float) -> float:
        """Add the time since `since` to `phase`'s busy seconds; returns now."""
        now = time.monotonic()
        self.busy_s[phase] += now - since
        return now

    @torch.inference_mode()
    def _iteration(self) -> bool:
        """One turn of the loop. The decode step launched by the previous turn
        runs on the device while this one plans and prefills the newcomers (their
        device work queues behind it; their slots are not among its rows); then
        its codes are read and applied, and the next step is launched over the
        rows that stand then, the newcomers with them. Those that arrived while
        the step was waited for are prefilled before that launch, as they would
        be without the overlap: a newcomer never waits a step more for it."""
        t = time.monotonic()
        self._drain_commands()
        self._release_finished()
        prefilled, t = self._admit(t)
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            t = self._complete(in_flight, t)
            # Commands sent while the step was waited for: a newcomer joins the next step.
            self._drain_commands()
            self._release_finished()  # blocks of those it ended, for the rows that grow now
            if self._admission_due():
                more, t = self._admit(t)
                prefilled += more
        with self.lock:
            # A final text has nothing left to take.
            self.text_intake.take(
                self.runner, [s for s in self.scheduler.running.values() if not s.text_final]
            )
            rows, extent, live = self.scheduler.step_rows()
            starved = self.scheduler.kv_deadlock()
            if starved is not None:
                self._end_kv_starved(starved)
        self._sync_block_tables()  # blocks the step's rows grew into
        self._hand_over_ends()  # those ended this iteration before a step (text, prefill)
        t = self._spent("plan", t)
        if rows:
            self._in_flight = launched = self._launch_isolating(rows, extent, live)
            if in_flight is not None and in_flight.launched_at and launched.launched_at:
                # What a running stream waits per frame: launch to launch, back to back.
                period = launched.launched_at - in_flight.launched_at
                self.step_s = period if not self.step_s else 0.8 * self.step_s + 0.2 * period
            self._spent("decode", t)
        return bool(rows) or in_flight is not None or prefilled > 0 or starved is not None

    def _admit(self, t: float) -> tuple[int, float]:
        """Plan and prefill what is ready: newcomers to free slots, next pieces of
        long texts. -> (sequences prefilled, the time it returns). Only their text
        is taken here: the running streams' is taken once, before the step's rows."""
        with self.lock:
            self.text_intake.take(
                self.runner, list(self.scheduler.waiting) + list(self.scheduler.refill)
            )
            spare_s = self._sample_leads(time.monotonic())
            plan = self.scheduler.plan(spare_s)
            self.prefill_deferred += plan.deferred
            self.interactive_waiting = sum(not q.background for q in self.scheduler.waiting)
        self._sync_block_tables()  # the prompts' blocks, before the prefills store into them
        t = self._spent("plan", t)
        self._prefill(plan.prefill)
        return len(plan.prefill), self._spent("prefill", t)

    def _admission_due(self) -> bool:
        """Whether a prefill may be waiting: requests queued, or a next piece due."""
        with self.lock:
            return bool(self.scheduler.waiting) or bool(self.scheduler.refill)

    def _complete(self, step: StepInFlight, t: float) -> float:
        """Wait for `step`'s codes, then apply them: chunks to the codec worker,
        finished streams ended. -> the time it returns."""
        codes, nxt = step.result()
        t = self._spent("step_wait", t)
        with self.lock:
            outcome = self.scheduler.postprocess(step.rows, codes, nxt, self.rules)
            self.frames_total += outcome.frames
        for chunk in outcome.chunks:
            self.codec_worker.chunk(
                _codec_stream(chunk.seq), chunk.codes, last=chunk.last, words=chunk.words
            )
        for seq, exc in outcome.failed:
            log.error(
                "bookkeeping after a step failed; ending the request",
                exc_info=exc,
                extra={"request_id": seq.request_id},
            )
        self._hand_over_ends()  # after their last chunks
        return self._spent("postprocess", t)

    def _end_kv_starved(self, seq: Sequence) -> None:
        """Every running stream waits for a KV block and none can finish to free
        one; end `seq` (the youngest) so the others go on."""
        kv = self.scheduler.kv
        message = (
            f"the KV cache is full: all {len(self.scheduler.kv_stalled)} running streams wait "
            f"for memory ({kv.total} blocks of {kv.block_size} positions); this one, the "
            "youngest, was ended so the others can finish (more memory: --kv-cache-memory; "
            "fewer streams: --max-batch)"
        )
        log.error(
            "KV cache exhausted; ending the youngest stream",
            extra={"request_id": seq.request_id, "kv_blocks": kv.total, "held": len(seq.kv_blocks)},
        )
        self.scheduler.finish(seq, "error", EngineError(message))

    def _sample_leads(self, now: float) -> float | None:
        """Each playing stream's lead over playback, as its
        listener hears it: audio delivered - seconds since its first chunk
        (playback starts at the first byte). Records the smallest (an underrun
        when below 0) and returns the least spare time (None: nobody plays):
        the lead left once the stream's next chunk is made, if it still needs
        frames for it, at the recent decode step time per frame. Frames a
        decoder holds for its look-ahead (25 Hz) are decoded, not in flight:
        the next chunk's audio still needs steps."""
        least_lead = least_spare = None
        for seq in self.scheduler.running.values():
            stream = seq.stream
            # A paused stream's listener has audio waiting (more than its buffer):
            # the engine is not what it waits for. Batch work has no listener: a fresh
            # batch row's small lead would hold every prefill to the guarded budget.
            if stream.first_audio_at is None or seq.finished or seq.paused or seq.background:
                continue
            lead = stream.audio_delivered_s - (now - stream.first_audio_at)
            in_flight = seq.frames - len(seq.pending) > stream.frames_decoded
            owed = self.rules.chunk_limit(seq.chunks)
            missing = 0 if in_flight else max(0, owed - len(seq.pending))
            spare = lead - missing * self.step_s
            least_lead = lead if least_lead is None else min(least_lead, lead)
            least_spare = spare if least_spare is None else min(least_spare, spare)
        self.min_lead_s = least_lead
        self.underrun_steps += least_lead is not None and least_lead < 0
        return least_spare

    def _prefill(self, seqs: list[Sequence]) -> None:
        """Prefill the planned sequences' current pieces into their slots in one
        packed call. A failure ends only the sequences that cause it: building
        a prompt fails its sequence alone, and a failed packed call is retried
        one prompt at a time (each call rewrites its slots' whole state)."""
        prompts: list[tuple[Sequence, Prompt]] = []
        for seq in seqs:
            if seq.finished:
                continue
            if not seq.text.ids:  # the text stream ended empty
                with self.lock:
                    self.scheduler.finish(seq, "eos")
                continue
            try:
                prompts.append((seq, self._prompt(seq)))
            except Exception as exc:
                self._prefill_failed(seq, exc)
        done = together_else_alone(
            prompts,
            lambda some: self.runner.prefill([prompt for _, prompt in some]),
            lambda item, exc: self._prefill_failed(item[0], exc),
            "packed prefill",
        )
        started = []
        with self.lock:
            for seq, prompt in done:
                if self.scheduler.prefilled(seq, prompt.embeds.shape[0]):
                    if seq.piece == 0 and seq.voice.ref_codes is not None:
                        # Before its first chunk: the codec continues the recording.
                        codes = seq.voice.ref_codes.numpy()
                        self.codec_worker.prime(_codec_stream(seq), codes)
                    started.append(seq)
            self.text_intake.take(self.runner, started)

    def _prompt(self, seq: Sequence) -> Prompt:
        p = seq.params
        stream = self.builder.text_stream(seq.voice, seq.text.ids, seq.text.closed)
        lead = stream[: seq.voice.prompt_text_ids]
        embeds = self.builder.prefill_embeds(self.model, seq.voice, lead)
        # min_frames counts the whole request: later pieces owe what is left.
        min_frames = max(0, p.min_frames - seq.frames)
        params = SlotParams(
            p.temperature,
            p.top_k,
            p.top_p,
            p.repetition_penalty,
            p.subtalker_temperature,
            p.subtalker_top_k,
            p.subtalker_top_p,
            seq.piece_seed,
            min_frames,
        )
        return Prompt(seq.slot, embeds, params)

    def _prefill_failed(self, seq: Sequence, exc: Exception) -> None:
        with self.lock:
            end_with_error(self.scheduler, seq, "prefill failed", exc)

    def _others_in_batch(self, rows: list[Sequence]) -> bool:
        """Whether the batch holds occupied rows besides `rows` (not runnable now)."""
        with self.lock:
            occupied = sum(not seq.finished for seq in self.scheduler.running.values())
        return occupied > len(rows)

    def _launch_isolating(self, rows: list[Sequence], extent: int, live: int) -> StepInFlight:
        """The decode step over `rows`, launched; the rows that make it fail end with
        "error" (step_launch.py)."""
        launched = launch_isolating(self.runner, rows, extent, live, self._others_in_batch)
        with self.lock:
            for seq, exc in launched.culprits:
                end_with_error(self.scheduler, seq, "generation failed", exc)
        return launched.step


def _codec_stream(seq: Sequence) -> CodecStream:
    """What the codec worker reads of `seq` (it never sees the Sequence itself)."""
    return CodecStream(
        seq.key,
        seq.request_id,
        seq.stream,
        seq.voice,
        seq.t_admitted,
        seq.stream.sample_format,
        seq.background,
    )


def _engine_stream(device: str, high_priority: bool):
    """Where the engine thread's kernels go: the current stream, or with `high_priority`
    a stream of the device's highest priority. Graph replays inherit the stream's
    priority, so the block scheduler starts a decode step's blocks before the codec
    thread's whenever both wait for a multiprocessor."""
    if not (high_priority and device.startswith("cuda")):
        return contextlib.nullcontext()
    _, highest = torch.cuda.Stream.priority_range()
    return torch.cuda.stream(torch.cuda.Stream(priority=highest))
