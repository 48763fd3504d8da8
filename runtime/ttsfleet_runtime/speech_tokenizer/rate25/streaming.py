"""StreamingDecoder25Hz: many 25 Hz streams decoded block by block, one batch per call.

Why windows. The DiT's attention is block-wise (blocks of 24 mel frames = 12 codes): one
DiT call reaches 2 blocks back and 1 ahead, and flow matching calls it 9 times, so the
exact mel of a block depends on codes 9 blocks (4.3 s) ahead. Waiting for those would
make streaming useless; instead a block is generated in a *window*: `left_blocks` blocks
of left context (default 2, one call's reach), the block itself and one look-ahead block
(the reach of the look-ahead layer), all sampled from the noise of their own positions.
Only the block's frames are kept (final); the look-ahead block's frames are provisional.
This is an approximation of offline decoding; `tests/codec25/test_streaming.py` measures
and bounds the error (on random weights).

The vocoder (BigVGAN) is not causal but its receptive field is finite
(`Vocoder.context_frames`, (60, 21) mel frames for the published layout): a block's
samples come from a window of the last final mel frames on the left, the block, and the
provisional frames of the look-ahead block on the right, cropped to the block. Given the
same mel it reproduces a whole-utterance run exactly, so the only approximation is the
DiT's and the provisional right context.

Latency: a block is final once the next block's codes are in, so the first audio
(24 * 480 samples = 0.48 s) comes after 2 blocks = 24 codes (0.96 s of audio); after
that every 12 codes give 12 codes' audio. `finish` decodes the rest without look-ahead,
exactly as offline decoding treats the end.

Determinism. The noise of mel frame i is row i (mod `NOISE_FRAMES`) of one table drawn
from `seed` when the decoder is built, and every window has the same shape whatever the
stream's age (padded positions masked), so a stream's audio does not depend on what else
is in the batch, nor on how its codes were split into calls.

Engine usage:
    decoder25 = StreamingDecoder25Hz(load_speech_tokenizer_25hz(folder), max_streams)
    slot = decoder25.open(voice)              # DecoderVoice, or None for no reference
    audio = decoder25.decode([slot], codes)   # codes [B, n] -> per stream the final audio
    rest = decoder25.finish([slot])           # end of utterance: the rest; closes the slot
"""

from __future__ import annotations

import dataclasses

import torch

from ..slots import SlotPool
from .decoder import Decoder25Hz, DecoderVoice, SpeakerCondition

NOISE_FRAMES = 30000  # 10 minutes of mel frames, as many as the reference draws
# The most first-block vocoder windows a graph is captured for (batches of new streams
# are small; a larger one runs eagerly).
FIRST_BLOCKS_BATCH = 16
DEFAULT_SEED = 0


@dataclasses.dataclass
class _Stream:
    condition: SpeakerCondition
    codes: list[int]  # every code from `first_code` on
    first_code: int = 0  # absolute index of codes[0]
    next_block: int = 0  # the first block not yet final
    mel_history: torch.Tensor | None = None  # final mel frames before next_block, the last few

    @property
    def total_codes(self) -> int:
        return self.first_code + len(self.codes)


@dataclasses.dataclass
class _Job:
    """One block to make final: its DiT window and, later, its vocoder window."""

    slot: int
    block: int
    frames: int  # of the block (a full block, or fewer at the end)
    lookahead: int  # provisional frames of the next block kept for the vocoder


