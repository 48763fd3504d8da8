"""The talker: a Qwen3 decoder over summed text + codec embeddings that
predicts the first code group of each frame (12.5 a second at 12 Hz, 25 at 25 Hz)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import TalkerConfig
from .layers import DecoderStack
from .ops import EAGER, TalkerOps


class Talker(nn.Module):
    def __init__(self, c: TalkerConfig, max_positions: int, ops: TalkerOps = EAGER):
        super().__init__()
        self.config = c
        self.ops = ops
        p = dict(requires_grad=False)
        self.codec_embedding = nn.Parameter(torch.empty(c.vocab_size, c.hidden_size), **p)
        self.text_embedding = nn.Parameter(torch.empty(c.text_vocab_size, c.text_hidden_size), **p)
        self.text_fc1 = nn.Parameter(torch.empty(c.text_hidden_size, c.text_hidden_size), **p)
        self.text_fc1_bias = nn.Parameter(torch.zeros(c.text_hidden_size), **p)
        self.text_fc2 = nn.Parameter(torch.empty(c.hidden_size, c.text_hidden_size), **p)
        self.text_fc2_bias = nn.Parameter(torch.zeros(c.hidden_size), **p)
        self.codec_head = nn.Parameter(torch.empty(c.vocab_size, c.hidden_size), **p)
        self.stack = DecoderStack(c, max_positions, ops)

    def text_hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """Text token ids [..., T] -> talker-width embeddings [..., T, hidden]."""
        return self.project_text(F.embedding(ids, self.text_embedding))

    def project_text(self, x: torch.Tensor) -> torch.Tensor:
        """Text embeddings [..., text hidden] (rows of `text_embedding`) -> [..., hidden]."""
        h = F.silu(self.ops.linear(x, self.text_fc1, bias=self.text_fc1_bias))
        return self.ops.linear(h, self.text_fc2, bias=self.text_fc2_bias)

    def codec_hidden(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.codec_embedding)

    def prefill(self, x, k_cache, v_cache, positions=None, segments=None) -> torch.Tensor:
        """x [B, T, hidden] at positions 0..T-1 (or packed prompts: see
        `DecoderStack.prefill`) -> last-layer hidden states (after the final
        norm) [B, T, hidden]."""
        return self.stack.prefill(x, k_cache, v_cache, positions, segments)

    def decode(self, x, positions, k_cache, v_cache, block_table=None) -> torch.Tensor:
        """x [B, hidden], one position per row -> hidden states [B, hidden]; the
        caches are paged pools read through `block_table` (engine/kv_cache.py)."""
        return self.stack.decode(x, positions, k_cache, v_cache, block_table)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.ops.linear(hidden, self.codec_head)
