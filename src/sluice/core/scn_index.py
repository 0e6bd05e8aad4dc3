"""A sparse SCN index: one ``(scn, offset)`` entry per block of the event buffer."""

from __future__ import annotations

from bisect import bisect_right


class SparseIndex:
    """Entries in SCN order; old entries are dropped from the front as windows are evicted."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._scns: list[int] = []
        self._offsets: list[int] = []
        self._first = 0  # entries before this are dropped; compacted lazily
        self._last_block = -1

    def __len__(self) -> int:
        return len(self._scns) - self._first

    def note(self, scn: int, offset: int, wrapped: bool) -> None:
        """Record a window appended at ``offset``; keeps it if it opens a new block."""
        block = offset // self.block_size
        if wrapped or block != self._last_block:
            self._scns.append(scn)
            self._offsets.append(offset)
            self._last_block = block

    def drop_through(self, scn: int) -> None:
        """Forget entries for windows with SCN <= ``scn`` (they were evicted)."""
        self._first = bisect_right(self._scns, scn, lo=self._first)
        if self._first > 1024 and self._first * 2 > len(self._scns):
            del self._scns[: self._first]
            del self._offsets[: self._first]
            self._first = 0

    def clear(self) -> None:
        self._scns.clear()
        self._offsets.clear()
        self._first = 0
        self._last_block = -1

    def floor(self, scn: int) -> int | None:
        """Offset of the last indexed window with SCN <= ``scn``, if any."""
        i = bisect_right(self._scns, scn, lo=self._first) - 1
        if i < self._first:
            return None
        return self._offsets[i]
