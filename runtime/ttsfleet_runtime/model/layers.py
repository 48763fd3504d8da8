"""The Qwen3 decoder layer shared by the talker and the code predictor.

Engine-native: projections are fused at load time (one QKV matmul, one
gate-up matmul), the KV cache is a tensor the caller owns, and every shape is
static per batch so a whole decode step can be captured in a CUDA graph.

Two paths:
- prefill: every row starts at position 0 and writes T positions; causal
  attention over the fresh keys. Packed (the engine's batched prefill): one
  row holds several prompts back to back, `positions` restart at 0 for each
  and `segments` name each position's prompt, so a position attends only to
  the earlier positions of its own prompt (block-diagonal causal mask);
- decode: one new position per row at `positions[b]`; each row attends to
  cache positions 0..positions[b], whatever the length of the cache view, so
  one captured graph serves every length. The decode cache is slot-major
  [B, K, L, d] (the code predictor's), or a pool of blocks [N, K, PAGE, d] read
  through a block table [B, W] (the talker's: engine/kv_cache.py): position p
  of row b lives in block table[b, p // PAGE] at offset p % PAGE.

The decode path is six calls per layer of three operations (below), each with an
eager torch definition here. The layers call them through the `TalkerOps` they are
given (`model/ops.py`): these definitions, or on the GPU Triton kernels
(`ttsfleet_runtime/kernels`) that fuse the norms, the activation and the residual adds
into the matrix products and the KV write into RoPE: six kernels per layer instead of
~18.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .config import DecoderConfig
from .fp8 import Fp8Weight

if TYPE_CHECKING:
    from .ops import TalkerOps


def rms_norm_eager(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Normalise in float32 and cast back before the weight, like the reference.
    dtype = x.dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(dtype)


def qk_norm_rope_eager(q, k, q_weight, k_weight, cos, sin, eps: float):
    """Per-head RMSNorm of q [B, T, H, d] and k [B, T, K, d], transposed to
    [B, heads, T, d], then RoPE."""
    q = rms_norm_eager(q, q_weight, eps).transpose(1, 2)
    k = rms_norm_eager(k, k_weight, eps).transpose(1, 2)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def silu_mul_eager(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class RotaryTable(nn.Module):
    """cos/sin for every position up to `max_positions` (1-D RoPE; the talker's
    M-RoPE reduces to it because its three position streams are equal)."""

    def __init__(self, head_dim: int, theta: float, max_positions: int):
        super().__init__()
        inv_freq = 1.0 / (
            theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)
        )
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self._cast: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}

    def _table(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The table cast once per dtype."""
        if dtype not in self._cast:
            self._cast[dtype] = (self.cos.to(dtype), self.sin.to(dtype))
        return self._cast[dtype]

    def prefix(self, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions 0..length-1, the same for every row (prefill): views."""
        cos, sin = self._table(dtype)
        return cos[:length][None, None], sin[:length][None, None]

    def at(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions [T] (a packed prefill's, restarting per prompt), shaped
        like `prefix`'s: [1, 1, T, d]."""
        cos, sin = self._table(dtype)
        return cos[positions][None, None], sin[positions][None, None]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


def linear_eager(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    norm_weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    gated: bool = False,
    rms_norm=rms_norm_eager,
    silu_mul=silu_mul_eager,
) -> torch.Tensor:
    """A matrix product with what surrounds it in a layer: the input is
    rms_norm(x) (`norm_weight`) or silu(gate) * up (`gated`); the output gets
    `bias` and `residual` added. `rms_norm` and `silu_mul`: the fused operations'
    products that cuBLAS runs pass the row kernels (model/ops.py). `weight`: a tensor,
    or fp8 codes and scales (`Fp8Weight`, model/fp8.py) that run their own product."""
    if norm_weight is not None:
        x = rms_norm(x, norm_weight, eps)
    if gated:
        x = silu_mul(x)
    if isinstance(weight, Fp8Weight):
        y = weight.matmul(x)
        if bias is not None:
            y = y + bias
    else:
        y = F.linear(x, weight, bias)
    return y if residual is None else residual + y


def cache_index(positions, block_table, page: int):
    """Where positions [B] of rows 0..B-1 live: (cache rows, offsets) for a
    slot-major cache (block_table None) or a paged pool of `page`-long blocks."""
    if block_table is None:
        return torch.arange(positions.shape[0], device=positions.device), positions
    blocks = block_table.gather(1, (positions // page)[:, None])[:, 0].long()
    return blocks, positions % page


def gather_pages(pool: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """A pool of blocks [N, K, PAGE, d] read through block_table [B, W] -> the rows'
    caches [B, K, W * PAGE, d] (a copy)."""
    B, W = block_table.shape
    _, K, page, d = pool.shape
    rows = pool[block_table.reshape(-1).long()].view(B, W, K, page, d)
    return rows.transpose(1, 2).reshape(B, K, W * page, d)


def qk_norm_rope_write_eager(
    qkv, q_weight, k_weight, cos, sin, positions, k_cache, v_cache, eps, block_table=None
):
    """qkv [B, (H + 2K) * d] of one position per row -> q [B, H, d] normed and
    rotated; k (normed, rotated) and v are written into the caches
    [B, K, L, d] at positions [B] (or the pools [N, K, PAGE, d] through
    `block_table` [B, W]). cos/sin: float32 tables [positions, d]."""
    B = qkv.shape[0]
    K, page, d = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    H = qkv.shape[1] // d - 2 * K
    q, k, v = qkv.split([H * d, K * d, K * d], dim=-1)
    c = cos[positions].to(qkv.dtype)[:, None, None]  # [B, 1, 1, d]
    s = sin[positions].to(qkv.dtype)[:, None, None]
    q, k = qk_norm_rope_eager(q.view(B, 1, H, d), k.view(B, 1, K, d), q_weight, k_weight, c, s, eps)
    rows, at = cache_index(positions, block_table, page)
    k_cache[rows, :, at] = k[:, :, 0]
    v_cache[rows, :, at] = v.view(B, K, d)
    return q[:, :, 0]


def decode_attention_eager(q, k_cache, v_cache, lengths, block_table=None):
    """q [B, H, d], caches [B, K, L, d] (or pools [N, K, PAGE, d] read through
    `block_table` [B, W]) -> [B, H, d]; row b attends to cache positions
    0..lengths[b]-1. GQA: the query heads sharing one KV head become that
    head's query rows, so no key/value copy is made."""
    if block_table is not None:
        k_cache, v_cache = gather_pages(k_cache, block_table), gather_pages(v_cache, block_table)
    B, H, d = q.shape
    K, L = k_cache.shape[1], k_cache.shape[2]
    mask = decode_mask(lengths - 1, L, q.dtype)
    out = F.scaled_dot_product_attention(q.reshape(B, K, H // K, d), k_cache, v_cache, mask)
    return out.reshape(B, H, d)


class DecoderLayer(nn.Module):
    def __init__(self, c: DecoderConfig, ops: TalkerOps):
        super().__init__()
        self.ops = ops
        self.heads = c.num_attention_heads
        self.kv_heads = c.num_key_value_heads
        self.head_dim = c.head_dim
        self.eps = c.rms_norm_eps
        q, kv = self.heads * c.head_dim, self.kv_heads * c.head_dim
        self.qkv = nn.Parameter(torch.empty(q + 2 * kv, c.hidden_size), requires_grad=False)
        self.o = nn.Parameter(torch.empty(c.hidden_size, q), requires_grad=False)
        self.q_norm = nn.Parameter(torch.ones(c.head_dim), requires_grad=False)
        self.k_norm = nn.Parameter(torch.ones(c.head_dim), requires_grad=False)
        self.gate_up = nn.Parameter(
            torch.empty(2 * c.intermediate_size, c.hidden_size), requires_grad=False
        )
        self.down = nn.Parameter(
            torch.empty(c.hidden_size, c.intermediate_size), requires_grad=False
        )
        self.input_norm = nn.Parameter(torch.ones(c.hidden_size), requires_grad=False)
        self.post_attention_norm = nn.Parameter(torch.ones(c.hidden_size), requires_grad=False)

    def prefill(self, x, cos, sin, k_cache, v_cache, mask=None) -> torch.Tensor:
        """x [B, T, hidden] at positions 0..T-1; keys and values of those
        positions land in k_cache/v_cache [B, K, L, d]. `mask` (bool [1, 1, T,
        T], True = may attend) replaces plain causal attention (packed prompts)."""
        B, T, _ = x.shape
        d, H, K = self.head_dim, self.heads, self.kv_heads
        eps = self.eps
        qkv = self.ops.linear(x, self.qkv, norm_weight=self.input_norm, eps=eps)
        q, k, v = qkv.split([H * d, K * d, K * d], dim=-1)
        q, k = self.ops.qk_norm_rope(
            q.view(B, T, H, d), k.view(B, T, K, d), self.q_norm, self.k_norm, cos, sin, eps
        )
        v = v.view(B, T, K, d).transpose(1, 2)
        k_cache[:, :, :T] = k
        v_cache[:, :, :T] = v
        group = H // K
        out = F.scaled_dot_product_attention(
            q,
            k.repeat_interleave(group, dim=1),
            v.repeat_interleave(group, dim=1),
            attn_mask=mask,
            is_causal=mask is None,
        )
        return self._output_and_mlp(x, out.transpose(1, 2).reshape(B, T, H * d))

    def decode(
        self, x, positions, lengths, cos, sin, k_cache, v_cache, block_table=None
    ) -> torch.Tensor:
        """x [B, hidden], one new position per row at positions [B]; lengths =
        positions + 1 (computed once per stack, not once per layer). The caches
        are slot-major, or paged pools read through `block_table`."""
        B = x.shape[0]
        eps = self.eps
        qkv = self.ops.linear(x, self.qkv, norm_weight=self.input_norm, eps=eps)
        q = self.ops.qk_norm_rope_write(
            qkv,
            self.q_norm,
            self.k_norm,
            cos,
            sin,
            positions,
            k_cache,
            v_cache,
            eps,
            block_table=block_table,
        )
        attn = self.ops.decode_attention(q, k_cache, v_cache, lengths, block_table=block_table)
        return self._output_and_mlp(x, attn.reshape(B, -1))

    def _output_and_mlp(self, x, attn) -> torch.Tensor:
        """The attention's output projection added to the residual stream x, then
        the MLP (its input norm and SiLU gate fused into the products) added too."""
        x = self.ops.linear(attn, self.o, residual=x)
        gate_up = self.ops.linear(
            x, self.gate_up, norm_weight=self.post_attention_norm, eps=self.eps
        )
        return self.ops.linear(gate_up, self.down, gated=True, residual=x)


class DecoderStack(nn.Module):
    """Layers + final norm over a caller-owned KV cache [layers, B, K, L, d]."""

    def __init__(self, c: DecoderConfig, max_positions: int, ops: TalkerOps):
        super().__init__()
        self.config = c
        self.ops = ops
        self.layers = nn.ModuleList(DecoderLayer(c, ops) for _ in range(c.num_hidden_layers))
        self.norm = nn.Parameter(torch.ones(c.hidden_size), requires_grad=False)
        self.rope = RotaryTable(c.head_dim, c.rope_theta, max_positions)

    def prefill(self, x, k_cache, v_cache, positions=None, segments=None) -> torch.Tensor:
        """x [B, T, hidden] at positions 0..T-1 -> hidden states [B, T, hidden].
        Packed prompts: `positions` [T] (restarting at 0 per prompt) and
        `segments` [T] (which prompt each position belongs to; contiguous)."""
        mask = None
        if positions is None:
            cos, sin = self.rope.prefix(x.shape[1], x.dtype)
        else:
            cos, sin = self.rope.at(positions, x.dtype)
            mask = packed_causal_mask(segments)
        for i, layer in enumerate(self.layers):
            x = layer.prefill(x, cos, sin, k_cache[i], v_cache[i], mask)
        return self.ops.rms_norm(x, self.norm, self.config.rms_norm_eps)

    def decode(self, x, positions, k_cache, v_cache, block_table=None) -> torch.Tensor:
        """x [B, hidden], row b at position positions[b] (its cache holds
        0..positions[b]-1) -> hidden states [B, hidden]. Caches [layers, ...]:
        slot-major, or paged pools read through `block_table` [B, W]."""
        cos, sin = self.rope.cos, self.rope.sin
        lengths = positions + 1
        for i, layer in enumerate(self.layers):
            x = layer.decode(x, positions, lengths, cos, sin, k_cache[i], v_cache[i], block_table)
        return self.ops.rms_norm(x, self.norm, self.config.rms_norm_eps)


def packed_causal_mask(segments: torch.Tensor) -> torch.Tensor:
    """Bool mask [1, 1, T, T] for prompts packed back to back, `segments` [T]
    naming each position's prompt: a position sees itself and the earlier
    positions of its own prompt. Tensor ops only (built inside a graph)."""
    index = torch.arange(segments.shape[0], device=segments.device)
    causal = index[None, :] <= index[:, None]
    return (causal & (segments[None, :] == segments[:, None]))[None, None]


def decode_mask(positions: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [B, 1, 1, length]: row b sees cache slots 0..positions[b]."""
    keys = torch.arange(length, device=positions.device)
    visible = keys[None, :] <= positions.reshape(-1, 1)
    zero = torch.zeros((), dtype=dtype, device=positions.device)
    neg = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=positions.device)
    return torch.where(visible, zero, neg)[:, None, None, :]
