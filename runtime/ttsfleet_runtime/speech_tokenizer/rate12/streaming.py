"""StreamingCodec: incremental decode of many audio streams in one batch.

Each stream owns a slot: one row of a preallocated state buffer per dtype, packing every
conv's left context and the next frame position (see `CodecDecoder.state_spec`), and one
row of each transformer layer's key/value ring (`CodecDecoder.ring_spec`). A decode call
gathers the packed rows of the slots it serves (one gather per dtype), runs
`CodecDecoder.step` on views of them and scatters the new state back; the rings, most of
the bytes, stay in place: the step reads and writes their rows through the slot index.
So any mix of streams and any chunk sizes give the samples that decoding each stream
offline gives.

Shapes depend only on (batch, frames), never on the stream's age, so a decode call can
be captured as a CUDA graph per (batch, frames) bucket (`capture`); eager calls (CPU,
or shapes not captured) run the very same `_step`.

Engine usage:
    codec = StreamingCodec(decoder, max_streams, device)
    slot = codec.open()                                # fresh state: silence before frame 0
    pcm = codec.decode([slot, ...], codes)             # codes [B, n, 16] -> float32 [B, n*1920]
    codec.close(slot)
"""

from __future__ import annotations

import math

import torch

from ...transfers import ids_on
from ..slots import SlotPool
from .decoder import CodecDecoder


