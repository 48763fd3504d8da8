"""Sliding-window attention over the slot-addressed KV ring, the Triton kernel and its torch
twin, against attention over each stream's whole key history in float64.

Runs on the GPU when there is one, else in Triton's interpreter (TRITON_INTERPRET=1).
Ring entries that hold no position of the stream (before it began) are stale random
values, as a reopened slot's would be, so reading one shows in the output.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ttsfleet_runtime.kernels.window_attention import window_attention, window_attention_torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
IMPLEMENTATIONS = {"kernel": window_attention, "torch": window_attention_torch}


class Case:
    """B streams at `starts`, n new frames each, in the ring rows of distinct slots of a
    ring with `padded` more rows that all name the last (scratch) slot. Each stream's
    history (positions 0..start+n-1) is kept whole to build the reference from."""

    def __init__(self, starts, n, memory, kv_heads=2, group=1, d=16, padded=0, dtype=None, seed=0):
        dtype = dtype or torch.float32
        g = torch.Generator().manual_seed(seed)
        self.starts, self.n, self.memory = list(starts), n, memory
        real = len(starts)
        batch, H = real + padded, kv_heads * group
        rows = real + 3  # spare rows: untouched by the call
        self.history_k = [torch.randn(kv_heads, s + n, d, generator=g) for s in self.starts]
        self.history_v = [torch.randn(kv_heads, s + n, d, generator=g) for s in self.starts]
        k_ring = torch.randn(rows, kv_heads, memory, d, generator=g)  # stale everywhere
        v_ring = torch.randn(rows, kv_heads, memory, d, generator=g)
        self.slots = torch.randperm(rows - 1, generator=g)[:real].tolist() + [rows - 1] * padded
        for b, (s, slot) in enumerate(zip(self.starts, self.slots, strict=False)):
            for p in range(max(0, s - memory), s):
                k_ring[slot, :, p % memory] = self.history_k[b][:, p]
                v_ring[slot, :, p % memory] = self.history_v[b][:, p]
        # q, k, v: strided views of one [B, n, H + 2K, d] projection, as the model has them.
        qkv = torch.randn(batch, n, H + 2 * kv_heads, d, generator=g)
        for b, s in enumerate(self.starts):
            qkv[b, :, H : H + kv_heads] = self.history_k[b][:, s:].transpose(0, 1)
            qkv[b, :, H + kv_heads :] = self.history_v[b][:, s:].transpose(0, 1)
        qkv = qkv.to(DEVICE, dtype).transpose(1, 2)
        self.q, self.k, self.v = qkv.split([H, kv_heads, kv_heads], dim=1)
        self.k_ring, self.v_ring = k_ring.to(DEVICE, dtype), v_ring.to(DEVICE, dtype)
        self.slot_ids = torch.tensor(self.slots, device=DEVICE)
        self.start = torch.tensor(self.starts + [0] * padded, device=DEVICE)
        self.rings_before = (self.k_ring.clone(), self.v_ring.clone())

    def run(self, implementation):
        args = (self.q, self.k, self.v, self.k_ring, self.v_ring, self.slot_ids, self.start)
        return implementation(*args)

    def expected_output(self, b: int) -> torch.Tensor:
        """[n, H, d] float64: frame i at position s + i over positions s+i-memory..s+i."""
        s, n, H = self.starts[b], self.n, self.q.shape[1]
        keys, values = self.history_k[b].double(), self.history_v[b].double()
        group = H // keys.shape[0]
        keys, values = keys.repeat_interleave(group, 0), values.repeat_interleave(group, 0)
        positions = torch.arange(s + n)
        q_pos = positions[s:, None]
        visible = (positions[None, :] <= q_pos) & (positions[None, :] >= q_pos - self.memory)
        q = self.q[b].cpu().double()
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=visible).transpose(0, 1)

    def expected_ring(self, ring_before: torch.Tensor, history) -> torch.Tensor:
        """The stream's last `memory` positions at p % memory; slots of no stream unchanged."""
        ring = ring_before.cpu().clone()
        for b, s in enumerate(self.starts):
            end = s + self.n
            for p in range(max(0, end - self.memory), end):
                ring[self.slots[b], :, p % self.memory] = history[b][:, p].to(ring.dtype)
        return ring


def relative_error(out, ref):
    return ((out.cpu().double() - ref).norm() / ref.norm()).item()


