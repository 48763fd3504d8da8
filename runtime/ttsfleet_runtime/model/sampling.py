"""The one sampling routine: per-row temperature, top-k, top-p and seeded noise,
all as tensors, so a whole decode step (talker + 15 predictor steps) samples
inside one CUDA graph with no host round trip.

Randomness is counter-based: the Gumbel noise of row b is a hash of (its seed,
its own draw counter, the vocabulary index). A request therefore samples the
same codes whatever batch it runs in, at whatever slot, next to whichever
other requests; that is what makes seeds reproducible under continuous
batching. Temperature 0 is greedy (argmax, first index on ties).
"""

from __future__ import annotations

import torch

_M32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    # A 32-bit integer finaliser in int64 arithmetic; multipliers < 2^31 keep
    # every product below 2^63 (no signed overflow on any device).
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _M32
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _M32
    return x ^ (x >> 16)


def gumbel_noise(seed: torch.Tensor, counter: torch.Tensor, vocab: int) -> torch.Tensor:
    """[B] seeds, [B] draw counters -> float32 Gumbel(0, 1) noise [B, vocab]."""
    row = _mix32((seed & _M32) ^ _mix32(counter & _M32))
    cols = (torch.arange(vocab, device=seed.device, dtype=torch.int64) * 0x27D4EB2D) & _M32
    bits = _mix32(row[:, None] ^ cols[None, :]) >> 8  # 24 bits: exact in float32
    u = (bits.float() + 0.5) * (1.0 / (1 << 24))
    return -torch.log(-torch.log(u))


def sample(
    logits: torch.Tensor,  # [B, V]
    temperature: torch.Tensor,  # [B] float; 0 = greedy
    top_k: torch.Tensor,  # [B] int64; 0 = no limit
    top_p: torch.Tensor,  # [B] float in (0, 1]
    seed: torch.Tensor,  # [B] int64
    counter: torch.Tensor,  # [B] int64, distinct for every draw of a row
    *,
    seen: torch.Tensor | None = None,
    penalty: torch.Tensor | None = None,
    suppressed: torch.Tensor | None = None,
    eos_only: torch.Tensor | None = None,
    too_early: torch.Tensor | None = None,
) -> torch.Tensor:
    """-> sampled ids [B] (int64). Given the processor arguments (the talker's
    first code), `first_code_logits` applies them first."""
    if seen is not None:
        logits = first_code_logits(logits, seen, penalty, suppressed, eos_only, too_early)
    B, V = logits.shape
    x = logits.float()
    greedy = temperature <= 0
    t = torch.where(greedy, torch.ones_like(temperature), temperature).float()
    ordered, order = torch.sort(x / t[:, None], dim=-1, descending=True, stable=True)
    rank = torch.arange(V, device=x.device)
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, V))
    keep = rank[None, :] < k[:, None]
    probs = torch.softmax(ordered.masked_fill(~keep, float("-inf")), dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs
    keep = keep & ((before < top_p[:, None]) | (top_p[:, None] >= 1.0))
    noise = gumbel_noise(seed, counter, V).gather(1, order)
    noise = noise * (~greedy).float()[:, None]
    score = (ordered + noise).masked_fill(~keep, float("-inf"))
    return order.gather(1, score.argmax(dim=-1, keepdim=True)).squeeze(1)


def first_code_logits(
    logits: torch.Tensor,  # [B, V] talker logits
    seen: torch.Tensor,  # [B, V] bool: first codes generated so far
    penalty: torch.Tensor,  # [B] repetition penalty
    suppressed: torch.Tensor,  # [V] bool: ids never sampled
    eos_only: torch.Tensor,  # [V] bool: the EOS id
    too_early: torch.Tensor,  # [B] bool: EOS not allowed yet
) -> torch.Tensor:
    """The reference's logits processors, in its order: repetition penalty
    (seen ids' positive logits divided, negative multiplied), suppressed ids,
    minimum length."""
    x = logits.float()
    p = penalty[:, None].float()
    x = torch.where(seen, torch.where(x > 0, x / p, x * p), x)
    x = x.masked_fill(suppressed[None], float("-inf"))
    return x.masked_fill(too_early[:, None] & eos_only[None], float("-inf"))
