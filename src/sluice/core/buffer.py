"""The event buffer's layout: a circular store of window records in a byte region.

Pure logic over a writable buffer (an ``mmap`` in the relay, a ``bytearray`` in tests). The
region starts with a 64-byte file header; the rest holds window records back to back in SCN
order, newest overwriting oldest, whole windows only. A wrap marker (or fewer than 8 bytes
left) sends the reader back to the start of the data region.

A window too big for the ring lives in a file of its own; the ring holds a reference record
for it (``append_reference``), so order, eviction and restore treat it like any window. The
owner deletes the file once ``take_evicted`` lists its SCN.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from sluice.core import wire
from sluice.core.scn_index import SparseIndex
from sluice.errors import BootstrapRequired, WindowTooLarge

FILE_MAGIC = b"SLBF"
FILE_VERSION = 1
FILE_HEADER_SIZE = 64
_FILE_HEADER = struct.Struct("<4sIQ")
_WRAP = struct.Struct("<4sI")
MIN_DATA_SIZE = 4096
_HEAD = 48  # a window header plus a reference record's body


class WritableBuffer(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, key: slice, /) -> bytes: ...
    def __setitem__(self, key: slice, value: bytes, /) -> None: ...
    def find(self, sub: bytes, start: int = ..., end: int = ..., /) -> int: ...


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a reader stopped: valid while no window was evicted since (``epoch``)."""

    scn: int
    offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Span:
    """One window record in the region: ``start..end``."""

    scn: int
    start: int
    end: int
    # a window held outside the ring: the length of its record there (the span is the
    # reference record)
    external: int = 0


