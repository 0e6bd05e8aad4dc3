"""Binary framing of windows, shared by the event buffer and the ``/stream`` wire format.

A window record (all little-endian, padded to 8 bytes)::

    magic 'SLW1' | total_len u32 | scn u64 | prev_scn u64 | ts_ms u64 | n_events u32 | crc32 u32
    then n_events event records:
    ev_len u32 | key_hash u32 | op u8 | src_len u8 | schema_version u16 | source | payload

``prev_scn`` chains every window to the one before it, so a restored buffer can tell the
live windows from stale ones. In the event buffer only, a window too big for it is held in a
file of its own (``relay/windows.py``) and stands in the ring as a reference record: the same
header with magic 'SLWX', ``n_events`` of the whole window, and an 8-byte body, the length of
the window record in its file. A reference never leaves the relay.

A heartbeat frame (``'SLH1' | 24 | scn u64 | reserved u64``) says "every window up to
``scn`` was considered", so a filtered client can advance.
"""

from __future__ import annotations

import importlib
import os
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.core.event import OPS, TRUNCATE, Op
from sluice.errors import DecodeError

WINDOW_MAGIC = b"SLW1"
HEARTBEAT_MAGIC = b"SLH1"
WRAP_MAGIC = b"SLWR"
EXTERNAL_MAGIC = b"SLWX"  # a window held outside the ring (buffer only, never on the wire)
ALIGN = 8
_RECORD_MAGICS = (WINDOW_MAGIC, EXTERNAL_MAGIC)

_WINDOW_HEADER = struct.Struct("<4sIQQQII")
EVENT_HEADER = struct.Struct("<IIBBH")
# The same layout as numpy dtype fields (``np.dtype(EVENT_HEADER_FIELDS)``), for the readers
# and writers of many events at once: size, key hash, op, source name length, schema version.
EVENT_HEADER_FIELDS = [
    ("size", "<u4"),
    ("hash", "<u4"),
    ("op", "u1"),
    ("src", "u1"),
    ("ver", "<u2"),
]
_HEARTBEAT = struct.Struct("<4sIQQ")
_EXTERNAL_LEN = struct.Struct("<Q")
_LEN_AT = struct.Struct("<4sI")
WINDOW_HEADER_SIZE = _WINDOW_HEADER.size
EVENT_HEADER_SIZE = EVENT_HEADER.size
# The key hash of a change of a table without a primary key: crc32 of the empty key text (0),
# as the seeds hash such rows. So every change of a keyless table is in partition 0 of any
# ``partition=i/n``: an insert and the later delete of the same row stay in one partition, in
# order (hashing the payload, as capture once did, sent them to different ones).
KEYLESS_HASH = 0
HEARTBEAT_SIZE = _HEARTBEAT.size
_CRC_AT = WINDOW_HEADER_SIZE - 4


@dataclass(frozen=True, slots=True)
class RawEvent:
    """An event with its row images serialized (Avro): made by capture, held by the buffer."""

    source: str
    op: Op
    schema_version: int
    key_hash: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class WindowHeader:
    scn: int
    prev_scn: int
    ts_ms: int
    n_events: int
    total_len: int
    # a reference record (buffer only): the length of the window record held outside the ring
    external_len: int = 0


@dataclass(frozen=True, slots=True)
class Heartbeat:
    scn: int


