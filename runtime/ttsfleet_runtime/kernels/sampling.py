"""Sampling in one Triton kernel per call, without sorting the vocabulary.

`model.sampling.sample` sorts every row (a radix sort per call) to find the
top-k and top-p cuts, then runs a handful of elementwise kernels; a decode
step samples 16 times. Here one program per row holds the row in registers
and finds both cuts by bisection on an order-preserving 32-bit integer key of
the float32 value (exact: each step halves an integer interval):

- top-k: the largest key K with count(key >= K) >= k; kept: key > K, then
  of the tokens tied at K the first in index order, up to k in all.
- top-p: the smallest key K whose probability mass strictly above it (softmax
  over the top-k set) is < top_p; kept: key > K, then the tokens tied at K in
  index order while the mass before each is < top_p.

That is the stable sort's rule ("keep the rank-r token iff r < k and the mass
of the tokens ranked before it is < top_p", ties ranked by index), so the kept
set is the sort's even with ties, which bf16 logits have plenty of. The
kernel then takes argmax(x / t + Gumbel noise) over the kept set, with the
noise bit-for-bit that of `model.sampling.gumbel_noise` (the same 32-bit
hash of seed, counter and vocabulary index). Given `seen` etc., it first
applies `model.sampling.first_code_logits`' processors, so the talker's
first code is one kernel too.

Where the ids can differ from the sort's: equal scores (x / t + noise) pick
the first index here, the first rank there (a tie of two float sums); and
the top-p mass is summed in another order than the sort's cumsum, so a token
whose preceding mass lies within float rounding (~1e-7) of top_p may fall on
the other side (torch's CPU and CUDA cumsums differ in the same way). A row
whose top-p cut keeps nothing (top_p <= 0) samples its first maximum, as the
sort's all -inf argmax does.

Graph-safe: no host synchronisation, the output is allocated from shapes,
per-row parameters are read on the device.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

# torch's log is CUDA's correctly-rounded-within-1-ulp logf, i.e. libdevice's
# __nv_logf; tl.log may lower to the faster approximation. The interpreter has
# no libdevice, and there numpy's log stands in for both.
_PRECISE_LOG = os.environ.get("TRITON_INTERPRET", "0") != "1"


@triton.jit
def _mix32(x):
    # model.sampling._mix32 in uint32 arithmetic: products wrap mod 2^32,
    # which is what its int64 `& 0xFFFFFFFF` computes; >> is a logical shift.
    x = x ^ (x >> 16)
    x = x * 0x45D9F3B
    x = x ^ (x >> 16)
    x = x * 0x45D9F3B
    return x ^ (x >> 16)


@triton.jit
def _gumbel(seed, counter, idx, PRECISE_LOG: tl.constexpr):
    """Gumbel(0, 1) noise of one row at vocabulary indices `idx` (float32)."""
    row = _mix32(seed.to(tl.uint32) ^ _mix32(counter.to(tl.uint32)))
    bits = _mix32(row ^ (idx.to(tl.uint32) * 0x27D4EB2D)) >> 8
    u = (bits.to(tl.float32) + 0.5) * (1.0 / 16777216.0)
    if PRECISE_LOG:
        return -libdevice.log(-libdevice.log(u))
    else:
        return -tl.log(-tl.log(u))


@triton.jit
def _gumbel_kernel(
    seed_ptr, counter_ptr, out_ptr, V, BLOCK_V: tl.constexpr, PRECISE_LOG: tl.constexpr
):
    row = tl.program_id(0)
    idx = tl.arange(0, BLOCK_V)
    noise = _gumbel(tl.load(seed_ptr + row), tl.load(counter_ptr + row), idx, PRECISE_LOG)
    tl.store(out_ptr + row * V + idx, noise, mask=idx < V)


@triton.jit
def _sample_kernel(
    logits_ptr,
    stride_lb,
    stride_lv,
    temperature_ptr,
    stride_t,
    top_k_ptr,
    stride_k,
    top_p_ptr,
    stride_p,
    seed_ptr,
    stride_s,
    counter_ptr,
    stride_c,
    seen_ptr,
    stride_nb,
    stride_nv,
    penalty_ptr,
    stride_r,
    suppressed_ptr,
    eos_ptr,
    too_early_ptr,
    stride_e,
    out_ptr,
    V,
    BLOCK_V: tl.constexpr,
    PROCESS: tl.constexpr,
    PRECISE_LOG: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    idx = tl.arange(0, BLOCK_V)
    valid = idx < V
    x = tl.load(logits_ptr + row * stride_lb + idx * stride_lv, mask=valid, other=0.0)
    x = x.to(tl.float32)
    if PROCESS:  # model.sampling.first_code_logits, in its order
        seen = tl.load(seen_ptr + row * stride_nb + idx * stride_nv, mask=valid, other=0) != 0
        p = tl.load(penalty_ptr + row * stride_r).to(tl.float32)
        x = tl.where(seen, tl.where(x > 0, tl.div_rn(x, p), x * p), x)
        x = tl.where(tl.load(suppressed_ptr + idx, mask=valid, other=0) != 0, float("-inf"), x)
        early = tl.load(too_early_ptr + row * stride_e) != 0
        eos = tl.load(eos_ptr + idx, mask=valid, other=0) != 0
        x = tl.where(eos & early, float("-inf"), x)

    temperature = tl.load(temperature_ptr + row * stride_t).to(tl.float32)
    sampled = temperature > 0
    x = tl.div_rn(x, tl.where(sampled, temperature, 1.0))
    keep = valid
    noise = tl.zeros([BLOCK_V], dtype=tl.float32)
    if sampled:  # greedy rows keep everything: their maximum survives any cut
        # Order-preserving int32 key of a float32: flip the magnitude bits of
        # negatives so that larger floats have larger signed keys.
        bits = x.to(tl.int32, bitcast=True)
        key = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
        low = tl.min(tl.where(valid, key, 2147483647), 0).to(tl.int64)
        top = tl.max(tl.where(valid, key, -2147483648), 0).to(tl.int64)

        k = tl.load(top_k_ptr + row * stride_k).to(tl.int64)
        if (k > 0) & (k < V):
            # The k-th largest key: invariant count(key >= lo) >= k > count(key >= hi).
            lo = low
            hi = top + 1
            while hi - lo > 1:
                mid = lo + ((hi - lo) >> 1)
                enough = tl.sum((valid & (key >= mid.to(tl.int32))).to(tl.int32), 0) >= k
                lo = tl.where(enough, mid, lo)
                hi = tl.where(enough, hi, mid)
            # Of the tokens tied at the cut, the first in index order fill the k.
            above = valid & (key > lo.to(tl.int32))
            tied = valid & (key == lo.to(tl.int32))
            tie_rank = tl.cumsum(tied.to(tl.int32), 0) - 1
            keep = valid & (above | (tied & (tie_rank < k - tl.sum(above.to(tl.int32), 0))))

        top_p = tl.load(top_p_ptr + row * stride_p).to(tl.float32)
        if top_p < 1.0:
            e = tl.where(keep, tl.exp(x - tl.max(tl.where(keep, x, float("-inf")), 0)), 0.0)
            probs = e / tl.sum(e, 0)
            # The smallest key whose mass strictly above is < top_p: invariant
            # mass(key > hi) < top_p (nothing is above the top), lo below every key.
            lo = low - 1
            hi = top
            while hi - lo > 1:
                mid = lo + ((hi - lo) >> 1)
                small = tl.sum(tl.where(key > mid.to(tl.int32), probs, 0.0), 0) < top_p
                lo = tl.where(small, lo, mid)
                hi = tl.where(small, mid, hi)
            # Tokens tied at the cut, in index order, while the mass before each
            # stays < top_p; the first always (a row that keeps nothing samples
            # its first maximum, as the sort's all -inf argmax does).
            above = keep & (key > hi.to(tl.int32))
            tied = keep & (key == hi.to(tl.int32))
            tie_rank = tl.cumsum(tied.to(tl.int32), 0) - 1
            before = tl.sum(tl.where(above, probs, 0.0), 0) + tie_rank * tl.max(
                tl.where(tied, probs, 0.0), 0
            )
            keep = keep & (above | (tied & ((tie_rank == 0) | (before < top_p))))

        seed = tl.load(seed_ptr + row * stride_s)
        noise = _gumbel(seed, tl.load(counter_ptr + row * stride_c), idx, PRECISE_LOG)

    score = tl.where(keep, x + noise, float("-inf"))
    tl.store(out_ptr + row, tl.argmax(score, 0, tie_break_left=True).to(tl.int64))


def _num_warps(block_v: int) -> int:
    return 4 if block_v <= 2048 else 8


def sample(
    logits: torch.Tensor,  # [B, V] bf16/fp16/fp32, rows at any stride
    temperature: torch.Tensor,  # [B] float; <= 0 = greedy
    top_k: torch.Tensor,  # [B] int; <= 0 = no limit
    top_p: torch.Tensor,  # [B] float; >= 1 = no limit
    seed: torch.Tensor,  # [B] int64
    counter: torch.Tensor,  # [B] int64, distinct for every draw of a row
    *,
    seen: torch.Tensor | None = None,  # [B, V] bool
    penalty: torch.Tensor | None = None,  # [B] float
    suppressed: torch.Tensor | None = None,  # [V] bool
    eos_only: torch.Tensor | None = None,  # [V] bool
    too_early: torch.Tensor | None = None,  # [B] bool
    num_warps: int | None = None,
) -> torch.Tensor:
    """-> sampled ids [B] (int64): `model.sampling.sample(logits, ...)`, or with
    the processor arguments `sample(first_code_logits(logits, seen, penalty,
    suppressed, eos_only, too_early), ...)`. `num_warps` overrides the default
    launch width (for benchmarks)."""
    B, V = logits.shape
    processors = (seen, penalty, suppressed, eos_only, too_early)
    process = seen is not None
    if any((p is None) == process for p in processors):
        raise ValueError("pass all of seen, penalty, suppressed, eos_only, too_early or none")
    out = torch.empty(B, dtype=torch.int64, device=logits.device)
    if B == 0:
        return out
    if process:
        # bool -> uint8 views (no copy): Triton loads bytes, not i1.
        seen, suppressed, eos_only, too_early = (
            t.view(torch.uint8) for t in (seen, suppressed, eos_only, too_early)
        )
    else:  # unused pointers; any tensor on the device will do
        seen, penalty, suppressed, eos_only, too_early = (logits,) * 5
    block_v = triton.next_power_of_2(V)
    _sample_kernel[(B,)](
        logits,
        logits.stride(0),
        logits.stride(1),
        temperature,
        temperature.stride(0),
        top_k,
        top_k.stride(0),
        top_p,
        top_p.stride(0),
        seed,
        seed.stride(0),
        counter,
        counter.stride(0),
        seen,
        seen.stride(0),
        seen.stride(-1),
        penalty,
        penalty.stride(0),
        suppressed,
        eos_only,
        too_early,
        too_early.stride(0),
        out,
        V,
        BLOCK_V=block_v,
        PROCESS=process,
        PRECISE_LOG=_PRECISE_LOG,
        num_warps=num_warps or _num_warps(block_v),
    )
    return out


def gumbel_noise(seed: torch.Tensor, counter: torch.Tensor, vocab: int) -> torch.Tensor:
    """The kernel's noise: [B] seeds, [B] draw counters -> float32 [B, vocab];
    equal to `model.sampling.gumbel_noise` (tests and benchmarks check it)."""
    B = seed.shape[0]
    out = torch.empty(B, vocab, dtype=torch.float32, device=seed.device)
    block_v = triton.next_power_of_2(vocab)
    _gumbel_kernel[(B,)](
        seed.contiguous(),
        counter.contiguous(),
        out,
        vocab,
        BLOCK_V=block_v,
        PRECISE_LOG=_PRECISE_LOG,
        num_warps=_num_warps(block_v),
    )
    return out
