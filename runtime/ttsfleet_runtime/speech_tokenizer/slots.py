"""The slot free-list both rates' streaming decoders keep their streams by. No torch, and
nothing of either rate: both import it (speech_tokenizer's independence contract)."""

from __future__ import annotations


class SlotPool:
    """The slots of a decoder that holds at most `size` streams at once: `take` hands
    out the lowest free one (0 first, so a light load keeps to the first rows of the
    state), `give_back` returns it. Both rates' streaming decoders keep their per-stream
    state by these slots."""

    def __init__(self, size: int, what: str):
        self.size = size
        self._what = what  # named in the error: "codec", "25 Hz decoder"
        self._free = list(range(size - 1, -1, -1))  # pop() hands out 0 first
        self._taken: set[int] = set()

    def take(self) -> int:
        if not self._free:
            raise RuntimeError(f"all {self.size} {self._what} slots are in use")
        slot = self._free.pop()
        self._taken.add(slot)
        return slot

    def give_back(self, slot: int) -> None:
        """Return a taken slot; one not taken (a second close) raises KeyError."""
        self._taken.remove(slot)
        self._free.append(slot)

    def holds(self, slots: list[int]) -> bool:
        """Whether every one of `slots` is taken (a decode names only open streams)."""
        return self._taken.issuperset(slots)

    @property
    def taken(self) -> int:
        return len(self._taken)