def _pad(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def encode_event(event: RawEvent) -> bytes:
    source = event.source.encode()
    if len(source) > 255:
        raise DecodeError(f"source name too long: {event.source!r}")
    size = EVENT_HEADER_SIZE + len(source) + len(event.payload)
    header = EVENT_HEADER.pack(
        size, event.key_hash, ord(event.op), len(source), event.schema_version
    )
    return header + source + event.payload


def encode_window(
    scn: int, prev_scn: int, ts_ms: int, events: Sequence[bytes], n_events: int | None = None
) -> bytes:
    """Frame already encoded events (``encode_event``) as one window record (``n_events``:
    when ``events`` are runs of several events each)."""
    body = b"".join(events)
    total = _pad(WINDOW_HEADER_SIZE + len(body))
    n = len(events) if n_events is None else n_events
    head = _WINDOW_HEADER.pack(WINDOW_MAGIC, total, scn, prev_scn, ts_ms, n, 0)
    padding = b"\0" * (total - WINDOW_HEADER_SIZE - len(body))
    crc = zlib.crc32(body + padding, zlib.crc32(head[:_CRC_AT]))
    return head[:_CRC_AT] + crc.to_bytes(4, "little") + body + padding


def encode_reference(scn: int, prev_scn: int, ts_ms: int, n_events: int, length: int) -> bytes:
    """The ring's stand-in for a window of ``length`` bytes held in a file of its own."""
    body = _EXTERNAL_LEN.pack(length)
    total = WINDOW_HEADER_SIZE + len(body)
    head = _WINDOW_HEADER.pack(EXTERNAL_MAGIC, total, scn, prev_scn, ts_ms, n_events, 0)
    crc = zlib.crc32(body, zlib.crc32(head[:_CRC_AT]))
    return head[:_CRC_AT] + crc.to_bytes(4, "little") + body


def window_head(scn: int, prev_scn: int, ts_ms: int, n_events: int, body_len: int) -> bytes:
    """The header of a window record whose events take ``body_len`` bytes, before its CRC
    (36 bytes; ``crc_of`` finishes it): for records written piece by piece."""
    total = _pad(WINDOW_HEADER_SIZE + body_len)
    return _WINDOW_HEADER.pack(WINDOW_MAGIC, total, scn, prev_scn, ts_ms, n_events, 0)[:_CRC_AT]


def crc_start(head: bytes) -> int:
    """The running CRC of a record after its header (``window_head``); continue it with
    ``zlib.crc32(piece, crc)`` over the body and padding."""
    return zlib.crc32(head[:_CRC_AT])


def padding(body_len: int) -> bytes:
    """The zero bytes after a body of ``body_len`` bytes that end the record on ``ALIGN``."""
    return b"\0" * (_pad(WINDOW_HEADER_SIZE + body_len) - WINDOW_HEADER_SIZE - body_len)


def encode_heartbeat(scn: int) -> bytes:
    return _HEARTBEAT.pack(HEARTBEAT_MAGIC, HEARTBEAT_SIZE, scn, 0)


def read_window_header(data: bytes | memoryview, offset: int = 0) -> WindowHeader:
    """A window record's header; for a reference record (``EXTERNAL_MAGIC``) ``data`` must hold
    its 8-byte body too (48 bytes)."""
    magic, total, scn, prev, ts_ms, n_events, _crc = _WINDOW_HEADER.unpack_from(data, offset)
    if magic == WINDOW_MAGIC:
        return WindowHeader(scn, prev, ts_ms, n_events, total)
    if magic == EXTERNAL_MAGIC:
        (length,) = _EXTERNAL_LEN.unpack_from(data, offset + WINDOW_HEADER_SIZE)
        return WindowHeader(scn, prev, ts_ms, n_events, total, length)
    raise DecodeError(f"not a window record at offset {offset}")


def window_is_valid(data: bytes | bytearray | memoryview, offset: int, limit: int) -> bool:
    """True when a complete, uncorrupted window record starts at ``offset``."""
    if offset + WINDOW_HEADER_SIZE > limit:
        return False
    magic, total, *_rest, crc = _WINDOW_HEADER.unpack_from(data, offset)
    if (
        magic not in _RECORD_MAGICS
        or total < WINDOW_HEADER_SIZE
        or total % ALIGN
        or offset + total > limit
    ):
        return False
    view = memoryview(data)
    expect = zlib.crc32(
        view[offset + WINDOW_HEADER_SIZE : offset + total],
        zlib.crc32(view[offset : offset + _CRC_AT]),
    )
    return bool(expect == crc)


def iter_event_spans(window: bytes | memoryview) -> Iterator[tuple[int, int, int, bytes, int]]:
    """``(start, end, key_hash, source, op)`` of each event record, reading headers only."""
    header = read_window_header(window)
    pos = WINDOW_HEADER_SIZE
    for _ in range(header.n_events):
        size, key_hash, op, src_len, _version = EVENT_HEADER.unpack_from(window, pos)
        start = pos + EVENT_HEADER_SIZE
        yield pos, pos + size, key_hash, bytes(window[start : start + src_len]), op
        pos += size


def event_source(event: bytes) -> bytes:
    """The source name of one encoded event (``encode_event``)."""
    src_len = event[9]
    return event[EVENT_HEADER_SIZE : EVENT_HEADER_SIZE + src_len]


def decode_events(window: bytes | memoryview) -> list[RawEvent]:
    header = read_window_header(window)
    out: list[RawEvent] = []
    pos = WINDOW_HEADER_SIZE
    for _ in range(header.n_events):
        size, key_hash, op, src_len, version = EVENT_HEADER.unpack_from(window, pos)
        start = pos + EVENT_HEADER_SIZE
        op_char = chr(op)
        if op_char not in OPS or size < EVENT_HEADER_SIZE + src_len:
            raise DecodeError(f"corrupt event record in window {header.scn}", scn=header.scn)
        source = bytes(window[start : start + src_len]).decode()
        payload = bytes(window[start + src_len : pos + size])
        out.append(RawEvent(source, op_char, version, key_hash, payload))
        pos += size
    return out


@dataclass(frozen=True, slots=True)
class EventSpans:
    """A window's events, reading headers only: its (source, schema version)s, and per one
    the payload starts and ops of its events; ``order`` says whose each event is (empty when
    there is one). Client and sink walk a window's headers once with it."""

    tables: list[tuple[str, int]]
    starts: list[list[int]]
    ops: list[list[str]]
    order: list[int]
    has_truncate: bool

    def versions(self) -> set[tuple[str, int]]:
        """The (source, schema version) pairs of the row events (not truncates)."""
        return {
            t for t, ops in zip(self.tables, self.ops, strict=True) if ops.count("t") < len(ops)
        }


_LETTERS = [chr(i) for i in range(256)]


def event_spans(window: bytes) -> EventSpans:
    """The window's ``EventSpans``: the compiled loop (``_wire.c``) when it is built, else
    (and for a corrupt window, whose error it raises) the Python loop, its reference."""
    if _wire is not None and os.environ.get("SLUICE_PURE_PYTHON", "") in ("", "0"):
        try:
            tables, starts, ops, order, truncate = _wire.spans(window)
        except ValueError:
            return _event_spans(window)
        names = [(raw.decode(), version) for raw, version in tables]
        return EventSpans(names, starts, ops, order, truncate)
    return _event_spans(window)


def _event_spans(window: bytes) -> EventSpans:
    header = read_window_header(window)
    unpack, head = EVENT_HEADER.unpack_from, EVENT_HEADER_SIZE
    numbers: dict[tuple[bytes, int], int] = {}
    starts: list[list[int]] = []
    ops: list[list[str]] = []
    order: list[int] = []
    truncate = False
    last, last_version, number = b"", -1, -1
    pos = WINDOW_HEADER_SIZE
    for _ in range(header.n_events):
        size, _hash, op, src_len, version = unpack(window, pos)
        start = pos + head + src_len
        if size < head + src_len:
            raise DecodeError(f"corrupt event record in window {header.scn}", scn=header.scn)
        # most events are of the table before them: compared in place, no slice
        if not (
            version == last_version and src_len == len(last) and window.startswith(last, pos + head)
        ):
            last, last_version = window[pos + head : start], version
            number = numbers.get((last, version), -1)
            if number < 0:
                number = numbers[(last, version)] = len(starts)
                starts.append([])
                ops.append([])
                if number == 1:  # a second table: from now on, say whose each event is
                    order = [0] * len(starts[0])
        truncate = truncate or op == TRUNCATE
        starts[number].append(start)
        ops[number].append(_LETTERS[op])
        if len(starts) > 1:
            order.append(number)
        pos += size
    tables = [(raw.decode(), version) for raw, version in numbers]
    return EventSpans(tables, starts, ops, order, truncate)


@dataclass(frozen=True, slots=True)
class Filter:
    """Server-side filter: sources (encoded names) and a key partition ``index/count``."""

    sources: frozenset[bytes] | None = None
    partition: tuple[int, int] | None = None

    @property
    def is_open(self) -> bool:
        return self.sources is None and self.partition is None

    def keeps(self, key_hash: int, source: bytes, op: int = 0) -> bool:
        if self.sources is not None and source not in self.sources:
            return False
        if self.partition is not None and op != TRUNCATE:  # a truncate concerns every key
            index, count = self.partition
            return key_hash % count == index
        return True


def count_events(window: bytes | memoryview, flt: Filter) -> int:
    """How many of a window's events ``flt`` keeps (headers only)."""
    if flt.is_open:
        return read_window_header(window).n_events
    return sum(
        1
        for _s, _e, key_hash, source, op in iter_event_spans(window)
        if flt.keeps(key_hash, source, op)
    )


def offset_after(
    windows: Iterable[bytes], flt: Filter, since_scn: int, max_events: int
) -> tuple[int, int]:
    """``(scn, events)``: the whole windows after ``since_scn`` holding at most ``max_events``
    kept events (at least one window) end at ``scn``."""
    scn, events = since_scn, 0
    for window in windows:
        count = count_events(window, flt)
        if events and events + count > max_events:
            break
        events += count
        scn = read_window_header(window).scn
    return scn, events


_SIZE_HASH_OP = struct.Struct("<IIB")
try:  # the compiled loop (_wire.c); this module's Python loop is its reference
    _wire: Any = importlib.import_module("sluice.core._wire")
except ImportError:
    _wire = None


def filter_window(window: bytes, flt: Filter) -> bytes | None:
    """The window with only the events ``flt`` keeps: itself, a rebuilt record, or None.
    One pass over the event headers; runs of kept events are copied as one slice each."""
    if flt.is_open:
        return window
    if _wire is not None and os.environ.get("SLUICE_PURE_PYTHON", "") in ("", "0"):
        index, count = flt.partition if flt.partition is not None else (0, 0)
        try:
            kept = _wire.keep(window, flt.sources, index, count)
        except ValueError:  # a corrupt window: the Python loop says what is wrong
            return _filter_window(window, flt)
        if kept is None or kept is True:
            return window if kept else None
        header = read_window_header(window)
        return encode_window(header.scn, header.prev_scn, header.ts_ms, [kept[0]], kept[1])
    return _filter_window(window, flt)


def _filter_window(window: bytes, flt: Filter) -> bytes | None:
    header = read_window_header(window)
    unpack, head = _SIZE_HASH_OP.unpack_from, EVENT_HEADER_SIZE
    sources = flt.sources
    index, count = flt.partition if flt.partition is not None else (0, 0)
    runs: list[tuple[int, int]] = []
    run_start = run_end = -1
    kept = 0
    pos = WINDOW_HEADER_SIZE
    for _ in range(header.n_events):
        size, key_hash, op = unpack(window, pos)
        keep = (not count or op == TRUNCATE or key_hash % count == index) and (
            sources is None or window[pos + head : pos + head + window[pos + 9]] in sources
        )
        if keep:
            kept += 1
            if pos != run_end:  # a new run of kept events
                if run_start >= 0:
                    runs.append((run_start, run_end))
                run_start = pos
            run_end = pos + size
        pos += size
    if run_start < 0:
        return None
    runs.append((run_start, run_end))
    if len(runs) == 1 and run_start == WINDOW_HEADER_SIZE and run_end == pos:
        return window
    parts = [window[s:e] for s, e in runs]
    return encode_window(header.scn, header.prev_scn, header.ts_ms, parts, kept)


def frame_at(buf: bytearray, pos: int, magic: bytes, length: int) -> bytes | Heartbeat:
    """The whole frame of ``length`` bytes at ``pos`` (its magic read): a heartbeat, or the
    window's record once its checksum holds."""
    if magic == HEARTBEAT_MAGIC:
        return Heartbeat(_HEARTBEAT.unpack_from(buf, pos)[2])
    if not window_is_valid(buf, pos, pos + length):
        raise DecodeError("corrupt stream: window checksum mismatch")
    return bytes(buf[pos : pos + length])


class FrameParser:
    """Incremental parser of a ``/stream`` body: bytes in, windows and heartbeats out."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes | Heartbeat]:
        self._buf += data
        frames: list[bytes | Heartbeat] = []
        pos = 0
        while len(self._buf) - pos >= 8:
            magic, length = _LEN_AT.unpack_from(self._buf, pos)
            if magic not in (WINDOW_MAGIC, HEARTBEAT_MAGIC) or length < 8:
                raise DecodeError("corrupt stream: unknown frame")
            if len(self._buf) - pos < length:
                break
            frames.append(frame_at(self._buf, pos, magic, length))
            pos += length
        del self._buf[:pos]
        return frames

    @property
    def pending(self) -> int:
        return len(self._buf)
