"""Debezium rows of many windows at once: ``DebeziumRows`` built as whole Arrow batches.

Each table version's payloads of a batch are decoded together (``schemas.arrow_decoder``);
each column's Debezium value text comes from one Arrow kernel where Debezium's converter is
plain (integers, dates as days, strings), else from the converter itself per value; the
envelope (``before``, ``after``, ``source``, ``transaction``, ``op``, the times) and the key are
joined as text, row by row. The ``source`` block differs per window and table only: it is
written once each, in Python, by the formatter itself. Truncates (rare) are written per event
by the formatter. ``tests/unit/test_spark_rows.py`` checks every column against
``DebeziumRows``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.core.event import TRUNCATE
from sluice.schemas.arrow_decoder import ArrowDecoder, Images, arrow_decodable
from sluice.schemas.arrow_json import concat_texts, json_strings
from sluice.schemas.columns import KIND, Column
from sluice.schemas.debezium import DebeziumFormatter, DebeziumWindows
from sluice.schemas.debezium_values import Field
from sluice.spark.arrowrows import HeldWindows, RowPath, in_order, table_events
from sluice.spark.logcols import Events
from sluice.spark.rows import DEBEZIUM_ARROW, CodecLookup, DebeziumRows

_NULL = pa.scalar("null")
Text = Callable[[pa.Array], pa.Array]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _value_text(col: Column, field: Field) -> Text:
    """A column's Debezium JSON value texts (nulls stay null)."""
    wire = KIND[col.kind].wire
    if field.convert is int and wire == "long":  # integers, years, dates (days)
        return lambda arr: arr.cast(pa.string())
    if field.convert is str and wire == "string":
        return json_strings
    convert = field.convert
    return lambda arr: pa.array(
        [None if v is None else _dumps(convert(v)) for v in arr.to_pylist()], pa.string()
    )


class _Table:
    """One table version's formatter, decoder and column texts."""

    def __init__(self, formatter: DebeziumFormatter) -> None:
        self.formatter = formatter
        schema = formatter.schema
        self.decoder = ArrowDecoder(schema)
        self.texts = [
            _value_text(c, f) for c, f in zip(schema.columns, formatter.fields, strict=True)
        ]
        names = [_dumps(c.name) for c in schema.columns]
        self.heads = ["{" + names[0] + ": "] + [", " + n + ": " for n in names[1:]]
        index = {c.name: i for i, c in enumerate(schema.columns)}
        self.key = [(_dumps(n), index[n]) for n in schema.primary_key]

    def image(self, columns: list[pa.Array], has: np.ndarray) -> tuple[list[pa.Array], Any]:
        """Each column's value texts and the image's JSON (``null`` where absent)."""
        values = [t(a).fill_null(_NULL) for t, a in zip(self.texts, columns, strict=True)]
        if not has.any():
            return values, _NULL
        row = concat_texts(
            *[p for h, v in zip(self.heads, values, strict=True) for p in (h, v)], "}"
        )
        if not has.all():
            row = pc.if_else(pa.array(has), row, _NULL)
        return values, row

    def key_text(
        self, images: Images, before: list[pa.Array], after: list[pa.Array]
    ) -> pa.Array | None:
        """Debezium's key of each event (of the after image, else the before image)."""
        if not self.key:
            return None
        has_after = pa.array(images.has_after)
        parts: list[Any] = []
        for n, (name, i) in enumerate(self.key):
            parts += [
                ("{" if n == 0 else ", ") + name + ": ",
                pc.if_else(has_after, after[i], before[i]),
            ]
        key = concat_texts(*parts, "}")
        either = images.has_after | images.has_before
        if not either.all():  # a delete read as a snapshot row (op r) has no image: no key
            key = pc.if_else(pa.array(either), key, pa.scalar(None, pa.string()))
        if self.formatter.options.schemas:
            return concat_texts(
                '{"schema": ' + _dumps(self.formatter.key_schema) + ', "payload": ', key, "}"
            )
        return key


