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

import torch

from ..kernels.host_copy import ids_on, to_device
from ..model.config import DecoderConfig
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
        self.block_table[lo:hi].copy_(to_device(self.host_table[lo:hi], self.block_table.device))
        self._dirty = None

    def store_prompt(self, slot: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write a prompt's keys and values k, v [layers, kv_heads, T, head_dim]
        (positions [0, T) of the stream in `slot`) into the slot's blocks, which
        must have been assigned (`set_blocks`) before. Positions past T in the
        last block are left as they are."""
        T = k.shape[2]
        n = blocks_for(T, self.block_size)
        blocks = self.host_table[slot, :n].tolist()
        if n > self.host_table.shape[1] or SCRATCH_BLOCK in blocks:
            raise ValueError(f"slot {slot} holds no blocks for its {T}-position prompt")
        full, tail = divmod(T, self.block_size)
        for pool, src in ((self.k, k), (self.v, v)):
            if full:
                layers, heads, _, d = src.shape
                whole = src[:, :, : full * self.block_size]
                whole = whole.reshape(layers, heads, full, self.block_size, d).transpose(1, 2)
                index = ids_on(blocks[:full], pool.device)
                pool.index_copy_(1, index, whole.to(pool.dtype))
            if tail:
                pool[:, blocks[full], :, :tail] = src[:, :, full * self.block_size :]