class StreamingCodec:
    def __init__(
        self, decoder: CodecDecoder, max_streams: int, device: str | torch.device | None = None
    ):
        self.decoder = decoder
        self.device = torch.device(device) if device is not None else decoder.device
        self.max_streams = max_streams
        self.samples_per_frame = decoder.samples_per_frame
        self.num_quantizers = decoder.config.num_quantizers
        # Where each state tensor lives in its dtype's packed row: key -> (dtype, offset, shape).
        self._layout: dict[str, tuple[torch.dtype, int, tuple[int, ...]]] = {}
        widths: dict[torch.dtype, int] = {}
        for key, (shape, kind) in decoder.state_spec().items():
            dtype = kind or decoder.dtype
            self._layout[key] = (dtype, widths.get(dtype, 0), shape)
            widths[dtype] = widths.get(dtype, 0) + math.prod(shape)
        # One extra row: the scratch slot that pads a batch up to a captured bucket.
        self._scratch = max_streams
        self._state = {
            dtype: torch.zeros((max_streams + 1, width), dtype=dtype, device=self.device)
            for dtype, width in widths.items()
        }
        self._rings = {
            key: torch.zeros(
                (max_streams + 1, *shape), dtype=kind or decoder.dtype, device=self.device
            )
            for key, (shape, kind) in decoder.ring_spec().items()
        }
        # Each slot's rows of every buffer, as views made once: `open` zeroes them in one
        # multi-tensor call.
        buffers = (*self._state.values(), *self._rings.values())
        self._slot_rows = [[rows[slot] for rows in buffers] for slot in range(max_streams)]
        self._slots = SlotPool(max_streams, "codec")
        self._graphs: dict[tuple[int, int], _CapturedStep] = {}
        self._graph_pool = None  # one memory pool for every graph, whenever captured

    # ---------------------------------------------------------------- slots
    def open(self) -> int:
        """A slot for a new stream, its state reset to the start of a stream."""
        slot = self._slots.take()
        # The rings too: a young stream masks out the entries before its first frame, and
        # masked entries must be finite (0 x NaN is NaN) whatever the last stream left.
        # One call for all the buffers' rows: a `zero_()` per buffer made the codec thread
        # hand the interpreter lock over twice per buffer for every new stream, and at
        # 160 req/s on the H100 it waited to take it back in 39% of its active samples,
        # most of them here (git show 7d79071:bench/results/README.md, session 13, call 8).
        torch._foreach_zero_(self._slot_rows[slot])
        return slot

    def close(self, slot: int) -> None:
        self._slots.give_back(slot)

    @property
    def active(self) -> int:
        return self._slots.taken

    @property
    def state_bytes_per_stream(self) -> int:
        buffers = (*self._state.values(), *self._rings.values())
        return sum(rows[0].numel() * rows.element_size() for rows in buffers)

    # ---------------------------------------------------------------- decode
    def decode(self, slots: list[int], codes: torch.Tensor) -> torch.Tensor:
        """Next frames of the streams in `slots`: codes [B, n, 16] -> float32 [B, n*1920]."""
        if len(set(slots)) != len(slots) or not self._slots.holds(slots):
            raise ValueError(f"slots must be distinct open slots, got {slots}")
        q = self.num_quantizers
        if codes.dim() != 3 or codes.shape[0] != len(slots) or codes.shape[2] != q:
            raise ValueError(f"codes must be [{len(slots)}, n, {q}], got {tuple(codes.shape)}")
        batch, frames = codes.shape[0], codes.shape[1]
        graph = self._graph_for(batch, frames)
        if graph is not None:
            return graph.run(slots, codes)
        index = ids_on(slots, self.device)
        with torch.inference_mode():
            # The step writes the rings in place, layer by layer, over the entries the
            # next frames evict: a step that raises after some layers (an out-of-memory)
            # would leave its streams' rings ahead of their packed state, and the codec
            # worker's retry of each stream alone would read new keys as old ones. So an
            # eager call keeps its streams' ring rows and puts them back when it raises.
            # (A captured graph's failure is the device's, not a call's: nothing retries it.)
            kept = [rows.index_select(0, index) for rows in self._rings.values()]
            try:
                return self._step(index, codes.to(self.device, torch.long))
            except Exception:
                for rows, before in zip(self._rings.values(), kept, strict=True):
                    rows.index_copy_(0, index, before)
                raise

    def _step(self, index: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        gathered = {dtype: rows.index_select(0, index) for dtype, rows in self._state.items()}
        batch = index.shape[0]
        views = {
            key: gathered[dtype][:, offset : offset + math.prod(shape)].view(batch, *shape)
            for key, (dtype, offset, shape) in self._layout.items()
        }
        state = views | self._rings
        pcm = self.decoder.step(codes, state, index)  # replaces each gathered entry
        for dtype, rows in self._state.items():
            # The new entries side by side in their packed order: one batched copy of
            # strided views (on a GPU), not a copy per entry (28 launches, 0.25 ms of the
            # decoder's 15 at 128 streams x 8 frames).
            keys = [key for key, (kind, _, _) in self._layout.items() if kind == dtype]
            packed = torch.cat([state[key].reshape(batch, -1) for key in keys], dim=1)
            rows.index_copy_(0, index, packed)
        return pcm

    # ---------------------------------------------------------------- CUDA graphs
    def capture(self, batch_sizes: list[int], frame_counts: list[int]) -> None:
        """Capture one CUDA graph per (batch, frames); later calls with a batch up to a
        captured size (padded with the scratch slot) and the same frame count replay it."""
        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        # cuDNN's heuristics pick slow kernels for these channels-last shapes (the server
        # served 4x worse on them): on a cuDNN route each capture's warm-up times the
        # candidates once per shape, as the benchmarks measured. The other routes' few
        # cuDNN calls (depthwise) keep the heuristics: timing costs ~0.1 s per shape.
        with torch.backends.cudnn.flags(enabled=True, benchmark=self.decoder.route.times_cudnn):
            for frames in sorted(frame_counts, reverse=True):
                for batch in sorted(batch_sizes, reverse=True):  # largest first: sizes the pool
                    if (batch, frames) in self._graphs:
                        continue
                    step = _CapturedStep(self, batch, frames, self._graph_pool)
                    self._graph_pool = step.graph.pool()
                    self._graphs[(batch, frames)] = step

    def has_graph(self, batch: int, frames: int) -> bool:
        return (batch, frames) in self._graphs

    def replay_graph(self, batch: int, frames: int) -> None:
        """Replay the captured graph of (batch, frames) on the inputs its last `decode`
        left, advancing nothing a caller reads: the step's device time alone, without
        the upload and the output copy around it (benchmarks)."""
        self._graphs[(batch, frames)].graph.replay()

    def _graph_for(self, batch: int, frames: int) -> _CapturedStep | None:
        sizes = [b for (b, n) in self._graphs if n == frames and b >= batch]
        return self._graphs[(min(sizes), frames)] if sizes else None


class _CapturedStep:
    """One CUDA graph of `StreamingCodec._step` for a fixed (batch, frames)."""

    def __init__(self, codec: StreamingCodec, batch: int, frames: int, pool):
        self.codec = codec
        self.batch = batch
        device = codec.device
        self.index = torch.full((batch,), codec._scratch, dtype=torch.long, device=device)
        self.codes = torch.zeros(
            (batch, frames, codec.num_quantizers), dtype=torch.long, device=device
        )
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(2):  # warm-up outside the graph (allocator, lazy inits)
                codec._step(self.index, self.codes)
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        # thread_local: after start-up the engine thread uses the device meanwhile.
        capturing = torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local")
        with torch.inference_mode(), capturing:
            self.pcm = codec._step(self.index, self.codes)

    def run(self, slots: list[int], codes: torch.Tensor) -> torch.Tensor:
        n = len(slots)
        # The rows past the batch pad with the scratch slot: one upload, into the graph's input.
        padded = [*slots, *[self.codec._scratch] * (self.batch - n)]
        ids_on(padded, self.index.device, out=self.index)
        self.codes[:n].copy_(codes, non_blocking=True)
        self.graph.replay()
        # The graph's output buffer is overwritten by the next replay.
        return self.pcm[:n].clone()
