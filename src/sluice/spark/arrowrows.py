"""Rows of many windows at once, with Arrow: the source's generic and typed columns without a
Python step per event (issue 27's fast source).

Windows are held until ``batch()``. Then the headers of all their events are read at once
(``logcols.Events``: Python only follows the chain of event lengths), every table version's
payloads are decoded together (``schemas.arrow_decoder``) and, for the generic columns,
written as JSON text (``schemas.arrow_json``: what ``decode_text(..., canonical_key=True)``
gives); the rows are put back in event order with one ``take``. A batch that needs what this
path does not do (key-only reads, a SET column, a value wider than its decoder, a column whose
kind changed between versions) is made by ``GenericRows``/``TypedRows`` themselves: the same
rows (``tests/unit/test_spark_rows.py`` checks both paths against each other).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.core import wire
from sluice.core.event import TRUNCATE
from sluice.schemas import TableSchema
from sluice.schemas.arrow_decoder import ArrowDecoder, Images, Undecodable, arrow_decodable
from sluice.schemas.arrow_json import ArrowJson
from sluice.schemas.columns import INFINITE, KIND, Column, time_text
from sluice.spark.logcols import Events
from sluice.spark.rows import (
    GENERIC_ARROW,
    RAW_ARROW,
    CodecLookup,
    GenericRows,
    Rows,
    TypedRows,
    arrow_type,
)

_TS = pa.timestamp("us", tz="UTC")
_NULL_TEXT = pa.scalar(None, pa.string())


log = logging.getLogger(__name__)


class RowPath(Exception):
    """This batch takes the row path."""


class HeldWindows:
    """Windows held for one batch, and their events' columns once read."""

    batch_rows = 65536  # columns are built per batch: fewer, larger batches cost less
    tuples = True  # ``chunks(..., arrow=False)`` turns its batches into tuples

    def __init__(self) -> None:
        self._codec_for: CodecLookup | None = None
        self.row_path_batches = 0  # batches made per event (said once, as a WARNING)
        self._clear()

    def _clear(self) -> None:
        self._records: list[bytes] = []
        self._first_seq: list[int] = []
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
        held = list(zip(self._records, self._first_seq, strict=True))
        codec_for = self._codec_for
        try:
            if codec_for is None:
                raise RowPath
            return self._fast(Events(self._records), codec_for)
        except (RowPath, Undecodable) as exc:  # a batch per event: the row path's own rows
            self._said_slow(exc)
            rows = self._row_path()
            for record, first_seq in held:
                assert codec_for is not None
                rows.add_window(record, codec_for, first_seq)
            return rows.batch()
        finally:
            self._clear()

    def _said_slow(self, exc: Exception) -> None:
        if not self.row_path_batches:
            log.warning(
                "the sluice source decodes some batches per event (about 5x slower): %s",
                exc or "a table with a SET column or a column whose type changed",
            )
        self.row_path_batches += 1

    def _fast(self, events: Events, codec_for: CodecLookup) -> pa.RecordBatch:
        raise NotImplementedError

    def _row_path(self) -> Rows:
        raise NotImplementedError

    def _per_event(self, values: list[int], counts: np.ndarray) -> np.ndarray:
        return np.repeat(np.asarray(values, dtype=np.int64), counts)

    def _scn_ts(self, events: Events) -> tuple[pa.Array, pa.Array]:
        counts = np.asarray(events.counts, dtype=np.int64)
        scn = pa.array(self._per_event(self._scns, counts), pa.int64())
        ts = pa.array(self._per_event(self._ts_ms, counts) * 1000, pa.int64()).cast(_TS)
        return scn, ts

    def _seq(self, events: Events) -> np.ndarray:
        """Each event's number in its window (a piece's events number on from its first)."""
        counts = np.asarray(events.counts, dtype=np.int64)
        ends = np.cumsum(counts)
        starts = ends - counts - np.asarray(self._first_seq, dtype=np.int64)
        return np.arange(len(events), dtype=np.int64) - np.repeat(starts, counts)

    def _ops(self, events: Events, op_override: str | None) -> pa.Array:
        if op_override:
            return pa.array([op_override] * len(events), pa.string())
        return events.ops()


