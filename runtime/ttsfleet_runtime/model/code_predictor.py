"""The code predictor (the reference's "sub-talker"): a small decoder that,
given the talker's hidden state and the frame's first code, generates code
groups 1..15 of the frame one after another, restarting from position 0 for
every frame."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import DecoderConfig
from .layers import DecoderStack
from .ops import EAGER, TalkerOps


class CodePredictor(nn.Module):
    def __init__(self, c: DecoderConfig, talker_hidden: int, ops: TalkerOps = EAGER):
        super().__init__()
        self.config = c
        self.ops = ops
        groups = c.num_code_groups - 1
        p = dict(requires_grad=False)
        # Embeddings of groups 1..15 in the talker's width (their sum feeds the talker).
        self.codec_embedding = nn.Parameter(torch.empty(groups, c.vocab_size, talker_hidden), **p)
        self.lm_head = nn.Parameter(torch.empty(groups, c.vocab_size, c.hidden_size), **p)
        self.has_projection = c.hidden_size != talker_hidden
        self.projection = nn.Parameter(torch.empty(c.hidden_size, talker_hidden), **p)
        self.projection_bias = nn.Parameter(torch.zeros(c.hidden_size), **p)
        # Max positions: talker hidden + 15 codes.
        self.stack = DecoderStack(c, c.num_code_groups + 1, ops)
        # Filled by `prepare`: embeddings already projected to the predictor's
        # width, so each of the 15 steps skips one matmul.
        self.register_buffer("codec_embedding_projected", torch.empty(0), persistent=False)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        if not self.has_projection:
            return x
        return self.ops.linear(x, self.projection, bias=self.projection_bias)

    @torch.no_grad()
    def prepare(self) -> None:
        self.codec_embedding_projected = self.project(self.codec_embedding)

    def embed_projected(self, group: int, ids: torch.Tensor) -> torch.Tensor:
        """Codes of group `group` (1..15) -> predictor-width inputs."""
        return F.embedding(ids, self.codec_embedding_projected[group - 1])

    def embed_sum(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes of groups 1..15 [B, 15] -> the sum of their talker-width
        embeddings [B, hidden], in one lookup over the stacked tables."""
        groups, vocab, _ = self.codec_embedding.shape
        offsets = torch.arange(groups, device=codes.device) * vocab
        flat = self.codec_embedding.view(groups * vocab, -1)
        return F.embedding(codes + offsets, flat).sum(dim=1)

    def embed(self, group: int, ids: torch.Tensor) -> torch.Tensor:
        """Codes of group `group` (1..15) -> talker-width embeddings."""
        return F.embedding(ids, self.codec_embedding[group - 1])

    def prefill(self, x, k_cache, v_cache) -> torch.Tensor:
        return self.stack.prefill(x, k_cache, v_cache)

    def decode(self, x, positions, k_cache, v_cache) -> torch.Tensor:
        return self.stack.decode(x, positions, k_cache, v_cache)

    def logits(self, group: int, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of code group `group` (1..15) from the predictor's hidden state."""
        return self.ops.linear(hidden, self.lm_head[group - 1])
