"""KV caches on the device.

`PagedKVCache`, the talker's: a pool of fixed-size blocks
[layers, blocks, kv_heads, block_size, head_dim] and a block table
[slots, ceil(max_len / block_size)] int32: position p of the stream in slot b
lives in block table[b, p // block_size] at offset p % block_size. A stream
holds only the blocks its length needs (engine/kv_blocks.py decides which),
so many short streams fit where a per-slot reservation for the longest one
held few. The decode step reads the device table (kernels/decode_attention.py,
kernels/rope_kv.py); the host keeps a copy and sends a row only when it
changes (`set_blocks`, then `flush` before the step).

`KVCache`, slot-major [layers, slots, kv_heads, length, head_dim]: the code
predictor's 16-position cache and the prefill's scratch rows, where every row
is short and always full.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..model.config import DecoderConfig
from ..transfers import array_to_device
from .kv_blocks import SCRATCH_BLOCK, blocks_for


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


def bytes_per_position(c: DecoderConfig, dtype: torch.dtype) -> int:
    """Bytes of keys and values one position takes over all layers."""
    element = torch.tensor([], dtype=dtype).element_size()
    return 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * element


class PagedKVCache:
    def __init__(
        self,
        c: DecoderConfig,
        slots: int,
        max_len: int,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device,
    ):
        shape = (c.num_hidden_layers, num_blocks, c.num_key_value_heads, block_size, c.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_size = block_size
        self.num_blocks = num_blocks
        width = blocks_for(max_len, block_size)
        self.host_table = torch.full((slots, width), SCRATCH_BLOCK, dtype=torch.int32)
        # The same memory as numpy rows: the engine thread rewrites a row whenever a
        # stream grows into a block, and a torch op per write costs ~10x numpy's.
        self._host_rows = self.host_table.numpy()
        self.block_table = self.host_table.to(device)
        self._dirty: tuple[int, int] | None = None  # host rows [lo, hi) not on the device yet

    @property
    def bytes_per_block(self) -> int:
        return 2 * self.k[:, 0].numel() * self.k.element_size()

    def table(self, rows: int, length: int) -> torch.Tensor:
        """The device block table of slots [0, rows) over positions [0, length)."""
        return self.block_table[:rows, : blocks_for(length, self.block_size)]

    def set_blocks(self, slot: int, blocks: list[int]) -> None:
        """Slot `slot`'s stream now holds `blocks` (positions in order); the rest of
        its row points at the scratch block. Sent to the device by `flush`."""
        row = self._host_rows[slot]
        row.fill(SCRATCH_BLOCK)
        row[: len(blocks)] = blocks
        lo, hi = self._dirty or (slot, slot + 1)
        self._dirty = (min(lo, slot), max(hi, slot + 1))

    def flush(self) -> None:
        """Copy the rows changed since the last flush to the device (one copy), if any."""
        if self._dirty is None:
            return
        lo, hi = self._dirty
        rows = self._host_rows[lo:hi]  # numpy: the copy's host side makes no torch call
        array_to_device(rows, self.block_table.device, out=self.block_table[lo:hi])
        self._dirty = None

    def store_prompts(
        self, prompts: list[tuple[int, int]], k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Write the keys and values of prompts packed back to back from position 0,
        k, v [layers, kv_heads, P, head_dim], each into positions [0, length) of its
        slot's blocks; `prompts` are (slot, length) in packing order, and their blocks
        must have been assigned (`set_blocks`). Positions past a prompt in its last
        block are left as they are.

        One index write per pool, however many prompts: every operation the engine
        thread launches hands the interpreter lock over and waits to take it back,
        and this runs while the codec and HTTP threads want it."""
        blocks, offsets = [], []
        for slot, T in prompts:
            n = blocks_for(T, self.block_size)
            row = self._host_rows[slot, :n]
            if n > self._host_rows.shape[1] or (row == SCRATCH_BLOCK).any():
                raise ValueError(f"slot {slot} holds no blocks for its {T}-position prompt")
            positions = np.arange(T)
            blocks.append(row[positions // self.block_size])
            offsets.append(positions % self.block_size)
        index = np.stack([np.concatenate(blocks), np.concatenate(offsets)]).astype(np.int64)
        block, offset = array_to_device(index, self.k.device)
        total = index.shape[1]
        for pool, packed in ((self.k, k), (self.v, v)):
            # Two index tensors split by a slice: the indexed view is [total, layers, heads, d].
            pool[:, block, :, offset] = packed[:, :, :total].permute(2, 0, 1, 3)