class FastDebeziumRows(HeldWindows):
    """``DebeziumRows``, decoded per batch with Arrow."""

    def __init__(self, windows: DebeziumWindows, op_override: str | None = None) -> None:
        super().__init__()
        self.windows = windows
        self.op_override = op_override
        self.schema = pa.schema([pa.field(n, t) for n, t in DEBEZIUM_ARROW])
        self._tables: dict[tuple[str, int], _Table | None] = {}

    def _row_path(self) -> DebeziumRows:
        return DebeziumRows(self.windows, self.op_override)

    def _table(self, source: str, version: int, codec_for: CodecLookup) -> _Table:
        key = (source, version)
        if key not in self._tables:
            formatter = self.windows.formatter(source, version, codec_for)
            self._tables[key] = _Table(formatter) if arrow_decodable(formatter.schema) else None
        table = self._tables[key]
        if table is None:
            raise RowPath
        return table

    def _fast(self, events: Events, codec_for: CodecLookup) -> pa.RecordBatch:
        n = len(events)
        counts = np.asarray(events.counts, dtype=np.int64)
        window = np.repeat(np.arange(len(counts)), counts)
        scns = self._per_event(self._scns, counts)
        ts_ms = self._per_event(self._ts_ms, counts)
        ops = self._ops(events, self.op_override)  # as DebeziumRows: its op column
        skip = self._skipped(events, ops)
        if skip is not None and (counts[window[skip]] > 1).any():  # orders would change
            raise RowPath("skipped.operations drops events that share a window with others")
        orders = self._orders(events, counts, window)
        keys: list[tuple[np.ndarray, pa.Array]] = []
        values: list[tuple[np.ndarray, pa.Array]] = []
        for source, version, members in table_events(events):
            table = self._table(source, version, codec_for)
            images = table.decoder.images(events.u8, events.payload_start[members])
            op = ops.take(pa.array(members))
            snapshot = np.asarray(pc.equal(op, "r"), dtype=bool)
            if snapshot.any():  # a snapshot row has no before image
                has_before = images.has_before & ~snapshot
                images = Images(has_before, images.has_after, images.before, images.after)
            before, before_row = table.image(images.before, images.has_before)
            after, after_row = table.image(images.after, images.has_after)
            key = table.key_text(images, before, after)
            if key is not None:
                keys.append((members, key))
            body = self._envelope(
                table.formatter, members, window, scns, ts_ms, op, orders, before_row, after_row
            )
            values.append((members, body))
        for index in np.flatnonzero(events.op == TRUNCATE):
            values.append(
                (
                    np.asarray([index]),
                    pa.array([self._truncate(events, int(index), codec_for, scns, ts_ms, orders)]),
                )
            )
        scn, ts = self._scn_ts(events)
        arrays = [
            scn,
            events.sources(),
            ops,
            ts,
            in_order(keys, n, pa.string()),
            in_order(values, n, pa.string()),
        ]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        return batch if skip is None else batch.filter(pa.array(~skip))

    def _skipped(self, events: Events, ops: pa.Array) -> np.ndarray | None:
        """Which events ``skipped.operations`` drops (None: none), as
        ``DebeziumWindows.events`` decides: a truncate by its own op, others by their op
        column (the override's, if any)."""
        skipped = self.windows.options.skipped
        if not skipped:
            return None
        truncate = events.op == TRUNCATE
        skip = truncate & ("t" in skipped)
        others = sorted(skipped - {"t"})
        if others:
            chosen = np.asarray(pc.is_in(ops, pa.array(others)).fill_null(False), dtype=bool)
            skip |= chosen & ~truncate
        return skip if skip.any() else None

    def _orders(self, events: Events, counts: np.ndarray, window: np.ndarray) -> np.ndarray:
        """Each event's (total order, data collection order) in its window record, from 1:
        the transaction block's, as ``DebeziumWindows.events`` counts them."""
        n = len(events)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        total = np.arange(n, dtype=np.int64) - first + 1
        group = window * (len(events.names) + 1) + events.name_index.astype(np.int64)
        order = np.argsort(group, kind="stable")
        sorted_group = group[order]
        starts = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
        rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
        per_table = np.empty(n, dtype=np.int64)
        per_table[order] = rank + 1
        return np.stack([total, per_table])

    def _transactions(self, members: np.ndarray, scns: np.ndarray, orders: np.ndarray) -> Any:
        if not self.windows.options.transactions:
            return _NULL
        return concat_texts(
            '{"id": "',
            pa.array(scns[members]).cast(pa.string()),
            '", "total_order": ',
            pa.array(orders[0][members]).cast(pa.string()),
            ', "data_collection_order": ',
            pa.array(orders[1][members]).cast(pa.string()),
            "}",
        )

    def _sources(
        self,
        formatter: DebeziumFormatter,
        members: np.ndarray,
        window: np.ndarray,
        op: pa.Array,
    ) -> pa.Array:
        """The source block of each event: one per window and snapshot flag, by the
        formatter itself."""
        snapshot = np.asarray(pc.equal(op, "r").fill_null(False), dtype=bool)
        combo = window[members] * 2 + snapshot
        unique, inverse = np.unique(combo, return_inverse=True)
        texts = [
            _dumps(
                formatter.source_block(
                    "r" if c & 1 else "c", self._scns[c >> 1], self._ts_ms[c >> 1]
                )
            )
            for c in unique.tolist()
        ]
        return pa.array(texts, pa.string()).take(pa.array(inverse.reshape(-1)))

    def _envelope(
        self,
        formatter: DebeziumFormatter,
        members: np.ndarray,
        window: np.ndarray,
        scns: np.ndarray,
        ts_ms: np.ndarray,
        op: pa.Array,
        orders: np.ndarray,
        before: Any,
        after: Any,
    ) -> pa.Array:
        ts = ts_ms[members]
        head = '{"before": '
        if formatter.options.schemas:
            head = '{"schema": ' + _dumps(formatter.envelope_schema) + ', "payload": ' + head
        return concat_texts(
            head,
            before,
            ', "after": ',
            after,
            ', "source": ',
            self._sources(formatter, members, window, op),
            ', "transaction": ',
            self._transactions(members, scns, orders),
            ', "op": "',
            op,
            '", "ts_ms": ',
            pa.array(ts).cast(pa.string()),
            ', "ts_us": ',
            pa.array(ts * 1000).cast(pa.string()),
            ', "ts_ns": ',
            pa.array(ts * 1_000_000).cast(pa.string()),
            "}}" if formatter.options.schemas else "}",
        )

    def _truncate(
        self,
        events: Events,
        index: int,
        codec_for: CodecLookup,
        scns: np.ndarray,
        ts_ms: np.ndarray,
        orders: np.ndarray,
    ) -> str:
        source = events.names[int(events.name_index[index])].decode()
        version = int(events.version[index]) or -1  # its columns, as of the table's version
        formatter = self.windows.formatter(source, version, codec_for)
        tx = None
        if self.windows.options.transactions:
            tx = {
                "id": str(scns[index]),
                "total_order": int(orders[0][index]),
                "data_collection_order": int(orders[1][index]),
            }
        _key, value = formatter.event("t", None, int(scns[index]), int(ts_ms[index]), tx)
        return _dumps(value)
