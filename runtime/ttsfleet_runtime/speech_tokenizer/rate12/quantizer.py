"""Code lookup of the split residual vector quantizer: codes [B, n, Q] -> [B, dim, n].

Group 0 is the semantic codebook (`rvq_first`), groups 1..Q-1 the acoustic residual
codebooks (`rvq_rest`); each half sums its codebook vectors and projects them with its
own 1x1 conv. Codebooks are stored as EMA statistics (`embedding_sum / cluster_usage`),
as the official checkpoint holds them. The `input_proj` weights serve only the encoder
direction and are kept so the checkpoint loads unchanged.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

_EPSILON = 1e-5


def codebook_vectors(summed: torch.Tensor, usage: torch.Tensor) -> torch.Tensor:
    """The codebook entries [size, dim] of EMA statistics: sums over usage counts (floored
    at 1e-5, as the reference)."""
    return summed / usage.clamp(min=_EPSILON)[:, None]


class Codebook(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def vectors(self) -> torch.Tensor:
        return codebook_vectors(self.embedding_sum, self.cluster_usage)


class CodebookLayer(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self._codebook = Codebook(size, dim)


class _CodebookLayers(nn.Module):
    def __init__(self, n: int, size: int, dim: int):
        super().__init__()
        self.layers = nn.ModuleList(CodebookLayer(size, dim) for _ in range(n))


class ResidualQuantizer(nn.Module):
    """Sum of n_q codebook lookups, projected to the outer width.

    The codebooks are stacked into one table whenever they are loaded, so a lookup of
    all groups is one gather (a streaming step is launch-bound).
    """

    def __init__(self, n_q: int, size: int, dim: int, outer_dim: int):
        super().__init__()
        self.input_proj = nn.Conv1d(outer_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, outer_dim, 1, bias=False)
        self.vq = _CodebookLayers(n_q, size, dim)
        self.codebook_size = size
        self.register_buffer("offsets", torch.empty(n_q, dtype=torch.long), persistent=False)
        self.register_buffer("table", torch.empty(n_q * size, dim), persistent=False)
        self.derive_table()
        self.register_load_state_dict_post_hook(lambda module, _: module.derive_table())

    @torch.no_grad()
    def derive_table(self) -> None:
        self.table = torch.cat([layer._codebook.vectors() for layer in self.vq.layers]).detach()
        n_q = len(self.vq.layers)
        self.offsets = torch.arange(n_q, device=self.table.device) * self.codebook_size

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, n, n_q] -> [B, n, outer_dim] (channels last)"""
        summed = F.embedding(codes + self.offsets, self.table).sum(dim=2)
        # The 1x1 convolution as the matrix product it is: a cuDNN convolution plans
        # (and, in benchmark mode, times) every new batch shape, which every CUDA graph
        # capture of the codec paid.
        return F.linear(summed, self.output_proj.weight[:, :, 0])


class SplitResidualQuantizer(nn.Module):
    def __init__(self, n_q: int, n_q_semantic: int, size: int, dim: int):
        super().__init__()
        self.n_q_semantic = n_q_semantic
        # The codebooks live at half the outer width (the official `codebook_dim // 2`).
        self.rvq_first = ResidualQuantizer(n_q_semantic, size, dim // 2, dim)
        self.rvq_rest = ResidualQuantizer(n_q - n_q_semantic, size, dim // 2, dim)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, n, Q] (int64) -> [B, n, dim]"""
        k = self.n_q_semantic
        return self.rvq_first.decode(codes[..., :k]) + self.rvq_rest.decode(codes[..., k:])