def table_events(events: Events) -> Iterator[tuple[str, int, np.ndarray]]:
    """(source, schema version, the events' indices) of each table version's row events."""
    rows = events.op != TRUNCATE
    group = events.name_index.astype(np.int64) << 16 | events.version
    if len(group) and rows.all() and group.min() == group.max():  # one table version
        yield (
            events.names[int(group[0]) >> 16].decode(),
            int(group[0]) & 0xFFFF,
            np.arange(len(group)),
        )
        return
    for g in np.unique(group[rows]):
        members = np.flatnonzero((group == g) & rows)
        yield events.names[int(g) >> 16].decode(), int(g) & 0xFFFF, members


def in_order(parts: list[tuple[np.ndarray, pa.Array]], n: int, kind: pa.DataType) -> pa.Array:
    """The groups' values put back in event order; null where no group has an event."""
    if not parts:
        return pa.nulls(n, kind)
    if len(parts) == 1 and len(parts[0][0]) == n:  # one table, no truncate: in order already
        return parts[0][1]
    values = pa.concat_arrays([v for _, v in parts])
    index = np.full(n, -1, dtype=np.int64)
    index[np.concatenate([i for i, _ in parts])] = np.arange(len(values))
    if len(values) == n and (index >= 0).all():
        return values.take(pa.array(index))
    return values.take(pa.array(index, mask=index < 0))