class StreamingDecoder25Hz:
    num_quantizers = 1

    def __init__(
        self,
        decoder: Decoder25Hz,
        max_streams: int,
        device: str | torch.device | None = None,
        *,
        left_blocks: int = 2,
        seed: int = DEFAULT_SEED,
    ):
        self.decoder = decoder
        self.device = torch.device(device) if device is not None else decoder.device
        self.max_streams = max_streams
        config = decoder.config
        self.sampling_rate = config.output_sample_rate
        self.frame_rate = config.frame_rate
        self.samples_per_frame = config.samples_per_code
        self.repeats = config.mel_generator.repeats
        self.block_frames = config.mel_generator.block_size
        self.block_codes = config.mel_generator.codes_per_block
        self.samples_per_mel_frame = config.vocoder.samples_per_mel_frame
        self.left_blocks = left_blocks
        self.window_frames = (left_blocks + 2) * self.block_frames
        self.vocoder_left, self.vocoder_right = decoder.bigvgan.context_frames()
        if self.vocoder_right > self.block_frames:
            raise ValueError(
                f"the vocoder reads {self.vocoder_right} mel frames ahead, more than one "
                f"block ({self.block_frames}): one look-ahead block cannot feed it"
            )
        generator = torch.Generator().manual_seed(seed)
        mel_dim = config.mel_generator.mel_dim
        self.noise = torch.randn(NOISE_FRAMES, mel_dim, generator=generator).to(
            self.device, decoder.dtype
        )
        self._streams: dict[int, _Stream] = {}
        self._slots = SlotPool(max_streams, "25 Hz decoder")
        self._graphs: dict[int, _CapturedWindows] = {}
        # window frames -> batch -> graph
        self._vocoder_graphs: dict[int, dict[int, _CapturedVocoder]] = {}
        self._pool = None  # one memory pool for every graph, sized by the first (largest)
        # The vocoder windows that recur, the graphed ones: a stream's first blocks (its
        # left context grows a block at a time: 0, 24, 48 frames) and, from then on, the
        # steady window (the whole left context, a block and the look-ahead). A stream's
        # last blocks (`finish`, no look-ahead, often part of a block) run eagerly.
        ahead = self.block_frames + self.vocoder_right
        self.first_vocoder_frames = tuple(
            range(ahead, self.vocoder_left + ahead, self.block_frames)
        )
        self.steady_vocoder_frames = self.vocoder_left + ahead

    # ---------------------------------------------------------------- slots
    def open(self, voice: DecoderVoice | None) -> int:
        slot = self._slots.take()  # a full decoder refuses before any conditioning work
        try:
            condition = self.decoder.condition(voice)
        except BaseException:
            self._slots.give_back(slot)
            raise
        self._streams[slot] = _Stream(condition=condition, codes=[])
        return slot

    def close(self, slot: int) -> None:
        self._slots.give_back(slot)
        del self._streams[slot]

    @property
    def active(self) -> int:
        return len(self._streams)

    @property
    def state_bytes_per_stream(self) -> int:
        """The most a stream holds between calls: its conditioning, the codes of its
        window and the vocoder's left context of mel."""
        config = self.decoder.config.mel_generator
        element = self.noise.element_size()
        floats = config.enc_dim + config.enc_emb_dim + self.vocoder_left * config.mel_dim
        codes = (self.left_blocks + 2) * self.block_codes
        return floats * element + codes * 8

    # ---------------------------------------------------------------- decode
    def decode(self, slots: list[int], codes: torch.Tensor) -> list[torch.Tensor]:
        """Append codes [B, n] to the streams in `slots`; per stream, the float32 audio
        that became final (a multiple of a block's samples, possibly empty). A call that
        raises leaves every stream as it was, so its streams may be decoded again (the
        codec worker retries a failed batch one stream at a time)."""
        self._check(slots)
        if codes.dim() != 2 or codes.shape[0] != len(slots):
            raise ValueError(f"codes must be [{len(slots)}, n], got {tuple(codes.shape)}")
        if codes.numel() and int(codes.min()) < 0:
            raise ValueError("codes must be >= 0")
        staged, jobs = {}, []
        for slot, row in zip(slots, codes.tolist(), strict=True):
            stream = staged[slot] = self._staged(slot)
            stream.codes.extend(row)
            while stream.total_codes >= (stream.next_block + 2) * self.block_codes:
                jobs.append(self._job(slot, stream, stream.next_block))
                stream.next_block += 1
        audio = self._run(staged, jobs)
        self._streams.update(staged)
        return audio

    def finish(self, slots: list[int]) -> list[torch.Tensor]:
        """The rest of each stream's audio (its last blocks, without look-ahead past the
        end); closes the slots. A call that raises closes none and changes none."""
        self._check(slots)
        staged, jobs = {}, []
        for slot in slots:
            stream = staged[slot] = self._staged(slot)
            total_blocks = -(-stream.total_codes // self.block_codes)
            for block in range(stream.next_block, total_blocks):
                jobs.append(self._job(slot, stream, block))
            stream.next_block = total_blocks
        audio = self._run(staged, jobs)
        for slot in slots:
            self.close(slot)
        return audio

    def _staged(self, slot: int) -> _Stream:
        """A copy of the stream's state for a call to advance: the call commits it only
        once every window of the batch has been made."""
        stream = self._streams[slot]
        return dataclasses.replace(stream, codes=list(stream.codes))

    def _check(self, slots: list[int]) -> None:
        if len(set(slots)) != len(slots) or not set(slots) <= self._streams.keys():
            raise ValueError(f"slots must be distinct open slots, got {slots}")

    def _job(self, slot: int, stream: _Stream, block: int) -> _Job:
        """Block `block` of the stream as its codes stand: the next block's frames that
        exist (all of them before the end) feed the vocoder's right context."""
        total_frames = stream.total_codes * self.repeats
        start = block * self.block_frames
        frames = min(self.block_frames, total_frames - start)
        following = max(0, total_frames - start - self.block_frames)
        return _Job(slot, block, frames, min(self.vocoder_right, following))

    # ---------------------------------------------------------------- the windows
    def _run(self, staged: dict[int, _Stream], jobs: list[_Job]) -> list[torch.Tensor]:
        """Make the jobs' blocks from the `staged` states (slot -> state), which the
        vocoder's history and the forgetting of old codes advance."""
        audio: dict[int, list[torch.Tensor]] = {slot: [] for slot in staged}
        if jobs:
            with torch.inference_mode():
                mels = self._generate(staged, jobs)
                for job, wave in zip(jobs, self._vocode(staged, jobs, mels), strict=True):
                    audio[job.slot].append(wave)
            for stream in staged.values():
                self._forget_old_codes(stream)
        empty = torch.zeros(0, dtype=torch.float32, device=self.device)
        return [torch.cat(audio[slot]) if audio[slot] else empty for slot in staged]

    def _generate(self, staged: dict[int, _Stream], jobs: list[_Job]) -> torch.Tensor:
        """The DiT windows of all jobs, one batch: [J, window_frames, mel_dim]."""
        width, codes_width = self.window_frames, self.window_frames // self.repeats
        count = len(jobs)
        codes = torch.zeros(count, codes_width, dtype=torch.long)
        valid = torch.zeros(count, width, dtype=torch.bool)
        positions = torch.zeros(count, width, dtype=torch.long)
        for i, job in enumerate(jobs):
            stream = staged[job.slot]
            first = (job.block - self.left_blocks) * self.block_codes  # absolute code index
            lo, hi = max(first, 0), min(first + codes_width, stream.total_codes)
            codes[i, lo - first : hi - first] = torch.tensor(
                stream.codes[lo - stream.first_code : hi - stream.first_code]
            )
            valid[i, (lo - first) * self.repeats : (hi - first) * self.repeats] = True
            positions[i] = torch.arange(width) + first * self.repeats
        noise = self.noise[positions.clamp(min=0) % NOISE_FRAMES]
        speaker = torch.stack([staged[j.slot].condition.speaker for j in jobs])
        xvector = torch.stack([staged[j.slot].condition.xvector for j in jobs])
        return self._sample_windows(
            codes.to(self.device), noise, speaker, xvector, valid.to(self.device)
        )

    def _sample_windows(self, codes, noise, speaker, xvector, valid) -> torch.Tensor:
        graph = self._graph_for(codes.shape[0])
        if graph is not None:
            return graph.run(codes, noise, speaker, xvector, valid)
        return self.decoder.dit.sample(codes, noise, speaker, xvector, valid)

    def _vocode(
        self, staged: dict[int, _Stream], jobs: list[_Job], windows: torch.Tensor
    ) -> list[torch.Tensor]:
        """Each job's samples: the vocoder on (final mel history, the block, provisional
        look-ahead), batched by window shape, cropped to the block."""
        block_at = self.left_blocks * self.block_frames
        inputs, crops = [], []
        for i, job in enumerate(jobs):
            stream = staged[job.slot]
            block = windows[i, block_at : block_at + job.frames]
            ahead = windows[i, block_at + self.block_frames :][: job.lookahead]
            history = stream.mel_history
            if history is None:
                history = block[:0]
            inputs.append(torch.cat([history, block, ahead]))
            crops.append((history.shape[0], job.frames))
            kept = torch.cat([history, block])[-self.vocoder_left :]
            stream.mel_history = kept
        out: list[torch.Tensor | None] = [None] * len(jobs)
        shapes = sorted({(x.shape[0], crop) for x, crop in zip(inputs, crops, strict=True)})
        spm = self.samples_per_mel_frame
        for length, (left, frames) in shapes:
            rows = [
                i
                for i, (x, crop) in enumerate(zip(inputs, crops, strict=True))
                if (x.shape[0], crop) == (length, (left, frames))
            ]
            mel = torch.stack([inputs[i] for i in rows])
            graph = _smallest_fitting(self._vocoder_graphs.get(length, {}), len(rows))
            if graph is not None:
                waves = graph.run(mel)
            else:
                waves = self.decoder.bigvgan(mel).float()
            for i, wave in zip(rows, waves, strict=True):
                out[i] = wave[left * spm : (left + frames) * spm]
        return out

    def _forget_old_codes(self, stream: _Stream) -> None:
        keep_from = max(0, (stream.next_block - self.left_blocks) * self.block_codes)
        drop = keep_from - stream.first_code
        if drop > 0:
            del stream.codes[:drop]
            stream.first_code = keep_from

    # ---------------------------------------------------------------- CUDA graphs
    def capture(self, batch_sizes: list[int], frame_counts: list[int] | None = None) -> None:
        """Capture, per batch size, the DiT's window sampling (all 9 flow steps, both
        guidance halves) and the vocoder on the steady window (`steady_vocoder_frames`),
        and up to `FIRST_BLOCKS_BATCH` the vocoder on the windows of a stream's first
        blocks (`first_vocoder_frames`: few streams start in one call). The shapes
        depend only on the number of blocks in a call, never on the codes per call
        (`frame_counts` is accepted for the codec protocol and changes no shape). Calls
        with more blocks than the largest graph run eagerly. Every graph shares one
        memory pool; capture the largest first, as the engine does."""
        del frame_counts
        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        for batch in sorted(set(batch_sizes), reverse=True):
            if batch not in self._graphs:
                self._graphs[batch] = _CapturedWindows(self, batch, self._pool)
                self._pool = self._graphs[batch].graph.pool()
            lengths = [self.steady_vocoder_frames]
            if batch <= FIRST_BLOCKS_BATCH:
                lengths += self.first_vocoder_frames
            for frames in lengths:
                graphs = self._vocoder_graphs.setdefault(frames, {})
                if batch not in graphs:
                    graphs[batch] = _CapturedVocoder(self, batch, frames, self._pool)

    def _graph_for(self, jobs: int):
        return _smallest_fitting(self._graphs, jobs)


def _smallest_fitting(graphs: dict, rows: int):
    sizes = [b for b in graphs if b >= rows]
    return graphs[min(sizes)] if sizes else None


def _captured(device: torch.device, pool, run):
    """A CUDA graph of `run()` (after two warm-up runs on a side stream: the allocator,
    lazy initialisations) and its output."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side), torch.inference_mode():
        for _ in range(2):
            run()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    capturing = torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local")
    with torch.inference_mode(), capturing:
        output = run()
    return graph, output


class _CapturedWindows:
    """One CUDA graph of the DiT sampling a fixed number of windows. Rows past the call's
    jobs hold masked zeros and are discarded."""

    def __init__(self, owner: StreamingDecoder25Hz, batch: int, pool):
        config = owner.decoder.config.mel_generator
        device, dtype = owner.device, owner.noise.dtype
        width = owner.window_frames
        self.codes = torch.zeros(batch, width // owner.repeats, dtype=torch.long, device=device)
        self.noise = torch.zeros(batch, width, config.mel_dim, dtype=dtype, device=device)
        self.speaker = torch.zeros(batch, config.enc_dim, dtype=dtype, device=device)
        self.xvector = torch.zeros(batch, config.enc_emb_dim, dtype=dtype, device=device)
        self.valid = torch.zeros(batch, width, dtype=torch.bool, device=device)
        sample = owner.decoder.dit.sample
        args = (self.codes, self.noise, self.speaker, self.xvector, self.valid)
        self.graph, self.mel = _captured(device, pool, lambda: sample(*args))

    def run(self, codes, noise, speaker, xvector, valid) -> torch.Tensor:
        n = codes.shape[0]
        for static, value in (
            (self.codes, codes),
            (self.noise, noise),
            (self.speaker, speaker),
            (self.xvector, xvector),
        ):
            static.zero_()
            static[:n].copy_(value)
        self.valid.zero_()
        self.valid[:n].copy_(valid)
        self.graph.replay()
        return self.mel[:n].clone()


class _CapturedVocoder:
    """One CUDA graph of the vocoder on a fixed number of windows of one length. The vocoder
    treats each row alone, so rows past the call's (zeros) change no other row."""

    def __init__(self, owner: StreamingDecoder25Hz, batch: int, frames: int, pool):
        config = owner.decoder.config.mel_generator
        self.mel = torch.zeros(
            batch,
            frames,
            config.mel_dim,
            dtype=owner.noise.dtype,
            device=owner.device,
        )
        vocoder = owner.decoder.bigvgan
        self.graph, self.waves = _captured(owner.device, pool, lambda: vocoder(self.mel).float())

    def run(self, mel: torch.Tensor) -> torch.Tensor:
        n = mel.shape[0]
        self.mel[n:].zero_()
        self.mel[:n].copy_(mel)
        self.graph.replay()
        return self.waves[:n].clone()
