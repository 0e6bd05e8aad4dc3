"""The bootstrap log's rows, fast: windows straight to Arrow columns, no event objects.

What ``bootstrap run`` reads (``includeRaw=true, images=false``): the generic columns with
``before``/``after`` null, the payload kept whole and only the key read from it. Per event the
work is one header unpack, two slices and the key decoder; the columns every event of a
window shares (SCN, time, sequence numbers) are built per window with numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from sluice.core import wire
from sluice.core.event import OPS, TRUNCATE
from sluice.errors import DecodeError
from sluice.schemas import RowCodec
from sluice.spark.rows import GENERIC_ARROW, RAW_ARROW

CodecLookup = Callable[[str, int], RowCodec]
_SCHEMA = pa.schema([pa.field(n, t) for n, t in GENERIC_ARROW + RAW_ARROW])
_OPS = {ord(op): op for op in OPS}
_HEADER = wire.EVENT_HEADER.unpack_from
_HS = wire.EVENT_HEADER_SIZE
_WS = wire.WINDOW_HEADER_SIZE


def _no_key(_payload: bytes) -> str:
    return "null"


class LogRows:
    """Accumulates windows as the bootstrap log's columns; ``batch()`` drains them."""

    schema = _SCHEMA

    def __init__(self, op_override: str | None = None) -> None:
        self.op_override = op_override
        self._lookups: dict[tuple[bytes, int], tuple[str, Callable[[bytes], str]]] = {}
        self._clear()

    def _clear(self) -> None:
        self._scns: list[int] = []
        self._ts_ms: list[int] = []
        self._counts: list[int] = []
        self._sources: list[str] = []
        self._ops: list[str] = []
        self._keys: list[str | None] = []
        self._versions: list[int] = []
        self._hashes: list[int] = []
        self._payloads: list[bytes] = []

    def __len__(self) -> int:
        return len(self._payloads)

    def _lookup(
        self, name: bytes, version: int, codec_for: CodecLookup
    ) -> tuple[str, Callable[[bytes], str]]:
        source = name.decode()
        found = self._lookups[(name, version)] = (source, codec_for(source, version).key_reader())
        return found

    def add_window(self, record: bytes, codec_for: CodecLookup) -> None:
        header = wire.read_window_header(record)
        lookups, ops = self._lookups, _OPS
        sources, op_list, keys = self._sources, self._ops, self._keys
        versions, hashes, payloads = self._versions, self._hashes, self._payloads
        pos = _WS
        # A window's events mostly share a table: its lookup is reused until the name changes.
        last: tuple[bytes, int] | None = None
        found: tuple[str, Callable[[bytes], str]] = ("", _no_key)
        for _ in range(header.n_events):
            size, key_hash, op, src_len, version = _HEADER(record, pos)
            start = pos + _HS + src_len
            name = record[pos + _HS : start]
            if op not in ops or size < _HS + src_len:
                raise DecodeError(f"corrupt event record in window {header.scn}", scn=header.scn)
            if op == TRUNCATE:
                source, key = name.decode(), "null"
            else:
                if last is None or name != last[0] or version != last[1]:
                    last = (name, version)
                    found = lookups.get(last) or self._lookup(name, version, codec_for)
                source, read_key = found
                key = read_key(record[start : pos + size])
            sources.append(source)
            op_list.append(ops[op])
            keys.append(None if key == "null" else key)
            versions.append(version)
            hashes.append(key_hash)
            payloads.append(record[start : pos + size])
            pos += size
        self._scns.append(header.scn)
        self._ts_ms.append(header.ts_ms)
        self._counts.append(header.n_events)

    def batch(self) -> pa.RecordBatch:
        n = len(self._payloads)
        counts = np.asarray(self._counts, dtype=np.int64)
        ends = np.cumsum(counts)
        seq = np.arange(n, dtype=np.int32) - np.repeat(ends - counts, counts).astype(np.int32)
        ts = np.repeat(np.asarray(self._ts_ms, dtype=np.int64) * 1000, counts)
        ops = [self.op_override] * n if self.op_override else self._ops
        arrays = [
            pa.array(np.repeat(np.asarray(self._scns, dtype=np.int64), counts), pa.int64()),
            pa.array(self._sources, pa.string()),
            pa.array(ops, pa.string()),
            pa.array(ts, pa.int64()).cast(_SCHEMA.field("ts").type),
            pa.array(self._keys, pa.string()),
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()),
            pa.array(self._versions, pa.int32()),
            pa.array(seq, pa.int32()),
            pa.array(self._hashes, pa.int64()),
            pa.array(self._payloads, pa.binary()),
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=_SCHEMA)