class EventBuffer:
    """A circular buffer of window records; the caller owns ``mem`` and its lifetime."""

    def __init__(self, mem: WritableBuffer, *, index_block: int = 64 * 1024) -> None:
        if len(mem) < FILE_HEADER_SIZE + MIN_DATA_SIZE:
            raise WindowTooLarge(f"buffer too small: {len(mem)} bytes")
        self._mem = mem
        self._start = FILE_HEADER_SIZE
        self._end = FILE_HEADER_SIZE + ((len(mem) - FILE_HEADER_SIZE) // wire.ALIGN) * wire.ALIGN
        self._index = SparseIndex(index_block)
        self._reset_state(0)

    # -- state -----------------------------------------------------------------------------
    def _reset_state(self, start_scn: int) -> None:
        self.start_scn = start_scn  # every window with SCN > start_scn is held
        # restore(): (count, oldest SCN, newest SCN) of valid windows not in the live chain
        self.dropped: tuple[int, int, int] | None = None
        self.max_scn = start_scn
        self.window_count = 0
        self.event_count = 0
        self.bytes_held = 0
        # windows held outside the ring: their count and their records' bytes
        self.external_count = 0
        self.external_bytes = 0
        self._evicted_external: list[int] = []
        self.epoch = 0  # bumped on every eviction, invalidating cursors
        self._head = self._start
        self._tail = self._start
        self._last = self._start  # where the newest record starts
        self._index.clear()

    @property
    def capacity(self) -> int:
        return self._end - self._start

    def format(self, start_scn: int) -> None:
        """Empty the buffer; it then holds everything after ``start_scn``."""
        self._mem[0 : _FILE_HEADER.size] = _FILE_HEADER.pack(
            FILE_MAGIC, FILE_VERSION, self.capacity
        )
        self._mem[self._start : self._start + 8] = b"\0" * 8
        self._reset_state(start_scn)

    # -- writing ---------------------------------------------------------------------------
    def append(self, scn: int, ts_ms: int, events: Sequence[bytes]) -> bytes:
        """Append one window (events from ``wire.encode_event``); returns its record."""
        self._check_scn(scn)
        record = wire.encode_window(scn, self.max_scn, ts_ms, events)
        if len(record) > self.capacity:
            raise WindowTooLarge(
                f"window of {len(record)} bytes does not fit in a buffer of {self.capacity} "
                "bytes; hold it outside the ring (append_reference)",
                scn=scn,
            )
        self._put(scn, record, len(events))
        return record

    def append_reference(self, scn: int, ts_ms: int, n_events: int, length: int) -> bytes:
        """Append a window of ``n_events`` held outside the ring in a record of ``length``
        bytes, written with ``prev_scn`` = ``max_scn`` (the owner reads it before)."""
        self._check_scn(scn)
        record = wire.encode_reference(scn, self.max_scn, ts_ms, n_events, length)
        self._put(scn, record, n_events)
        self.external_count += 1
        self.external_bytes += length
        return record

    def _check_scn(self, scn: int) -> None:
        if scn <= self.max_scn:
            raise ValueError(f"SCN {scn} is not after the buffer's max SCN {self.max_scn}")

    def evict_oldest(self) -> bool:
        """Evict the oldest window (the owner's budget for windows outside the ring);
        False when there is none."""
        if not self.window_count:
            return False
        head = self._head
        self._evict_from(head, head + 1)
        self._mem[head : head + 4] = b"\0" * 4  # so a restore does not bring it back
        return True

    def take_evicted(self) -> list[int]:
        """SCNs of windows held outside the ring evicted since the last call: their files
        may go."""
        out, self._evicted_external = self._evicted_external, []
        return out

    def _put(self, scn: int, record: bytes, n_events: int) -> None:
        pos, wrapped = self._tail, False
        if pos + len(record) > self._end:
            self._evict_from(pos, self._end)
            if self._end - pos >= _WRAP.size:
                self._mem[pos : pos + _WRAP.size] = _WRAP.pack(wire.WRAP_MAGIC, _WRAP.size)
            pos, wrapped = self._start, True
        self._evict_from(pos, pos + len(record))
        self._mem[pos : pos + len(record)] = record
        if self.window_count == 0:
            self._head = pos
        self._tail = pos + len(record)
        self._last = pos
        self._index.note(scn, pos, wrapped)
        self.max_scn = scn
        self.window_count += 1
        self.event_count += n_events
        self.bytes_held += len(record)

    def _evict_from(self, lo: int, hi: int) -> None:
        while self.window_count and lo <= self._head < hi:
            header = wire.read_window_header(self._mem[self._head : self._head + _HEAD])
            if header.external_len:
                self.external_count -= 1
                self.external_bytes -= header.external_len
                self._evicted_external.append(header.scn)
            self.start_scn = header.scn
            self.window_count -= 1
            self.event_count -= header.n_events
            self.bytes_held -= header.total_len
            self.epoch += 1
            self._index.drop_through(header.scn)
            self._head = self._next(self._head + header.total_len)

    def span_times(self) -> tuple[int, int] | None:
        """Commit times (epoch ms) of the oldest and the newest window held, or None."""
        if not self.window_count:
            return None
        oldest = wire.read_window_header(self._mem[self._head : self._head + _HEAD])
        newest = wire.read_window_header(self._mem[self._last : self._last + _HEAD])
        return oldest.ts_ms, newest.ts_ms

    def _next(self, pos: int) -> int:
        """The position of the record following one that ends at ``pos``."""
        if pos + _WRAP.size > self._end or self._mem[pos : pos + 4] == wire.WRAP_MAGIC:
            return self._start
        return pos

    # -- reading ---------------------------------------------------------------------------
    def read(
        self, since_scn: int, max_bytes: int, cursor: Cursor | None = None
    ) -> tuple[list[bytes], Cursor | None]:
        """Whole windows with SCN > ``since_scn``, up to about ``max_bytes`` (at least one).

        Raises ``BootstrapRequired`` when windows after ``since_scn`` were evicted.
        """
        spans, cursor = self.spans(since_scn, max_bytes, cursor)
        return [self._mem[span.start : span.end] for span in spans], cursor

    def spans(
        self, since_scn: int, max_bytes: int, cursor: Cursor | None = None
    ) -> tuple[list[Span], Cursor | None]:
        """Where the windows ``read`` would return lie, without copying them (each is one
        contiguous record); valid until the next ``append``: copy them with ``copy`` and
        check ``holds`` after each copy."""
        if since_scn < self.start_scn:
            raise BootstrapRequired(
                f"SCN {since_scn} is older than the buffer holds (oldest servable SCN "
                f"{self.start_scn})",
                scn=since_scn,
                oldest_scn=self.start_scn,
            )
        if since_scn >= self.max_scn:
            return [], cursor
        pos = self._seek(since_scn, cursor)
        out: list[Span] = []
        size, scn, end = 0, since_scn, pos
        while scn < self.max_scn and (not out or size < max_bytes):
            header = wire.read_window_header(self._mem[pos : pos + _HEAD])
            end = pos + header.total_len
            scn = header.scn
            if scn > since_scn:
                out.append(Span(scn, pos, end, header.external_len))
                size += header.external_len or header.total_len
            pos = self._next(end) if scn < self.max_scn else end
        # The cursor keeps the raw end: whether the next record wraps is only known once written.
        return out, Cursor(scn, end, self.epoch)

    def copy(self, start: int, end: int) -> bytes:
        """Bytes ``start..end`` of the region (part of a span)."""
        return self._mem[start:end]

    def external(self) -> list[tuple[int, int]]:
        """``(scn, length)`` of every window held outside the ring, oldest first."""
        out: list[tuple[int, int]] = []
        since = self.start_scn
        while True:
            spans, _cursor = self.spans(since, 1 << 30)
            if not spans:
                return out
            out += [(s.scn, s.external) for s in spans if s.external]
            since = spans[-1].scn

    def holds(self, scn: int) -> bool:
        """Whether the window at ``scn`` is still held (not evicted by later appends)."""
        return scn > self.start_scn

    def _seek(self, since_scn: int, cursor: Cursor | None) -> int:
        if cursor is not None and cursor.epoch == self.epoch and cursor.scn == since_scn:
            return self._next(cursor.offset)
        found = self._index.floor(since_scn)
        return self._head if found is None else found

    # -- restoring -------------------------------------------------------------------------
    def restore(self) -> bool:
        """Rebuild state from ``mem`` after a restart; False if it holds no valid buffer."""
        magic, version, size = _FILE_HEADER.unpack_from(self._mem[0 : _FILE_HEADER.size])
        if magic != FILE_MAGIC or version != FILE_VERSION or size != self.capacity:
            return False
        records = self._scan()
        self._reset_state(0)
        if not records:
            return True
        chain = _newest_chain(records)
        lost = sorted(set(records) - set(chain))
        # Valid windows cut off from the newest chain (a damaged block between them): the
        # owner says so, with their SCN range.
        self.dropped = (len(lost), lost[0], lost[-1]) if lost else None
        self.start_scn = records[chain[0]][2]
        for scn in chain:
            offset, length, _prev, n_events, external = records[scn]
            self._index.note(scn, offset, self.window_count > 0 and offset < self._tail)
            if external:
                self.external_count += 1
                self.external_bytes += external
            if self.window_count == 0:
                self._head = offset
            self._tail = offset + length
            self._last = offset
            self.window_count += 1
            self.event_count += n_events
            self.bytes_held += length
            self.max_scn = scn
        return True

    def _scan(self) -> dict[int, tuple[int, int, int, int, int]]:
        """Every valid window record in the region:
        scn -> (offset, len, prev_scn, n_events, external length)."""
        records: dict[int, tuple[int, int, int, int, int]] = {}
        pos = self._start
        while True:
            pos = self._mem.find(wire.WINDOW_MAGIC[:3], pos, self._end)  # SLW1 or SLWX
            if pos < 0:
                return records
            if pos % wire.ALIGN == 0 and wire.window_is_valid(
                cast(bytes, self._mem), pos, self._end
            ):
                header = wire.read_window_header(self._mem[pos : pos + _HEAD])
                records[header.scn] = (
                    pos,
                    header.total_len,
                    header.prev_scn,
                    header.n_events,
                    header.external_len,
                )
                pos += header.total_len
            else:
                pos += 1


def _newest_chain(records: dict[int, tuple[int, int, int, int, int]]) -> list[int]:
    """SCNs of the live windows: follow ``prev_scn`` back from the newest record."""
    scn = max(records)
    chain = [scn]
    while (prev := records[scn][2]) in records and prev < scn:
        chain.append(prev)
        scn = prev
    chain.reverse()
    return chain
