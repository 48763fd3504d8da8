"""Slot-based KV caches: one row per batch slot, so the running batch is always
the slot prefix [0, B) and a decode step attends to a plain view of it
(no gather, no copy), masked per row to its live length."""

from __future__ import annotations

import dataclasses

import torch

from ..model.config import DecoderConfig


@dataclasses.dataclass
class KVCache:
    k: torch.Tensor  # [layers, slots, kv_heads, length, head_dim]
    v: torch.Tensor

    @classmethod
    def allocate(
        cls, c: DecoderConfig, slots: int, length: int, dtype: torch.dtype, device
    ) -> KVCache:
        shape = (c.num_hidden_layers, slots, c.num_key_value_heads, length, c.head_dim)
        return cls(
            torch.zeros(shape, dtype=dtype, device=device),
            torch.zeros(shape, dtype=dtype, device=device),
        )

    @property
    def length(self) -> int:
        return self.k.shape[3]

    def rows(
        self, start: int, stop: int, length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of slots [start, stop) over the first `length` positions."""
        n = self.length if length is None else length
        return self.k[:, start:stop, :, :n], self.v[:, start:stop, :, :n]

    def store_prompt(self, slot: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Keys and values [layers, kv_heads, T, head_dim] of a prompt prefilled
        elsewhere become positions [0, T) of `slot`."""
        T = k.shape[2]
        self.k[:, slot, :, :T] = k
        self.v[:, slot, :, :T] = v

    def bytes_per_slot(self) -> int:
        return 2 * self.k[:, 0].numel() * self.k.element_size()