class FastGenericRows(HeldWindows):
    """``GenericRows(include_raw, images=True)``, decoded per batch with Arrow."""

    def __init__(self, op_override: str | None = None, include_raw: bool = False) -> None:
        super().__init__()
        self.op_override = op_override
        self.include_raw = include_raw
        fields = GENERIC_ARROW + (RAW_ARROW if include_raw else [])
        self.schema = pa.schema([pa.field(n, t) for n, t in fields])
        self._coders: dict[tuple[str, int], tuple[ArrowDecoder, ArrowJson] | None] = {}

    def _row_path(self) -> GenericRows:
        return GenericRows(self.include_raw, op_override=self.op_override)

    def _coder(
        self, source: str, version: int, codec_for: CodecLookup
    ) -> tuple[ArrowDecoder, ArrowJson]:
        key = (source, version)
        if key not in self._coders:
            schema = codec_for(source, version).schema
            self._coders[key] = (
                (ArrowDecoder(schema), ArrowJson(schema)) if arrow_decodable(schema) else None
            )
        coder = self._coders[key]
        if coder is None:
            raise RowPath
        return coder

    def _fast(self, events: Events, codec_for: CodecLookup) -> pa.RecordBatch:
        n = len(events)
        texts: list[list[tuple[np.ndarray, pa.Array]]] = [[], [], []]  # key, before, after
        for source, version, members in table_events(events):
            decoder, writer = self._coder(source, version, codec_for)
            images = decoder.images(events.u8, events.payload_start[members])
            _, before, after, canonical = writer.texts_of(images, canonical=True, key=False)
            for out, value in zip(texts, (canonical, before, after), strict=True):
                out.append((members, nulled(value, len(members))))
        scn, ts = self._scn_ts(events)
        arrays = [
            scn,
            events.sources(),
            self._ops(events, self.op_override),
            ts,
            *(in_order(parts, n, pa.string()) for parts in texts),
            pa.array(events.version, pa.int32()),
        ]
        if self.include_raw:
            arrays += [
                pa.array(self._seq(events), pa.int32()),
                pa.array(events.key_hash, pa.int64()),
                events.payloads(),
            ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def nulled(value: pa.Array | pa.Scalar | None, rows: int) -> pa.Array:
    """JSON texts with ``null`` (an absent image, no key) as nulls."""
    if value is None or isinstance(value, pa.Scalar):
        text = None if value is None else value.as_py()
        return pa.nulls(rows, pa.string()) if text in (None, "null") else pa.array([text] * rows)
    return pc.if_else(pc.equal(value, "null"), _NULL_TEXT, value)


# -- typed rows ---------------------------------------------------------------------------------
Convert = Callable[[pa.Array], pa.Array]


def _finite(arr: pa.Array) -> pa.Array:
    """Spark's dates and timestamps hold no infinity: PostgreSQL's are null in typed rows."""
    infinite = pc.is_in(arr, pa.array(list(INFINITE), pa.int64()))
    return pc.if_else(infinite, pa.scalar(None, arr.type), arr) if pc.any(infinite).as_py() else arr


def _days(arr: pa.Array) -> pa.Array:
    return _finite(arr).cast(pa.int32()).cast(pa.date32())


def _json_document(arr: pa.Array) -> pa.Array:
    """As ``TypedRows``: the document parsed and written again (rare: per value)."""
    texts = [
        None if v is None else json.dumps(json.loads(v), ensure_ascii=False)
        for v in arr.to_pylist()
    ]
    return pa.array(texts, pa.string())


def _time_text(arr: pa.Array) -> pa.Array:
    return pa.array([None if v is None else time_text(v) for v in arr.to_pylist()], pa.string())


def _typed_convert(col: Column) -> Convert:
    """The decoder's wire-form column -> the typed column (``rows.arrow_type(col)``)."""
    kind = KIND[col.kind]
    target = arrow_type(col)
    if col.kind == "date":
        return _days
    if col.kind in ("datetime", "timestamp"):
        return lambda arr: _finite(arr).cast(target)
    if col.kind == "time":
        return _time_text
    if kind.json == "value" and kind.wire == "string":
        return _json_document
    if kind.wire == "decimal" and target == pa.string():  # wider than Spark's decimals
        return lambda arr: pa.array(
            [None if v is None else format(v, "f") for v in arr.to_pylist()], pa.string()
        )
    return lambda arr: arr.cast(target)


class FastTypedRows(HeldWindows):
    """``TypedRows`` (one table's own columns), decoded per batch with Arrow."""

    def __init__(self, schema: TableSchema, op_override: str | None = None) -> None:
        super().__init__()
        self.typed = schema
        self.op_override = op_override
        self.schema = TypedRows(schema).schema
        self._decoders: dict[tuple[str, int], ArrowDecoder] = {}

    def _row_path(self) -> TypedRows:
        return TypedRows(self.typed, self.op_override)

    def _decoder(self, source: str, version: int, codec_for: CodecLookup) -> ArrowDecoder:
        key = (source, version)
        if key not in self._decoders:
            schema = codec_for(source, version).schema
            if source != self.typed.source or not arrow_decodable(schema):
                raise RowPath
            mine = {c.name: c for c in schema.columns}
            for col in self.typed.columns:  # a column whose kind changed: the row path's
                other = mine.get(col.name)
                if other is not None and arrow_type(other) != arrow_type(col):
                    raise RowPath
            self._decoders[key] = ArrowDecoder(schema)
        return self._decoders[key]

    def _fast(self, events: Events, codec_for: CodecLookup) -> pa.RecordBatch:
        n = len(events)
        columns: list[list[tuple[np.ndarray, pa.Array]]] = [[] for _ in self.typed.columns]
        for source, version, members in table_events(events):
            decoder = self._decoder(source, version, codec_for)
            images = decoder.images(events.u8, events.payload_start[members])
            row = _row_image(decoder.schema, images)
            for out, col in zip(columns, self.typed.columns, strict=True):
                value = row.get(col.name)
                if value is not None:
                    out.append((members, _typed_convert(col)(value)))
        scn, ts = self._scn_ts(events)
        arrays = [
            in_order(parts, n, field.type)
            for parts, field in zip(columns, self.schema, strict=False)
        ]
        arrays += [scn, self._ops(events, self.op_override), ts]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _row_image(schema: TableSchema, images: Images) -> dict[str, pa.Array]:
    """Each column of the row image: the after image, or the before image (deletes)."""
    has_after = pa.array(images.has_after)
    out: dict[str, Any] = {}
    for col, before, after in zip(schema.columns, images.before, images.after, strict=True):
        if images.has_after.all():
            out[col.name] = after
        elif not images.has_after.any():
            out[col.name] = before
        else:
            out[col.name] = pc.if_else(has_after, after, before)
    return out
