"""The bootstrap log's rows, fast: windows straight to Arrow columns, no event objects.

What ``bootstrap run`` reads (``includeRaw=true, images=false``): the generic columns with
``before``/``after`` null, the payload kept whole and only the key read from it. Windows are
kept as they come; ``batch()`` turns them into columns at once (``logcols.Events``): the
columns every event of a window shares (SCN, time, sequence numbers) are built per window.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sluice.core import wire
from sluice.spark.logcols import CodecLookup, Events
from sluice.spark.rows import GENERIC_ARROW, RAW_ARROW

_SCHEMA = pa.schema([pa.field(n, t) for n, t in GENERIC_ARROW + RAW_ARROW])


class LogRows:
    """Accumulates windows as the bootstrap log's columns; ``batch()`` drains them."""

    schema = _SCHEMA
    batch_rows = 65536  # columns are built per batch: fewer, larger batches cost less

    def __init__(self, op_override: str | None = None) -> None:
        self.op_override = op_override
        self._codec_for: CodecLookup | None = None
        self._clear()

    def _clear(self) -> None:
        self._records: list[bytes] = []
        self._first_seq: list[int] = []  # a big window's pieces number on from the first
        self._scns: list[int] = []
        self._ts_ms: list[int] = []
        self._events = 0

    def __len__(self) -> int:
        return self._events

    def add_window(self, record: bytes, codec_for: CodecLookup, first_seq: int = 0) -> None:
        header = wire.read_window_header(record)
        self._codec_for = codec_for
        self._records.append(record)
        self._first_seq.append(first_seq)
        self._scns.append(header.scn)
        self._ts_ms.append(header.ts_ms)
        self._events += header.n_events

    def batch(self) -> pa.RecordBatch:
        events = Events(self._records)
        n = len(events)
        counts = np.asarray(events.counts, dtype=np.int64)
        ends = np.cumsum(counts)
        starts = ends - counts - np.asarray(self._first_seq, dtype=np.int64)
        seq = np.arange(n, dtype=np.int32) - np.repeat(starts, counts).astype(np.int32)
        ts = np.repeat(np.asarray(self._ts_ms, dtype=np.int64) * 1000, counts)
        ops = pa.array([self.op_override] * n, pa.string()) if self.op_override else events.ops()
        codec_for = self._codec_for
        keys = events.keys(codec_for) if codec_for and n else pa.array([], pa.string())
        arrays = [
            pa.array(np.repeat(np.asarray(self._scns, dtype=np.int64), counts), pa.int64()),
            events.sources(),
            ops,
            pa.array(ts, pa.int64()).cast(_SCHEMA.field("ts").type),
            keys,
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()),
            pa.array(events.version, pa.int32()),
            pa.array(seq, pa.int32()),
            pa.array(events.key_hash, pa.int64()),
            events.payloads(),
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=_SCHEMA)
