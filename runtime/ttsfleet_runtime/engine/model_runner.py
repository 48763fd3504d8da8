"""Runs the model on the device: the packed prefill of the requests admitted
together into their slots, and the decode step of the running batch, eager or
replayed from CUDA graphs.

One decode step turns every running row's pending first code into a whole
frame and predicts the next frame's first code:

    predictor: [talker hidden, code 0] -> code 1 -> ... -> code 15   (15 samples)
    talker:    sum of the 16 code embeddings + next text token -> hidden, logits
    sample the next code 0 (repetition penalty, suppressed ids, min length)

A 25 Hz checkpoint's frame is one code (`num_code_groups` 1): there is no
predictor, its cache or its steps, and the talker reads the code's embedding.

All of it reads and writes per-slot state tensors, so the step is one CUDA
graph per batch bucket with sampling inside and one device-to-host copy (the
frame's codes) per step. A graph attends over the whole KV cache, each row
masked to its own length, so one graph serves every length.

The graphs, their buckets and their capture are `graph_capture.py`'s; the packed
prefill's per-prompt inputs `prefill_rows.py`'s.

The talker's KV cache is paged (engine/kv_cache.py): a pool of blocks sized
at start-up from the memory left after the weights (`kv_cache_memory`), and a
block table the engine fills as streams grow (`set_blocks`).
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import torch

from ..model.weights import LoadedModel
from ..transfers import HostCopy, array_to_device, ids_on
from .frame_decoder import read_timing
from .graph_capture import BATCH_BUCKETS, GraphCapture, prefill_buckets
from .kv_blocks import BLOCK_POSITIONS, MIN_STREAM_SECONDS, blocks_for, stream_blocks
from .kv_cache import KVCache, PagedKVCache, bytes_per_position
from .prefill_rows import (
    INTS_END,
    PREFILL_PROMPTS,
    PROMPT_FLOATS,
    PROMPT_INTS,
    ROWS_END,
    SAMPLING_INTS,
    Prompt,
    SlotParams,
    prompt_floats,
    prompt_ints,
    prompt_row_views,
)

log = logging.getLogger(__name__)


def _set_one(t: torch.Tensor, index: int, value: float) -> None:
    """t[index] = value as a one-element fill: a kernel launch carrying the value.
    `t[index] = value` on a CUDA tensor copies a 0-dim host tensor from pageable
    memory, which waits for the device's queued work: under load at 100 req/s the
    H100 profile found the engine thread blocked there for 14% of its time."""
    t[index : index + 1].fill_(value)


class StepOutput:
    """A launched decode step's codes on their way to the host (`launch_decode`): one
    `HostCopy` of the frame codes and the next first codes side by side, so `result`
    waits for the step's own work, not whatever the stream got after it."""

    def __init__(self, out: torch.Tensor, groups: int):
        self._groups = groups
        self._copy = HostCopy(out)

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(frame codes [batch, groups], next first codes [batch]) on the host;
        waits for the step (releasing the GIL)."""
        out = self._copy.result()
        return out[:, : self._groups], out[:, self._groups]


class SlotState:
    """Per-slot tensors the decode step reads and updates in place."""

    def __init__(
        self, slots: int, hidden: int, vocab: int, groups: int, max_text: int, dtype, device
    ):
        z = lambda *s, dt=torch.int64: torch.zeros(*s, dtype=dt, device=device)  # noqa: E731
        self.hidden = z(slots, hidden, dt=dtype)  # talker hidden of the last position
        self.code0 = z(slots)  # pending first code of the next frame
        self.frame = z(slots)  # index of that frame
        self.position = z(slots)  # next talker position to write
        self.text_ids = z(slots, max_text)  # trailing text ids (text[1:] + tts_eos)
        self.text_len = z(slots)  # how many of them are known
        self.seen = z(slots, vocab, dt=torch.bool)  # first codes generated so far
        self.active = z(slots, dt=torch.bool)  # rows the step advances
        self.temperature = z(slots, dt=torch.float32)
        self.top_k = z(slots)
        self.top_p = z(slots, dt=torch.float32)
        self.repetition_penalty = z(slots, dt=torch.float32)
        self.sub_temperature = z(slots, dt=torch.float32)
        self.sub_top_k = z(slots)
        self.sub_top_p = z(slots, dt=torch.float32)
        self.seed = z(slots)
        self.min_frames = z(slots)
        # Outputs of the last step.
        self.out_codes = z(slots, groups)
        self.out_next = z(slots)


class ModelRunner(GraphCapture):
    def __init__(
        self,
        model: LoadedModel,
        *,
        max_batch: int,
        max_len: int,
        max_text: int,
        device: str,
        cuda_graphs: bool,
        kv_cache_memory: float = 0.5,
        kv_blocks: int | None = None,
        kv_block_size: int = BLOCK_POSITIONS,
    ):
        """`kv_cache_memory`: share of the GPU memory free after the weights that
        the KV pool may take (capped at what `max_batch` streams of `max_len`
        positions need); `kv_blocks` sets the pool's usable blocks instead (on
        the CPU the default is that cap). Every step runs the model's own
        operations, sampling included: eager torch or the fused kernels, as
        `load_model(ops=...)` built it (model/ops.py)."""
        self.model = model
        self.talker = model.talker
        self.predictor = model.predictor
        cfg = model.config.talker
        self.cfg = cfg
        self.groups = cfg.num_code_groups
        self.device = torch.device(device)
        self.dtype = self.talker.codec_embedding.dtype
        self.max_batch = max_batch
        self.max_len = max_len
        self.max_text = max_text
        self.use_graphs = cuda_graphs and self.device.type == "cuda"
        self.sample = model.talker.ops.sample
        blocks = self._kv_pool_blocks(cfg, kv_cache_memory, kv_blocks, kv_block_size)
        # One block more than usable: the scratch block (engine/kv_blocks.py).
        self.cache = PagedKVCache(
            cfg, max_batch, max_len, blocks + 1, kv_block_size, self.dtype, self.device
        )
        self.predictor_cache = None
        if self.predictor is not None:
            assert cfg.code_predictor is not None
            self.predictor_cache = KVCache.allocate(
                cfg.code_predictor, max_batch, self.groups, self.dtype, self.device
            )
        # One row past the batch slots: the packed prefill's unused rows write there.
        self.scratch_row = max_batch
        self.state = SlotState(
            max_batch + 1,
            cfg.hidden_size,
            cfg.vocab_size,
            self.groups,
            max_text,
            self.dtype,
            self.device,
        )
        self._text_ids_flat = self.state.text_ids.view(-1)  # `set_texts` writes through it
        self.tts_pad_id = model.config.tts_pad_token_id
        self.eos_id = cfg.codec_eos_token_id
        # Control ids (the codebook's size and up: 2048..3071 at 12 Hz) other than
        # EOS are never sampled as codes.
        suppress = torch.zeros(cfg.vocab_size, dtype=torch.bool, device=self.device)
        suppress[model.config.codebook_size :] = True
        suppress[self.eos_id] = False
        self.suppressed = suppress
        self.eos_only = torch.zeros_like(suppress)
        self.eos_only[self.eos_id] = True
        self.batch_buckets = tuple(b for b in BATCH_BUCKETS if b < max_batch) + (max_batch,)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.graph_pool = None
        self.prefill_buckets = prefill_buckets(max_len)
        self._allocate_prefill(cfg)
        self.prefill_graphs: dict[int, torch.cuda.CUDAGraph] = {}
        # Held while a graph is captured: the codec worker captures its own graphs
        # on its thread after start-up, never at the same time as this runner.
        self.capture_lock = threading.Lock()
        # Predictor step g writes position g of its 16-long cache, every row alike.
        self.predictor_positions = [
            torch.full((max_batch,), g, dtype=torch.int64, device=self.device)
            for g in range(self.groups)
        ]

    @property
    def max_prompt(self) -> int:
        """The longest prompt `prefill` takes (positions); admission refuses longer."""
        return min(self.prefill_buckets[-1], self.max_len - 1)

    def _kv_pool_blocks(self, cfg, memory_share: float, blocks: int | None, block_size: int) -> int:
        """Usable blocks of the KV pool. One sized from the GPU's free memory must
        hold `max_batch` streams of MIN_STREAM_SECONDS (or of max_len, if less):
        else start-up fails naming the numbers and what to change."""
        per_position = bytes_per_position(cfg, self.dtype)
        per_block = per_position * block_size
        # A position is a frame: how many a second is the checkpoint's speech tokenizer's.
        rate = read_timing(self.model.path).frame_rate_hz
        per_stream = min(
            stream_blocks(MIN_STREAM_SECONDS, rate, block_size),
            blocks_for(self.max_len, block_size),
        )
        # More than every slot at max_len could ever use is never needed.
        cap = self.max_batch * blocks_for(self.max_len, block_size)
        if blocks is not None:
            source = "kv_blocks"
        elif self.device.type == "cuda":
            torch.cuda.empty_cache()  # what loading the weights left cached is free too
            free, _ = torch.cuda.mem_get_info(self.device)
            blocks = min(cap, int(memory_share * free) // per_block)
            source = (
                f"{memory_share:g} of the {free / 2**30:.1f} GiB free after the weights "
                "(--kv-cache-memory)"
            )
            need = self.max_batch * per_stream
            if blocks < need:
                raise ValueError(
                    f"the KV cache gets {blocks} blocks of {block_size} positions "
                    f"({blocks * per_block / 2**30:.2f} GiB: {source}) but --max-batch "
                    f"{self.max_batch} streams of {MIN_STREAM_SECONDS} s need {need} blocks "
                    f"({need * per_block / 2**30:.2f} GiB): lower --max-batch to "
                    f"{blocks // per_stream} or raise --kv-cache-memory"
                )
        else:
            blocks = cap
            source = "every slot at max_len"
        gib = blocks * per_block / 2**30
        log.info(
            f"KV cache: {blocks} blocks of {block_size} positions, {gib:.1f} GiB ({source}), "
            f"{per_position // 1024} KiB per position: holds {blocks // per_stream} streams "
            f"of {MIN_STREAM_SECONDS} s or {blocks // stream_blocks(60, rate, block_size)} of 60 s",
            extra={"kv_blocks": blocks, "kv_bytes_per_position": per_position},
        )
        return blocks

    # ------------------------------------------------------------ prefill
    def _allocate_prefill(self, cfg) -> None:
        """The packed prefill's inputs, read by its graphs: prompts back to back
        (embeddings, position within the prompt, prompt index), then one row
        per prompt (where its last position is, its slot and sampling).

        All but the embeddings are views of one int64 buffer (`prefill_inputs`:
        the prompt rows, the floats' bits, then positions and prompt indices [2, P]
        for a bucket of P positions), written by one copy per call, its host side
        built in numpy: three copies, their host tensors and the device-side copies
        after them made a call 56 torch calls, now 26 (bench/torch_calls.py), each
        handing the interpreter lock over."""
        P = self.prefill_buckets[-1]
        zeros = lambda *shape, dtype=torch.int64: torch.zeros(  # noqa: E731
            *shape, dtype=dtype, device=self.device
        )
        # Scratch keys/values of the packed prompts, copied into their slots after.
        kv = (cfg.num_hidden_layers, 1, cfg.num_key_value_heads, P, cfg.head_dim)
        self.prefill_k = zeros(*kv, dtype=self.dtype)
        self.prefill_v = zeros(*kv, dtype=self.dtype)
        self.prefill_embeds = zeros(P, cfg.hidden_size, dtype=self.dtype)
        self.prefill_inputs = zeros(ROWS_END + 2 * P)
        self.prefill_ints = self.prefill_inputs[:INTS_END].view(len(PROMPT_INTS), -1)
        floats = self.prefill_inputs[INTS_END:ROWS_END].view(torch.float32)
        self.prefill_floats = floats.view(len(PROMPT_FLOATS), -1)
        # Until a call fills them, every row is unused: captures write the scratch row.
        self.prefill_inputs[:ROWS_END].copy_(
            torch.from_numpy(self._unused_prompt_rows()).to(self.device)
        )

    def _prefill_positions(self, P: int) -> torch.Tensor:
        """[position in its prompt, prompt index] of a bucket of P positions [2, P]."""
        return self.prefill_inputs[ROWS_END : ROWS_END + 2 * P].view(2, P)

    def _unused_prompt_rows(self) -> np.ndarray:
        """The packed prefill's per-prompt rows (host, `prefill_inputs`' first
        `ROWS_END`) with every row unused: last position 0, the scratch row's slot,
        neutral sampling."""
        rows = np.zeros(ROWS_END, dtype=np.int64)
        ints, floats = prompt_row_views(rows)
        ints[PROMPT_INTS.index("slot")] = self.scratch_row
        floats[:] = 1.0
        return rows

    @torch.inference_mode()
    def prefill(self, prompts: list[Prompt]) -> None:
        """Run `prompts` into their slots in one call and sample each one's
        first code.

        The prompts go back to back into one sequence padded to a length
        bucket (one CUDA graph per bucket: a prefill is ~400 kernels, too many
        to launch one by one when the first audio is due in milliseconds),
        each attending only to itself, positions restarting at 0. Each
        prompt's last hidden state gives its first code, sampled with its own
        seed and draw counter 0: the codes are those of one call per prompt.
        Then each prompt's keys and values go into its slot."""
        if not prompts:
            return
        N = PREFILL_PROMPTS
        lengths = [p.embeds.shape[0] for p in prompts]
        total = sum(lengths)
        if len(prompts) > N or total > self.max_prompt:
            raise ValueError(
                f"{len(prompts)} prompts of {total} positions exceed the prefill limit "
                f"({N} prompts, {self.max_prompt} positions)"
            )
        P = self._prefill_bucket(total)
        n = len(prompts)
        if n == 1:
            self.prefill_embeds[:total] = prompts[0].embeds
        else:
            self.prefill_embeds[:total] = torch.cat([p.embeds for p in prompts])
        self.prefill_embeds[total:P] = 0
        inputs = self._unused_prompt_rows()
        ints, floats = prompt_row_views(inputs)
        starts = np.cumsum([0, *lengths[:-1]])
        rows = zip(prompts, starts, lengths, strict=True)
        ints[:, :n] = np.array([prompt_ints(p, start + T - 1, T) for p, start, T in rows]).T
        floats[:, :n] = np.array([prompt_floats(p.params) for p in prompts], np.float32).T
        # Padding is a prompt of its own (index N): it sees only itself.
        positions = np.zeros((2, P), dtype=np.int64)
        positions[0, :total] = np.concatenate([np.arange(T) for T in lengths])
        positions[1, :total] = np.repeat(np.arange(n), lengths)
        positions[1, total:] = N
        inputs = np.concatenate([inputs, positions.reshape(-1)])
        array_to_device(inputs, self.device, out=self.prefill_inputs[: inputs.size])
        if self.use_graphs:
            graph = self.prefill_graphs.get(P) or self._capture_prefill(P)
            graph.replay()
        else:
            self._prefill_step(P)
        self.cache.store_prompts(
            [(p.slot, T) for p, T in zip(prompts, lengths, strict=True)],
            self.prefill_k[:, 0],
            self.prefill_v[:, 0],
        )

    def _prefill_step(self, P: int) -> None:
        """The packed prefill of `prefill_embeds[:P]`; tensor ops only. Each
        prompt's row commits its slot's state: first code, hidden state,
        position, sampling parameters (unused rows: the scratch row)."""
        s = self.state
        ints = dict(zip(PROMPT_INTS, self.prefill_ints, strict=True))
        floats = dict(zip(PROMPT_FLOATS, self.prefill_floats, strict=True))
        positions, segments = self._prefill_positions(P)
        hidden = self.talker.prefill(
            self.prefill_embeds[:P][None],
            self.prefill_k[:, :, :, :P],
            self.prefill_v[:, :, :, :P],
            positions,
            segments,
        )[0]
        last = hidden.index_select(0, ints["last"])  # [N, hidden]
        frame = torch.zeros_like(ints["last"])
        nothing_seen = torch.zeros(
            frame.shape[0], self.cfg.vocab_size, dtype=torch.bool, device=self.device
        )
        code = self.sample(
            self.talker.logits(last),
            floats["temperature"],
            ints["top_k"],
            floats["top_p"],
            ints["seed"],
            frame,
            seen=nothing_seen,
            penalty=floats["repetition_penalty"],
            suppressed=self.suppressed,
            eos_only=self.eos_only,
            too_early=frame < ints["min_frames"],
        )
        commit = dict(
            hidden=last,
            code0=code,
            seen=nothing_seen.scatter(1, code[:, None], True),
            frame=frame,
            position=ints["length"],
            text_len=frame,
            **{name: ints[name] for name in SAMPLING_INTS},
            **floats,
        )
        for name, value in commit.items():
            getattr(s, name).index_copy_(0, ints["slot"], value)

    def set_blocks(self, slot: int, blocks: list[int]) -> None:
        """The KV blocks of the stream in `slot` (positions in order); on the
        device before the next decode step."""
        self.cache.set_blocks(slot, blocks)

    def set_sampling(self, slot: int, params: SlotParams) -> None:
        """Write `slot`'s sampling parameters as a prefill commits them: for tools
        that time a decode step over rows they did not prefill."""
        ints = dict(zip(PROMPT_INTS, prompt_ints(Prompt(slot, None, params), 0, 0), strict=True))
        floats = dict(zip(PROMPT_FLOATS, prompt_floats(params), strict=True))
        for name in SAMPLING_INTS:
            _set_one(getattr(self.state, name), slot, ints[name])
        for name, value in floats.items():
            _set_one(getattr(self.state, name), slot, value)

    def release(self, *slots: int) -> None:
        """Forget finished slots: position 0 and no blocks, so a slot may sit as
        padding in a batch bucket and write only where nothing lives (the scratch
        block).

        All of them in one index copy and one fill per state tensor: a one-element
        fill per slot and tensor (`_set_one`) made six torch calls a slot, each handing
        the interpreter lock over, 3.5 slots an iteration on the H100 at 120 req/s
        (bench/torch_calls.py: 21 calls an iteration, now 8)."""
        slots = list(dict.fromkeys(slots))
        if not slots:
            return
        for slot in slots:
            self.cache.set_blocks(slot, [])
        index = ids_on(slots, self.device)
        for name in ("position", "frame", "text_len"):
            getattr(self.state, name).index_fill_(0, index, 0)

    def set_text(self, slot: int, ids: list[int], start: int) -> None:
        """Store trailing text ids [start, start + len(ids)) of the slot."""
        self.set_texts([(slot, ids, start)])

    def set_texts(self, texts: list[tuple[int, list[int], int]]) -> None:
        """`set_text` of several slots, each at most once: (slot, ids, start) each.

        One copy (the ids, where they go, the slots' new lengths) and two index
        writes, however many slots: a copy and a one-element fill per slot made eight
        torch calls a slot, every newcomer's first text after its prefill
        (bench/torch_calls.py: 28 calls an iteration at 3.5 newcomers, now 8.4). A copy
        larger than a staging buffer (above ~1000 ids at once: several long pieces
        prefilled together) goes through a pinned copy of its own (`to_device`)."""
        if not texts:
            return
        slots = [slot for slot, _, _ in texts]
        if len(set(slots)) != len(slots):
            raise ValueError(f"a slot named twice in one call: {slots}")
        if any(start + len(ids) > self.max_text for _, ids, start in texts):
            raise ValueError(f"text longer than {self.max_text} tokens")
        width = self.max_text
        where = [slot * width + start + j for slot, ids, start in texts for j in range(len(ids))]
        values = [i for _, ids, _ in texts for i in ids]
        lengths = [start + len(ids) for _, ids, start in texts]
        n, k = len(values), len(texts)
        staged = ids_on(where + values + slots + lengths, self.device)
        where, values, slots, lengths = staged.split([n, n, k, k])
        if n:
            self._text_ids_flat.index_copy_(0, where, values)
        self.state.text_len.index_copy_(0, slots, lengths)

    def _sample_first_code(
        self, logits: torch.Tensor, rows: slice, frame: torch.Tensor
    ) -> torch.Tensor:
        s = self.state
        return self.sample(
            logits,
            s.temperature[rows],
            s.top_k[rows],
            s.top_p[rows],
            s.seed[rows],
            frame * self.groups,
            seen=s.seen[rows],
            penalty=s.repetition_penalty[rows],
            suppressed=self.suppressed,
            eos_only=self.eos_only,
            too_early=frame < s.min_frames[rows],
        )

    # ------------------------------------------------------------ decode step
    def step(self, B: int, L: int) -> None:
        """The decode step over slots [0, B) and KV length L; results land in
        state.out_codes / state.out_next. Only tensor ops: what a decode graph
        captures, run eagerly by `launch_decode` without graphs (and by profilers)."""
        s = self.state
        rows = slice(0, B)
        h, c0, frame = s.hidden[rows], s.code0[rows], s.frame[rows]
        frame_codes, embed_sum = self._frame(B, h, c0, frame)
        # Talker: the frame's code embeddings plus the next text token.
        idx = frame.clamp(max=self.max_text - 1)
        text_id = torch.where(
            frame < s.text_len[rows],
            s.text_ids[rows].gather(1, idx[:, None])[:, 0],
            torch.full_like(frame, self.tts_pad_id),
        )
        x = embed_sum + self.talker.text_hidden(text_id)
        position = s.position[rows]
        # Rows outside the batch (free slots) may hold any position: keep their
        # writes inside the table (their rows name only the scratch block);
        # occupied rows are below L by construction.
        at = position.clamp(max=L - 1)
        table = self.cache.table(B, L)
        hidden = self.talker.decode(x, at, self.cache.k, self.cache.v, table)
        nxt = self._sample_first_code(self.talker.logits(hidden), rows, frame + 1)
        # Commit only the active rows; the others keep their state (their KV
        # write landed past their live length, in a block of theirs that is
        # overwritten later or in the scratch block).
        act = s.active[rows]
        s.out_codes[rows] = frame_codes
        s.out_next[rows] = nxt
        s.hidden[rows] = torch.where(act[:, None], hidden, h)
        s.code0[rows] = torch.where(act, nxt, c0)
        s.frame[rows] = frame + act.long()
        s.position[rows] = position + act.long()
        # scatter, not one_hot: one_hot checks its input on the host (a sync).
        newly = torch.zeros_like(s.seen[rows]).scatter_(1, nxt[:, None], act[:, None])
        s.seen[rows] = s.seen[rows] | newly

    def _frame(
        self, B: int, h: torch.Tensor, c0: torch.Tensor, frame: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows' whole frames [B, groups] from their first codes, and the sum of the
        frames' code embeddings [B, hidden] the talker reads next."""
        p = self.predictor
        if p is None:  # one code a frame
            return c0[:, None], self.talker.codec_hidden(c0)
        s, rows = self.state, slice(0, B)
        counter = frame * self.groups
        # Code predictor: positions 0,1 = talker hidden, code 0; then one code each.
        pk, pv = self.predictor_cache.rows(0, B)
        x = torch.stack([p.project(h), p.project(self.talker.codec_hidden(c0))], dim=1)
        out = p.prefill(x, pk, pv)[:, -1]
        codes = [c0]
        for g in range(1, self.groups):
            if g > 1:
                out = p.decode(
                    p.embed_projected(g - 1, codes[-1]), self.predictor_positions[g][:B], pk, pv
                )
            code = self.sample(
                p.logits(g, out),
                s.sub_temperature[rows],
                s.sub_top_k[rows],
                s.sub_top_p[rows],
                s.seed[rows],
                counter + g,
            )
            codes.append(code)
        frame_codes = torch.stack(codes, dim=1)
        return frame_codes, self.talker.codec_hidden(c0) + p.embed_sum(frame_codes[:, 1:])

    @torch.inference_mode()
    def decode(
        self, batch: int, active: list[bool], live_len: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step over slots [0, batch), waiting for it (see `launch_decode`).
        -> (frame codes [batch, groups], next first codes [batch]) on the host."""
        return self.launch_decode(batch, active, live_len).result()

    @torch.inference_mode()
    def launch_decode(self, batch: int, active: list[bool], live_len: int) -> StepOutput:
        """Launch one step over slots [0, batch) and the copy of its codes to the
        host behind it, without waiting for either: the caller prepares the next
        iteration while the device steps, then reads `StepOutput.result()`.
        `live_len` = 1 + the largest position any occupied slot writes this step
        (stalled rows included: they write past their live length, which must
        stay inside the view). Work launched after this on the same stream (a
        prefill, text ids, released slots) runs after the step, so it never
        changes what the step reads. An error raised here is the step's own (a
        row's fault, an OOM); one raised by `result()` is the device's."""
        if live_len > self.max_len:
            raise ValueError("KV cache full")
        s = self.state
        self.cache.flush()
        # Every row's flag in one copy: rows past `batch` off (a bucket pads with them).
        flags = np.zeros(s.active.shape[0], dtype=np.bool_)
        flags[:batch] = active
        array_to_device(flags, self.device, out=s.active)
        if self.use_graphs:
            B = self._decode_bucket(batch)
            graph = self.graphs.get(B) or self.capture(B)
            graph.replay()
        else:
            self.step(batch, live_len)
        out = torch.cat([s.out_codes[:batch], s.out_next[:batch, None]], dim=1)
        return StepOutput(out, self.groups)
