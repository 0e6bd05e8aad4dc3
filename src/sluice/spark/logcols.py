"""The bootstrap log's columns from a run of windows, vectorized.

Per event, Python only follows the chain of event lengths (one unpack); headers, source names
and payloads are gathered with numpy, and keys too where the table's key is one integer
column leading the row (the usual ``id``): the key's varint sits at a fixed place in the
payload. Other keys, and images a fixed place cannot reach, go through the table's key reader
one by one. A vectorized key is checked against that reader once per table and batch.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from json.encoder import encode_basestring

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.core import wire
from sluice.core.event import OPS, TRUNCATE
from sluice.errors import DecodeError
from sluice.schemas import RowCodec
from sluice.schemas.compiled import load, pure_python_forced

_events, _MISSING = load("sluice.spark._events", "the compiled event scanner")
CodecLookup = Callable[[str, int], RowCodec]
KeyReader = Callable[[bytes], str]
_HS = wire.EVENT_HEADER_SIZE
_WS = wire.WINDOW_HEADER_SIZE
_SIZE = struct.Struct("<I").unpack_from
_HEADER = np.dtype(wire.EVENT_HEADER_FIELDS)
_OP_CODES = np.array(sorted(ord(op) for op in OPS), dtype=np.uint8)
_OP_NAMES = pa.array([chr(c) for c in range(max(_OP_CODES) + 1)], pa.string())
_DELETE, _NO_IMAGE = ord("d"), 0
_VARINT = np.arange(10, dtype=np.uint64)


class Events:
    """Every event of some windows (one buffer), as columns."""

    def __init__(self, records: list[bytes]) -> None:
        self.buf = b"".join(records)
        self.u8 = np.frombuffer(self.buf + bytes(10), np.uint8)  # room for a varint's read
        scan = _python_scan if _events is None or pure_python_forced() else _scan
        self.counts, self.offsets, head, self.names, self.name_index = scan(
            self.buf, self.u8, records
        )
        self.op = head["op"]
        src_len = head["src"].astype(np.int64)
        bad = ~np.isin(self.op, _OP_CODES) | (head["size"] < _HS + src_len)
        if bad.any():
            raise DecodeError("corrupt event record in a window")
        self.key_hash = head["hash"].astype(np.int64)
        self.version = head["ver"].astype(np.int32)
        self.name_start = self.offsets + _HS
        self.payload_start = self.name_start + src_len
        self.payload_end = self.offsets + head["size"].astype(np.int64)

    def __len__(self) -> int:
        return len(self.offsets)

    def payloads(self) -> pa.Array:
        return _binary(self.u8, self.payload_start, self.payload_end)

    def sources(self) -> pa.Array:
        names = pa.array([n.decode() for n in self.names], pa.string())
        return pc.take(names, pa.array(self.name_index))

    def ops(self) -> pa.Array:
        return pc.take(_OP_NAMES, pa.array(self.op))

    def keys(self, codec_for: CodecLookup) -> pa.Array:
        """Each event's key text (null for a truncate and a table without a key)."""
        done = self.op == TRUNCATE
        parts: list[tuple[np.ndarray, pa.Array]] = []
        group = self.name_index.astype(np.int64) << 16 | self.version
        for g in np.unique(group):
            members = np.flatnonzero((group == g) & ~done)
            if not len(members):
                continue
            codec = codec_for(self.names[int(g) >> 16].decode(), int(g) & 0xFFFF)
            found = self._fast_keys(codec, members)
            if found is not None:
                parts.append(found)
                done[found[0]] = True
                members = members[~done[members]]
            read = codec.key_reader()
            texts = [read(self.buf[self.payload_start[i] : self.payload_end[i]]) for i in members]
            parts.append(
                (members, pa.array([None if t == "null" else t for t in texts], pa.string()))
            )
        truncates = np.flatnonzero(self.op == TRUNCATE)
        parts.append((truncates, pa.nulls(len(truncates), pa.string())))
        parts = [(index, texts) for index, texts in parts if len(index)]
        if not parts:
            return pa.array([], pa.string())
        if len(parts) == 1:
            return parts[0][1]  # every key read alike: already in order
        order = np.concatenate([index for index, _texts in parts])
        values = pa.concat_arrays([texts for _index, texts in parts])
        return pc.take(values, pa.array(np.argsort(order, kind="stable")))

    def _fast_keys(
        self, codec: RowCodec, members: np.ndarray
    ) -> tuple[np.ndarray, pa.Array] | None:
        """Keys of a table keyed by one non-null integer column that leads the row: read at
        byte 2 of a payload without a before image, byte 1 of a delete's. None otherwise."""
        schema = codec.schema
        if len(schema.primary_key) != 1 or not schema.columns:
            return None
        first = schema.columns[0]
        if first.name != schema.primary_key[0] or first.kind != "int" or first.nullable:
            return None
        start = self.payload_start[members]
        leading = self.u8[start]
        where = np.where(leading == _NO_IMAGE, 2, np.where(self.op[members] == _DELETE, 1, 0))
        index, at = members[where > 0], start[where > 0] + where[where > 0]
        if not len(index):
            return None
        values = _varints(self.u8, at)
        if values is None:
            return None
        prefix = "{" + encode_basestring(first.name) + ":"
        texts = pc.binary_join_element_wise(prefix, pc.cast(pa.array(values), pa.string()), "}", "")
        check = codec.key_reader()(
            self.buf[self.payload_start[index[0]] : self.payload_end[index[0]]]
        )
        if texts[0].as_py() != check:  # the layout is not what this path assumes: read each
            return None
        return index, texts


