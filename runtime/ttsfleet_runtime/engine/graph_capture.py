"""The runner's CUDA graphs: the batch and prefill buckets, the order their graphs are
captured in, and the capture itself.

A decode step and a packed prefill are each one CUDA graph per bucket (the batch's slot
prefix, the prefill's positions): a step is thousands of kernels, too many to launch
one by one when the first audio is due in milliseconds. `GraphCapture` is the part of
`ModelRunner` that captures and picks them; it works on the runner's own state (its
slot state, prefill inputs, KV cache, `step` and `_prefill_step`), so it is written
as the runner's base class, not an object of its own.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable

import torch

from ..transfers import array_to_device
from .prefill_rows import ROWS_END

log = logging.getLogger(__name__)

BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
PREFILL_BUCKETS = (32, 64, 128, 256, 512, 1024)


def capture_order(buckets: Iterable[int]) -> tuple[int, ...]:
    """One kind's buckets (decode step, prefill, codec batch) in the order their CUDA
    graphs are captured: the smallest before ready, all that the warm-up synthesis and
    single streams use; once the engine serves, the largest, so that every batch fits
    a graph again (padded), then the rest smallest first, what light load runs."""
    ascending = sorted(set(buckets))
    return tuple(dict.fromkeys([ascending[0], ascending[-1], *ascending[1:-1]]))


def buckets_before_ready(buckets: Iterable[int]) -> tuple[int, ...]:
    """The buckets whose graphs are captured before the engine is ready."""
    return capture_order(buckets)[:1]


def buckets_after_ready(buckets: Iterable[int]) -> tuple[int, ...]:
    """The others, in the order they are captured once the engine serves."""
    return capture_order(buckets)[1:]


def prefill_buckets(max_len: int) -> tuple[int, ...]:
    """The packed prefill's lengths (one graph each) for slots of `max_len`
    positions; the largest is the most prompt positions one call takes."""
    return tuple(n for n in PREFILL_BUCKETS if n < max_len) or (max_len - 1,)


class GraphCapture:
    """Capture and choice of the runner's decode and prefill graphs (see the module
    docstring); `ModelRunner` provides the state and steps it captures."""

    # Start-up captures the graphs of `buckets_before_ready` (`capture_*_for_start`):
    # the smallest bucket of each kind, what the warm-up synthesis and single
    # streams use. The others follow once the engine serves (`capture_next`, on
    # the engine thread while it is idle), the largest first, so the time to
    # ready grows with neither the number nor the size of the buckets. A step
    # replays the smallest captured graph that holds it: a larger one only pads
    # more free slots (position 0, no blocks: they write the scratch block) or
    # more positions of the padding prompt, so its results are the same. A
    # batch or a prompt larger than every graph captured so far (a burst right
    # after ready) captures its own bucket's graph on that call.
    def _capture_prefill(self, P: int) -> torch.cuda.CUDAGraph:
        # Warm-up and capture write the scratch keys/values and the scratch row.
        with self.capture_lock, self._state_kept(), self._prompt_rows_unused():
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self._prefill_step(P)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.graph_pool, capture_error_mode="thread_local"):
                self._prefill_step(P)
            if self.graph_pool is None:
                self.graph_pool = graph.pool()
        self.prefill_graphs[P] = graph
        return graph

    def bucket(self, batch: int) -> int:
        """The batch bucket (captured graph) a step over `batch` slots runs in."""
        return next(b for b in self.batch_buckets if b >= batch)

    def _decode_bucket(self, batch: int) -> int:
        """The bucket a step over `batch` slots replays: the smallest captured one
        that holds it, else its own (captured on this first use)."""
        fitting = [size for size in self.graphs if size >= batch]
        return min(fitting) if fitting else self.bucket(batch)

    def _prefill_bucket(self, positions: int) -> int:
        """Likewise for a packed prefill of `positions`."""
        fitting = [size for size in self.prefill_graphs if size >= positions]
        return min(fitting) if fitting else next(n for n in self.prefill_buckets if n >= positions)

    @contextlib.contextmanager
    def _prompt_rows_unused(self):
        """The packed prefill's per-prompt rows all unused meanwhile, then put back.

        A capture runs the prefill of its bucket on whatever the rows hold: after a
        real call they are that call's prompts, whose last positions may lie beyond a
        smaller bucket (a burst packs hundreds of positions); gathering them from the
        bucket's hidden states then reads out of bounds (on a GPU a device-side
        assert, which ends every stream of the process). Captured on unused rows, the
        graph reads position 0 and writes the scratch row; the call that needed the
        graph (its rows already written) finds them as it left them."""
        rows = self.prefill_inputs[:ROWS_END]
        kept = rows.clone()
        array_to_device(self._unused_prompt_rows(), self.device, out=rows)
        try:
            yield
        finally:
            rows.copy_(kept)

    @contextlib.contextmanager
    def _state_kept(self):
        """Steps run inside advance nothing: every state tensor is put back after."""
        s = self.state
        saved = {n: t.clone() for n, t in vars(s).items() if isinstance(t, torch.Tensor)}
        s.active.zero_()
        try:
            yield
        finally:
            for n, t in saved.items():
                getattr(s, n).copy_(t)

    def capture(self, B: int) -> torch.cuda.CUDAGraph:
        """Capture the decode step of batch bucket B over the whole KV cache.

        Every decode and prefill graph shares one memory pool, whichever is
        captured first: a later, larger capture grows it. Sharing is safe because
        a graph's results go to tensors outside the pool (the slot state, the
        prefill's keys and values) and one thread replays them, one at a time."""
        L = self.max_len
        # The step writes keys and values through the block table: the device's
        # copy must be the scheduler's (as before any step), not one step old.
        self.cache.flush()
        with self.capture_lock, self._state_kept():
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self.step(B, L)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the codec worker may use the device meanwhile.
            with torch.cuda.graph(graph, pool=self.graph_pool, capture_error_mode="thread_local"):
                self.step(B, L)
            if self.graph_pool is None:
                self.graph_pool = graph.pool()
        self.graphs[B] = graph
        return graph

    @torch.inference_mode()
    def compile(self) -> float:
        """Run the decode step and the packed prefill once eagerly at their largest
        buckets, advancing nothing: Triton compiles the kernels here (or loads
        them from the compile cache), so the start-up
        log tells compiling from capturing. -> seconds taken."""
        if not self.use_graphs:
            return 0.0
        t0 = time.monotonic()
        self.cache.flush()
        with self._state_kept():
            self.step(self.batch_buckets[-1], self.max_len)
            self._prefill_step(self.prefill_buckets[-1])
        torch.cuda.synchronize()
        return time.monotonic() - t0

    @torch.inference_mode()
    def capture_decode_for_start(self) -> float:
        """The decode graphs captured before ready (`buckets_before_ready`: a single
        stream's, the warm-up synthesis's). -> seconds taken."""
        return self._capture_for_start(self.batch_buckets, self.capture)

    @torch.inference_mode()
    def capture_prefill_for_start(self) -> float:
        """Likewise the prefill's (the smallest bucket: a prompt or a few). -> seconds taken."""
        return self._capture_for_start(self.prefill_buckets, self._capture_prefill)

    def _capture_for_start(
        self, buckets: tuple[int, ...], capture: Callable[[int], object]
    ) -> float:
        if not self.use_graphs:
            return 0.0
        t0 = time.monotonic()
        for size in buckets_before_ready(buckets):
            capture(size)
        torch.cuda.synchronize()
        return time.monotonic() - t0

    @property
    def graphs_left(self) -> list[tuple[str, int]]:
        """Buckets without a graph yet, in the order `capture_next` takes them:
        decode and prefill in turn, each in `capture_order` (after the start's,
        the largest, then small ones first). The turns are fixed by the buckets,
        not by what is left, so the largest prefill follows the largest step."""
        turns = itertools.zip_longest(
            [("decode", B) for B in capture_order(self.batch_buckets)],
            [("prefill", P) for P in capture_order(self.prefill_buckets)],
        )
        captured = {"decode": self.graphs, "prefill": self.prefill_graphs}
        return [
            (kind, size)
            for pair in turns
            for kind, size in filter(None, pair)
            if size not in captured[kind]
        ]

    @torch.inference_mode()
    def capture_next(self) -> tuple[str, int] | None:
        """Capture one graph not captured yet (engine thread, between steps).
        -> its (kind, bucket), or None when there was none left."""
        left = self.graphs_left if self.use_graphs else []
        if not left:
            return None
        kind, size = left[0]
        if kind == "decode":
            self.capture(size)
        else:
            self._capture_prefill(size)
        return kind, size

    @torch.inference_mode()
    def capture_all(self, progress: Callable[[str], None] | None = None) -> float:
        """Capture every batch bucket's decode graph, largest first so the shared
        memory pool is sized once, then every prefill bucket. -> seconds taken."""
        if not self.use_graphs:
            return 0.0
        t0 = time.monotonic()
        say = progress or (lambda message: None)
        todo = list(reversed(self.batch_buckets))
        for i, B in enumerate(todo):
            self.capture(B)
            if i % 4 == 3 or i == len(todo) - 1:
                say(f"captured {i + 1}/{len(todo)} decode graphs (batch {B})")
        for P in reversed(self.prefill_buckets):
            self._capture_prefill(P)
        say(
            f"captured {len(self.prefill_buckets)} prefill graphs (up to {self.prefill_buckets[-1]} positions)"
        )
        torch.cuda.synchronize()
        seconds = time.monotonic() - t0
        log.info(
            "graphs captured",
            extra={
                "decode_graphs": len(todo),
                "prefill_graphs": len(self.prefill_buckets),
                "seconds": round(seconds, 2),
            },
        )
        return seconds
