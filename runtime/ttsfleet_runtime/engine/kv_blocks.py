"""Which KV blocks each stream holds: the host side of the paged KV cache.

The talker's keys and values live in a pool of fixed-size blocks
(engine/kv_cache.py); a stream holds just enough blocks for the positions it
has written, so memory follows each stream's actual length instead of being
reserved for the longest one. This module is the bookkeeping, in plain Python
(the scheduler, which imports no torch, owns it): a free list, and a stream's
blocks as a list of block ids (its row of the block table, which the engine
mirrors to the device whenever it changes).

Block 0 is never handed out: every table entry that names no block of the
row's own points at it, so a stalled or padding row that writes past its
live length lands there and never in another stream's block.
"""

from __future__ import annotations

# Positions per block: the decode-attention kernel's key tile (bf16), so a tile
# never straddles two blocks. Tests pass smaller blocks (powers of two >= 16).
BLOCK_POSITIONS = 64
SCRATCH_BLOCK = 0  # where unassigned table entries point
# The start-up check: the pool must hold `max_batch` streams of this many
# seconds of audio (one position a frame: 12.5 a second at 12 Hz, 25 at 25 Hz)
# after a prompt of up to PROMPT_POSITIONS (a voice without instructions takes ~30-60).
MIN_STREAM_SECONDS = 10
PROMPT_POSITIONS = 64
# Share of the pool a newcomer must leave free for running streams to grow
# into (vLLM's watermark), at least one block.
WATERMARK = 0.01


def blocks_for(positions: int, block_size: int) -> int:
    """Blocks that hold positions [0, positions)."""
    return -(-positions // block_size)


def stream_blocks(seconds: float, frame_rate_hz: float, block_size: int) -> int:
    """Blocks one stream of `seconds` of audio (after its prompt) holds at its end,
    at `frame_rate_hz` frames (positions) a second."""
    return blocks_for(PROMPT_POSITIONS + round(seconds * frame_rate_hz), block_size)


class KVBlocks:
    """The free list of a pool of `num_blocks` blocks (block 0 reserved) of
    `block_size` positions each."""

    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks < 2:
            raise ValueError(f"a KV pool needs at least 2 blocks, got {num_blocks}")
        self.block_size = block_size
        self.total = num_blocks - 1  # usable blocks
        # Popped from the end: the lowest ids go first.
        self._free = list(range(num_blocks - 1, SCRATCH_BLOCK, -1))
        self.watermark = max(1, int(WATERMARK * self.total))

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        return self.total - len(self._free)

    def blocks_for(self, positions: int) -> int:
        return blocks_for(positions, self.block_size)

    def can_admit(self, positions: int) -> bool:
        """Whether a new stream's first `positions` fit and leave the watermark free."""
        return self.free >= self.blocks_for(positions) + self.watermark

    def fit(self, held: list[int], positions: int) -> bool:
        """Make `held` (a stream's blocks, in position order) hold exactly the
        blocks positions [0, positions) need: take blocks from the free list or
        give the excess back. False, with nothing taken, when too few are free."""
        need = self.blocks_for(positions)
        if need > len(held):
            missing = need - len(held)
            if missing > len(self._free):
                return False
            held.extend(self._free.pop() for _ in range(missing))
        elif need < len(held):
            self._free.extend(reversed(held[need:]))
            del held[need:]
        return True

    def grow(self, held: list[int], positions: int) -> bool:
        """Like `fit`, but never gives blocks back (a running stream's)."""
        return len(held) >= self.blocks_for(positions) or self.fit(held, positions)

    def release(self, held: list[int]) -> None:
        """Give back every block in `held` (a finished stream's) and empty it."""
        self._free.extend(reversed(held))
        held.clear()