def check(case: Case, implementation, dtype=torch.float32):
    out = case.run(implementation)
    real = len(case.starts)
    assert out.shape == (len(case.slots), case.n, case.q.shape[1], case.q.shape[3])
    for b in range(real):
        assert relative_error(out[b], case.expected_output(b)) < TOLERANCE[dtype], b
    k_before, v_before = case.rings_before
    scratch = len(case.k_ring) - 1
    want_k = case.expected_ring(k_before, case.history_k)
    want_v = case.expected_ring(v_before, case.history_v)
    # Every row but the scratch slot's exactly as expected: written or untouched.
    assert torch.equal(case.k_ring.cpu()[:scratch], want_k[:scratch])
    assert torch.equal(case.v_ring.cpu()[:scratch], want_v[:scratch])
    assert torch.isfinite(case.k_ring).all() and torch.isfinite(case.v_ring).all()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS.values(), ids=IMPLEMENTATIONS.keys())
@pytest.mark.parametrize(
    ("starts", "n", "memory"),
    [
        ((0,), 1, 7),
        ((0, 3, 7, 12, 40), 1, 7),
        ((0, 3, 7, 12, 40), 8, 7),  # n > memory: the chunk's first frame leaves the ring
        ((0, 5, 9), 20, 7),
        ((0, 50, 71, 200), 8, 71),  # the real ring (sliding window 72)
        ((0, 84), 128, 71),  # offline decode's chunks
    ],
    ids=["first-frame", "one-frame", "chunk-over-ring", "long-chunk", "real-ring", "offline"],
)
def test_attends_to_the_window_and_keeps_the_last_frames(implementation, starts, n, memory):
    check(Case(starts, n, memory), implementation)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS.values(), ids=IMPLEMENTATIONS.keys())
@pytest.mark.parametrize("group", [2, 4])
def test_query_heads_share_their_group_kv_head(implementation, group):
    check(Case((0, 4, 13), 5, 7, kv_heads=2, group=group, d=8, seed=1), implementation)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS.values(), ids=IMPLEMENTATIONS.keys())
def test_padded_rows_sharing_the_scratch_slot_leave_the_real_streams_exact(implementation):
    check(Case((2, 30, 7), 3, 7, padded=3, seed=2), implementation)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS.values(), ids=IMPLEMENTATIONS.keys())
def test_bfloat16_stays_close_and_writes_the_ring_exactly(implementation):
    case = Case((0, 6, 75, 140), 8, 71, kv_heads=2, d=64, dtype=torch.bfloat16, seed=3)
    check(case, implementation, torch.bfloat16)


def test_kernel_writes_into_the_given_output():
    case = Case((3, 9), 4, 7, seed=4)
    out = torch.full((2, 4, 2, 16), float("nan"), device=DEVICE)
    args = (case.q, case.k, case.v, case.k_ring, case.v_ring, case.slot_ids, case.start)
    assert window_attention(*args, out=out) is out
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS.values(), ids=IMPLEMENTATIONS.keys())
def test_rejects_mismatched_shapes(implementation):
    case = Case((3, 9), 4, 7)
    with pytest.raises(ValueError, match="k and v"):
        implementation(case.q, case.k[:, :1], case.v, case.k_ring, case.v_ring, case.slot_ids,
                       case.start)  # fmt: skip
    with pytest.raises(ValueError, match="rings"):
        implementation(case.q, case.k, case.v, case.k_ring[..., :8], case.v_ring, case.slot_ids,
                       case.start)  # fmt: skip
    with pytest.raises(ValueError, match="slots"):
        implementation(case.q, case.k, case.v, case.k_ring, case.v_ring, case.slot_ids[:1],
                       case.start)  # fmt: skip


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_one_captured_graph_serves_every_position():
    """Positions and slots change in place between replays of one graph."""
    case = Case((0, 3, 80), 8, 71, d=64, dtype=torch.bfloat16, seed=5)
    args = (case.q, case.k, case.v, case.k_ring, case.v_ring, case.slot_ids, case.start)
    out = torch.empty(3, 8, 2, 64, dtype=torch.bfloat16, device=DEVICE)
    window_attention(*args, out=out)  # compile first
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        window_attention(*args, out=out)
    for starts in ((5, 71, 9), (200, 0, 64)):
        fresh = Case(starts, 8, 71, d=64, dtype=torch.bfloat16, seed=6)
        for mine, theirs in zip(args, (fresh.q, fresh.k, fresh.v, fresh.k_ring, fresh.v_ring,
                                       fresh.slot_ids, fresh.start), strict=True):  # fmt: skip
            mine.copy_(theirs)
        graph.replay()
        for b in range(3):
            assert relative_error(out[b], fresh.expected_output(b)) < 1e-2