def _offsets(buf: bytes, records: list[bytes]) -> tuple[list[int], np.ndarray]:
    """Each window's event count, and each event record's offset in ``buf``."""
    counts: list[int] = []
    out: list[int] = []
    base = 0
    append = out.append
    try:
        for record in records:
            header = wire.read_window_header(record)
            pos, end = base + _WS, base + len(record)
            for _ in range(header.n_events):
                append(pos)
                pos += _SIZE(buf, pos)[0]
            if pos > end:
                raise DecodeError(f"corrupt event record in window {header.scn}", scn=header.scn)
            counts.append(header.n_events)
            base = end
    except struct.error:
        raise DecodeError("corrupt event record: it runs past its window") from None
    return counts, np.asarray(out, dtype=np.int64)


Scan = tuple[list[int], np.ndarray, np.ndarray, list[bytes], np.ndarray]


def _python_scan(buf: bytes, u8: np.ndarray, records: list[bytes]) -> Scan:
    """Each window's event count, each event's offset and header, the distinct source names
    (in order of appearance) and each event's index into them: ``_scan``'s reference."""
    counts, offsets = _offsets(buf, records)
    head = u8[offsets[:, None] + np.arange(_HS)].copy().view(_HEADER).reshape(len(offsets))
    name_start = offsets + _HS
    names = _binary(u8, name_start, name_start + head["src"].astype(np.int64))
    encoded = names.dictionary_encode()
    index = encoded.indices.to_numpy(zero_copy_only=False)
    return counts, offsets, head, encoded.dictionary.to_pylist(), index


def _scan(buf: bytes, u8: np.ndarray, records: list[bytes]) -> Scan:
    """``_python_scan`` by the compiled scanner (``_events.c``)."""
    assert _events is not None
    counts: list[int] = []
    windows = np.empty((len(records), 3), dtype=np.int64)
    base = 0
    for i, record in enumerate(records):
        n = wire.read_window_header(record).n_events
        counts.append(n)
        windows[i] = (base + _WS, n, base + len(record))
        base += len(record)
    try:
        offsets, headers, index, names = _events.scan(buf, windows)
    except ValueError as exc:
        raise DecodeError(f"corrupt event record: {exc}") from None
    return (
        counts,
        np.frombuffer(offsets, np.int64),
        np.frombuffer(headers, _HEADER),
        names,
        np.frombuffer(index, np.int32),
    )


def _binary(u8: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The byte ranges ``[starts, ends)`` (ascending, disjoint) of ``u8`` as a binary array."""
    lengths = ends - starts
    offsets = np.zeros(len(starts) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total * 4 < len(u8):  # a small part of the buffer (names): index the bytes
        at = np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
        data = u8[at]
    else:  # most of it (payloads): mark the ranges' edges, keep what lies inside
        edges = np.zeros(len(u8) + 1, dtype=np.int8)
        edges[starts] += 1
        edges[ends] -= 1
        data = u8[np.cumsum(edges[:-1], dtype=np.int8).view(bool)]
    return pa.Array.from_buffers(
        pa.binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _varints(u8: np.ndarray, at: np.ndarray) -> np.ndarray | None:
    """The zigzag varints (Avro longs) starting at ``at``; None if one is longer than 10 bytes."""
    raw = u8[at[:, None] + np.arange(10)]
    more = (raw & 0x80) != 0
    if more.all(axis=1).any():
        return None
    length = np.argmin(more, axis=1) + 1
    groups = (raw & 0x7F).astype(np.uint64) << (7 * _VARINT)
    groups[np.arange(10) >= length[:, None]] = 0
    zigzag = np.bitwise_or.reduce(groups, axis=1)
    values: np.ndarray = (zigzag >> np.uint64(1)).astype(np.int64)
    values ^= -(zigzag & np.uint64(1)).astype(np.int64)
    return values
