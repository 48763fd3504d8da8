"""Sliding-window attention over a slot-addressed KV ring: the 12 Hz codec decoder's
pre-transformer, a chunk of frames per stream at a time.

Why a kernel of our own: each query frame attends to itself and the `memory` frames
before it, so a stream only needs its last `memory` keys and values per layer (71 frames,
2.3 MB a stream over 8 layers at bf16: most of the codec's per-stream state). Kept in the
gathered per-stream state they cost, at 128 streams of 8 frames, a gather, a scatter,
copies back into the state views and a concatenation per layer (~2 ms a step), and then
cuDNN ran a prefill flash kernel on 8 queries x 79 keys (0.87 ms for 8 layers). Here the
keys stay where they are: every program reads its stream's ring rows in place through
the slot index, attends, and writes the chunk's keys back into the ring.

Layout:
- q [B, H, n, d]; k, v [B, K, n, d]: the chunk's queries and its own new keys/values
  (RoPE applied), frame i at position start[b] + i; any strides.
- k_ring, v_ring [R, K, M, d] (M = memory): the last M keys/values of every slot, position
  p at ring index p % M. Row b of the batch reads and writes ring row slots[b]. Rows
  padded up to a captured batch size all name one scratch slot: their writes race, their
  outputs are discarded, and everything they read stays finite.
- start [B] int64: each stream's first frame position in this chunk, read on the device
  (no host sync: CUDA-graph safe; shapes depend on (B, n) only).
- out [B, n, H, d]: the layout the output projection reads as [B, n, H * d].
Query frame at position qp sees key position kp iff 0 <= kp, qp - M <= kp <= qp.

One program handles one (stream, KV head): the chunk's query frames x the H/K query
heads of that group are the rows of one tl.dot tile (padded to 16). It loads the ring
rows, then the chunk's own keys (causal), with float32 online softmax in base 2; after
a barrier it writes the chunk's last min(n, M) keys/values to the ring. Reads of the ring
all happen before any write of it (the one program owns that ring row), so n may exceed
M (offline decode runs chunks of 128 frames).

`window_attention_torch` is the same computation in torch ops (CPU, eager, and parity
tests); the codec picks between them (speech_tokenizer/rate12/transformer.py).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from .decode_attention import _DOT_TYPES, _INTERPRETED, _MIN_DOT

# Query rows (frames x heads of a group) per tile: 8 frames of one head fill one padded
# tile; offline chunks (128 frames) loop over tiles of this many.
_MAX_QUERY_ROWS = 64


@dataclasses.dataclass(frozen=True)
class _Tiles:
    block_n: int  # keys per step of the online softmax
    num_warps: int
    num_stages: int


# A decode step's chunk (one padded query tile: up to 16 frames of a head) is a few tiny
# products per program, latency-bound: 16-key steps in one warp, unpipelined, so that many
# programs share an SM (H100, 128 streams x 8 frames, 16 heads: 19.7 us a layer against
# 35.4 for 64-key steps in 4 warps; bench/window_attention_tiles.py at 7d79071, 48 configs).
# Longer chunks (offline decode, 64 query rows a tile) keep 64-key steps in 4 warps.
_STEP_TILES = _Tiles(block_n=16, num_warps=1, num_stages=1)
_CHUNK_TILES = _Tiles(block_n=64, num_warps=4, num_stages=2)


@triton.jit
def _attend_tile(
    q,
    k,
    v,
    visible,
    m_i,
    l_i,
    acc,
    scale_log2e,
    DOT_TYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One key tile into the online softmax; rows that see none of it stay unchanged (a
    row's first tiles may be all masked: its maximum is still -inf, so 0 stands in)."""
    s = tl.dot(q, tl.trans(k.to(DOT_TYPE)), input_precision=DOT_PRECISION) * scale_log2e
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    pv = tl.dot(p.to(DOT_TYPE), v.to(DOT_TYPE), input_precision=DOT_PRECISION)
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit
def _window_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    k_ring_ptr,
    v_ring_ptr,
    slots_ptr,
    start_ptr,
    out_ptr,
    n,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_rkb,
    stride_rkh,
    stride_rkm,
    stride_rkd,
    stride_rvb,
    stride_rvh,
    stride_rvm,
    stride_rvd,
    stride_ob,
    stride_on,
    stride_oh,
    stride_od,
    scale_log2e,
    KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    MEMORY: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    DOT_TYPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    b = (pid // KV_HEADS).to(tl.int64)
    kh = (pid % KV_HEADS).to(tl.int64)
    slot = tl.load(slots_ptr + b).to(tl.int64)
    start = tl.load(start_ptr + b).to(tl.int64)
    # Ring index j holds position start - MEMORY + ((j - start) mod MEMORY), the last
    # MEMORY positions before the chunk; all operands kept non-negative for the modulo.
    start_mod = start % MEMORY

    offs_r = tl.arange(0, BLOCK_Q)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    k_new = k_ptr + b * stride_kb + kh * stride_kh + offs_d[None, :] * stride_kd
    v_new = v_ptr + b * stride_vb + kh * stride_vh + offs_d[None, :] * stride_vd
    k_ring = k_ring_ptr + slot * stride_rkb + kh * stride_rkh + offs_d[None, :] * stride_rkd
    v_ring = v_ring_ptr + slot * stride_rvb + kh * stride_rvh + offs_d[None, :] * stride_rvd

    rows = n * GROUP  # query rows: frame i, head kh * GROUP + g at row i * GROUP + g
    for r0 in range(0, rows, BLOCK_Q):
        r = r0 + offs_r
        r_mask = r < rows
        frame = r // GROUP
        head = kh * GROUP + r % GROUP
        q_rows = r_mask[:, None] & d_mask[None, :]
        q = tl.load(
            q_ptr
            + b * stride_qb
            + head[:, None] * stride_qh
            + frame[:, None] * stride_qn
            + offs_d[None, :] * stride_qd,
            mask=q_rows,
            other=0.0,
        ).to(DOT_TYPE)
        oldest_seen = start + frame - MEMORY  # [BLOCK_Q]: the oldest position a row sees
        m_i = tl.full([BLOCK_Q], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_Q], dtype=tl.float32)
        acc = tl.zeros([BLOCK_Q, BLOCK_D], dtype=tl.float32)
        first_frame = r0 // GROUP
        last_frame = tl.minimum((r0 + BLOCK_Q - 1) // GROUP, n - 1)

        # The ring: only frames fewer than MEMORY into the chunk can still see any of it.
        if first_frame < MEMORY:
            for j0 in range(0, MEMORY, BLOCK_N):
                j = j0 + offs_n
                j_mask = j < MEMORY
                pos = start - MEMORY + (j - start_mod + MEMORY) % MEMORY
                visible = (
                    j_mask[None, :] & (pos[None, :] >= 0) & (pos[None, :] >= oldest_seen[:, None])
                )
                kv_rows = j_mask[:, None] & d_mask[None, :]
                k = tl.load(k_ring + j[:, None] * stride_rkm, mask=kv_rows, other=0.0)
                v = tl.load(v_ring + j[:, None] * stride_rvm, mask=kv_rows, other=0.0)
                m_i, l_i, acc = _attend_tile(
                    q, k, v, visible, m_i, l_i, acc, scale_log2e, DOT_TYPE, DOT_PRECISION
                )

        # The chunk's own keys: causal, and no older than MEMORY frames before each query.
        for t0 in range(tl.maximum(first_frame - MEMORY, 0), last_frame + 1, BLOCK_N):
            t = t0 + offs_n
            t_mask = t < n
            visible = (
                t_mask[None, :]
                & (t[None, :] <= frame[:, None])
                & (t[None, :] >= frame[:, None] - MEMORY)
            )
            kv_rows = t_mask[:, None] & d_mask[None, :]
            k = tl.load(k_new + t[:, None] * stride_kn, mask=kv_rows, other=0.0)
            v = tl.load(v_new + t[:, None] * stride_vn, mask=kv_rows, other=0.0)
            m_i, l_i, acc = _attend_tile(
                q, k, v, visible, m_i, l_i, acc, scale_log2e, DOT_TYPE, DOT_PRECISION
            )

        # Every live row sees at least its own frame; padding rows see nothing (no 0 / 0).
        out = acc / tl.where(r_mask, l_i, 1.0)[:, None]
        tl.store(
            out_ptr
            + b * stride_ob
            + frame[:, None] * stride_on
            + head[:, None] * stride_oh
            + offs_d[None, :] * stride_od,
            out.to(out_ptr.dtype.element_ty),
            mask=q_rows,
        )

    # Every read of this program's ring row is done before any thread overwrites it.
    tl.debug_barrier()
    for t0 in range(tl.maximum(n - MEMORY, 0), n, BLOCK_N):
        t = t0 + offs_n
        kv_rows = (t < n)[:, None] & d_mask[None, :]
        at = (start + t) % MEMORY
        k = tl.load(k_new + t[:, None] * stride_kn, mask=kv_rows)
        v = tl.load(v_new + t[:, None] * stride_vn, mask=kv_rows)
        tl.store(k_ring + at[:, None] * stride_rkm, k, mask=kv_rows)
        tl.store(v_ring + at[:, None] * stride_rvm, v, mask=kv_rows)


def _check_shapes(q, k, v, k_ring, v_ring, slots, start) -> None:
    B, H, n, d = q.shape
    K = k_ring.shape[1]
    if k.shape != (B, K, n, d) or v.shape != k.shape:
        raise ValueError(f"k and v must be [{B}, {K}, {n}, {d}], got {tuple(k.shape)}")
    if k_ring.dim() != 4 or k_ring.shape[3] != d or v_ring.shape != k_ring.shape or H % K:
        raise ValueError(f"rings must be [R, K, M, {d}], got {tuple(k_ring.shape)}")
    if slots.shape != (B,) or start.shape != (B,):
        raise ValueError(f"slots and start must be [{B}], got {slots.shape}, {start.shape}")


def window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_ring: torch.Tensor,
    v_ring: torch.Tensor,
    slots: torch.Tensor,
    start: torch.Tensor,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sliding-window attention of n query frames per stream (layout in the module
    docstring) -> [B, n, H, d] in q's dtype (into `out` if given); then the chunk's last
    min(n, M) keys/values are in the ring rows of `slots`. Graph-safe: no host sync."""
    _check_shapes(q, k, v, k_ring, v_ring, slots, start)
    B, H, n, d = q.shape
    K, M = k_ring.shape[1], k_ring.shape[2]
    if out is None:
        out = torch.empty((B, n, H, d), dtype=q.dtype, device=q.device)
    group = H // K
    dot_type = tl.float32 if _INTERPRETED else _DOT_TYPES[q.dtype]
    block_q = max(_MIN_DOT, min(_MAX_QUERY_ROWS, triton.next_power_of_2(n * group)))
    tiles = _STEP_TILES if block_q <= _MIN_DOT else _CHUNK_TILES
    _window_attention_kernel[(B * K,)](
        q,
        k,
        v,
        k_ring,
        v_ring,
        slots,
        start,
        out,
        n,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *k_ring.stride(),
        *v_ring.stride(),
        *out.stride(),
        d**-0.5 * 1.4426950408889634,  # log2(e): the kernel works in base 2
        KV_HEADS=K,
        GROUP=group,
        HEAD_DIM=d,
        MEMORY=M,
        BLOCK_Q=block_q,
        BLOCK_N=max(_MIN_DOT, min(tiles.block_n, triton.next_power_of_2(M))),
        BLOCK_D=max(_MIN_DOT, triton.next_power_of_2(d)),
        DOT_TYPE=dot_type,
        DOT_PRECISION="ieee" if dot_type == tl.float32 else "tf32",
        num_warps=tiles.num_warps,
        num_stages=tiles.num_stages,
    )
    return out


def ring_positions(start: torch.Tensor, memory: int) -> torch.Tensor:
    """[B] next positions -> [B, memory]: the position ring index j holds (negative:
    before the stream began, an entry never seen)."""
    j = torch.arange(memory, device=start.device)
    return start[:, None] - memory + (j - start[:, None]) % memory


def window_attention_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    k_ring: torch.Tensor,
    v_ring: torch.Tensor,
    slots: torch.Tensor,
    start: torch.Tensor,
) -> torch.Tensor:
    """`window_attention` in torch ops: the ring rows gathered by slot ahead of the
    chunk's keys, a masked SDPA, then the ring write. Returns a [B, n, H, d] view."""
    _check_shapes(q, k, v, k_ring, v_ring, slots, start)
    B, H, n, d = q.shape
    K, M = k_ring.shape[1], k_ring.shape[2]
    q_pos = start[:, None] + torch.arange(n, device=q.device)  # [B, n]
    k_pos = torch.cat([ring_positions(start, M), q_pos], dim=1)  # [B, M + n]
    qp, kp = q_pos[:, :, None], k_pos[:, None, :]
    visible = ((kp >= 0) & (kp <= qp) & (kp >= qp - M))[:, None]  # [B, 1, n, M + n]
    # Gathered (copies) before the write below changes the ring.
    keys = torch.cat([k_ring.index_select(0, slots), k], dim=2)
    values = torch.cat([v_ring.index_select(0, slots), v], dim=2)
    if H != K:  # expand, not repeat_interleave: no host sync
        length = keys.shape[2]
        keys = keys[:, :, None].expand(B, K, H // K, length, d).reshape(B, H, length, d)
        values = values[:, :, None].expand(B, K, H // K, length, d).reshape(B, H, length, d)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)

    kept = min(n, M)
    at = (start[:, None] + torch.arange(n - kept, n, device=q.device)) % M  # [B, kept]
    # Indices on dims 0 and 2 put the index dims first: [B, kept, K, d].
    k_ring[slots[:, None], :, at] = k[:, :, n - kept :].transpose(1, 2)
    v_ring[slots[:, None], :, at] = v[:, :, n - kept :].transpose(1, 2)
    return out.transpose(1, 2)
