"""The generic columns of many windows at once, with Arrow: ``GenericRows`` without a Python
step per event (issue 27's fast source).

Windows are held until ``batch()``; then every table version's payloads of all of them are
decoded together (``schemas.arrow_decoder``) and written as JSON text (``schemas.arrow_json``:
the canonical key, the before and after images, what ``decode_text(..., canonical_key=True)``
gives), and the rows put back in event order with one ``take``. Batches whose windows need
what this path does not do (raw payloads, key-only reads, a SET column, a value wider than its
decoder) are made by ``GenericRows`` itself, the same rows (``tests/unit/test_spark_rows.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.core import wire
from sluice.schemas.arrow_decoder import ArrowDecoder, Undecodable, arrow_decodable
from sluice.schemas.arrow_json import ArrowJson
from sluice.spark.rows import GENERIC_ARROW, CodecLookup, GenericRows

_TS = pa.timestamp("us", tz="UTC")


class _Table:
    """One table version's row events across the held windows."""

    def __init__(self) -> None:
        self.starts: list[np.ndarray] = []  # payload offsets in the joined buffer
        self.rows: list[np.ndarray] = []  # their rows in the batch


class FastGenericRows:
    """``GenericRows(include_raw=False, images=True)``, decoded per batch with Arrow."""

    tuples = True  # ``chunks(..., arrow=False)`` turns its batches into tuples

    def __init__(self, op_override: str | None = None) -> None:
        self.op_override = op_override
        self.schema = pa.schema([pa.field(n, t) for n, t in GENERIC_ARROW])
        self._coders: dict[tuple[str, int], tuple[ArrowDecoder, ArrowJson] | None] = {}
        self._reset()

    def _reset(self) -> None:
        self._records: list[bytes] = []
        self._held: list[tuple[bytes, CodecLookup, int]] = []
        self._count = 0
        self._scn: list[np.ndarray] = []
        self._ts: list[np.ndarray] = []
        self._source: list[Any] = []  # per window: per event source names
        self._op: list[list[str]] = []
        self._version: list[np.ndarray] = []
        self._tables: dict[tuple[str, int], _Table] = {}
        self._offset = 0
        self._slow = False  # something here takes the row path: the whole batch does

    def __len__(self) -> int:
        return self._count

    def add_window(self, record: bytes, codec_for: CodecLookup, first_seq: int = 0) -> None:
        self._held.append((record, codec_for, first_seq))
        header = wire.read_window_header(record)
        n = header.n_events
        base = self._count
        self._count += n
        if self._slow:
            return
        spans = wire.event_spans(record)
        order = np.asarray(spans.order, dtype=np.int64) if len(spans.tables) > 1 else None
        sources = np.empty(n, dtype=object)
        versions = np.empty(n, dtype=np.int32)
        ops: list[str] = [""] * n
        for number, ((source, version), starts, table_ops) in enumerate(
            zip(spans.tables, spans.starts, spans.ops, strict=True)
        ):
            positions = np.arange(n) if order is None else np.flatnonzero(order == number)
            sources[positions], versions[positions] = source, version
            for p, op in zip(positions.tolist(), table_ops, strict=True):
                ops[p] = op
            rows = np.asarray([op != "t" for op in table_ops])
            if not rows.any():
                continue
            if self._coder(source, version, codec_for) is None:
                self._slow = True
                return
            table = self._tables.setdefault((source, version), _Table())
            table.starts.append(np.asarray(starts, dtype=np.int64)[rows] + self._offset)
            table.rows.append(positions[rows] + base)
        self._records.append(record)
        self._offset += len(record)
        self._scn.append(np.full(n, header.scn, dtype=np.int64))
        self._ts.append(np.full(n, header.ts_ms * 1000, dtype=np.int64))
        self._source.append(sources)
        self._op.append(ops)
        self._version.append(versions)

    def _coder(
        self, source: str, version: int, codec_for: CodecLookup
    ) -> tuple[ArrowDecoder, ArrowJson] | None:
        key = (source, version)
        if key not in self._coders:
            schema = codec_for(source, version).schema
            self._coders[key] = (
                (ArrowDecoder(schema), ArrowJson(schema)) if arrow_decodable(schema) else None
            )
        return self._coders[key]

    def batch(self) -> pa.RecordBatch:
        held, slow = self._held, self._slow
        if not slow:
            try:
                out = self._fast()
                self._reset()
                return out
            except Undecodable:  # a value wider than its decoder: this batch per event
                pass
        self._reset()
        rows = GenericRows(include_raw=False, op_override=self.op_override)
        for record, codec_for, first_seq in held:
            rows.add_window(record, codec_for, first_seq)
        return rows.batch()

    def _fast(self) -> pa.RecordBatch:
        n = self._count
        buf = np.frombuffer(b"".join(self._records), dtype=np.uint8)
        texts: list[list[pa.Array]] = [[], [], []]  # key, before, after per table
        where: list[np.ndarray] = []
        for (source, version), table in self._tables.items():
            coder = self._coders[(source, version)]
            assert coder is not None
            decoder, writer = coder
            images = decoder.images(buf, np.concatenate(table.starts))
            _, before, after, canonical = writer.texts_of(images, canonical=True)
            rows = len(images.has_before)
            for out, value in zip(texts, (canonical, before, after), strict=True):
                out.append(_column(value, rows))
            where.append(np.concatenate(table.rows))
        columns = [self._take(t, where, n) for t in texts]
        op = self._op_column()
        arrays = [
            pa.array(np.concatenate(self._scn)),
            pa.array(np.concatenate(self._source).tolist(), pa.string()),
            op,
            pa.array(np.concatenate(self._ts)).cast(_TS),
            *columns,
            pa.array(np.concatenate(self._version)),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _op_column(self) -> pa.Array:
        if self.op_override:
            return pa.array([self.op_override] * self._count, pa.string())
        return pa.array([op for ops in self._op for op in ops], pa.string())

    @staticmethod
    def _take(parts: list[pa.Array], where: list[np.ndarray], n: int) -> pa.Array:
        """The tables' texts in batch order; ``null`` (JSON) texts and truncates are nulls."""
        if not parts:
            return pa.nulls(n, pa.string())
        values = pa.concat_arrays(parts)
        index = np.full(n, -1, dtype=np.int64)
        index[np.concatenate(where)] = np.arange(len(values))
        taken = values.take(pa.array(index, mask=index < 0))
        return pc.if_else(pc.equal(taken, "null"), pa.scalar(None, pa.string()), taken)


def _column(value: pa.Array | pa.Scalar, rows: int) -> pa.Array:
    if isinstance(value, pa.Scalar):
        return pa.array([value.as_py()] * rows, pa.string())
    return value
