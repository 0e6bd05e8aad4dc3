"""Shaping: window records into the ``Change``s a target takes: column selection, the row
filter, routing templates, the event format (Sluice JSON, Debezium JSON, Avro) and stable ids.

What each table version needs (selected columns, decoders, the filter's converters) is made
once per (source, schema version) in ``TableShape`` (``shape_table.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from sluice.client import RecordWindow
from sluice.core import wire
from sluice.core.checkpoint import Snapshot
from sluice.core.names import split_source
from sluice.schemas.arrow_decoder import Undecodable, never_undecodable
from sluice.schemas.avro import TableSchema
from sluice.schemas.debezium import DebeziumOptions, DebeziumWindows
from sluice.schemas.debezium_text import compact
from sluice.schemas.events import json_line
from sluice.sink.columnar import Columnar, TablePart
from sluice.sink.shape_table import (
    ROUTE_FIELDS,
    Format,
    ShapeSettings,
    TableShape,
    check_template,
)
from sluice.sink.target import Batch, Change

__all__ = [
    "BULK_EVENTS",
    "CONTENT_TYPES",
    "ROUTE_FIELDS",
    "Format",
    "ShapeSettings",
    "Shaper",
    "check_template",
    "origin_of",
]

log = logging.getLogger(__name__)
Record = tuple[Any, Any]  # Debezium's (key, value) as Kafka Connect objects: ``Change.record``
_OP_NAMES = {"c": "insert", "u": "update", "d": "delete", "t": "TRUNCATE"}
CONTENT_TYPES = {"json": "application/json", "debezium": "application/json", "avro": "avro/binary"}
# Snapshot rows: the bootstrap's row cursor holds the row number in its low 48 bits (the
# generation above); a snapshot window has at most 2**12 rows (the bootstrap sends 500).
SNAPSHOT_ROWS = (1 << 48) - 1
SNAPSHOT_INDEX_BITS = 12
# Windows of at least this many events get their bodies per table: Sluice JSON from Arrow
# (below it, Arrow's fixed cost per window outweighs the row decoder's cost per event),
# Debezium's from the record without an event object each.
BULK_EVENTS = 64


def origin_of(source_info: Mapping[str, Any]) -> str:
    """A short, stable name of the physical source (the relay's ``/sources`` block): part of
    every message id, so two sources' SCNs never collide in one target. How formats render
    the source (``debezium``) is not who it is, and is left out: origins stay as they were."""
    identity = {k: v for k, v in source_info.items() if k != "debezium"}
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# A table's part of a window: source, version, schema, bodies, canonical keys, message keys
_TableBodies = tuple[
    str, int, TableSchema, list[bytes], list[str] | None, list[bytes | None] | None
]


def _spans(window: RecordWindow) -> wire.EventSpans:
    """The window's headers as the client read them (whole windows), else read here."""
    return window.spans or wire.event_spans(window.record)


class Shaper:
    """Turns record windows into batches for one target."""

    def __init__(self, settings: ShapeSettings, source_info: Mapping[str, Any]) -> None:
        self.settings = settings
        self.filtered = 0  # events the filter dropped (or turned into deletes)
        self.skipped = 0  # events --format debezium's skipped.operations dropped
        self._skipped_said: set[tuple[str, str]] = set()
        self._tables: dict[tuple[str, int], TableShape] = {}
        self._routes: dict[tuple[str, str], str] = {}
        self._debezium: DebeziumWindows | None = None
        self._bulk = settings.bodies and settings.format in ("json", "debezium")
        self._prefix = DebeziumOptions.parse(dict(settings.debezium)).name  # {prefix}
        if settings.format == "debezium" and settings.bodies:
            options = DebeziumOptions.parse(dict(settings.debezium))
            self._debezium = DebeziumWindows(dict(source_info), options)

    def batch(self, window: RecordWindow) -> Batch:
        if self.settings.columnar and window.first_seq == 0 and window.last:
            columns = self._columnar(window)
            if columns is not None:
                return Batch(
                    window.scn, window.ts_ms, (), checkpoint=window.checkpoint, columns=columns
                )
        if self._bulk and wire.read_window_header(window.record).n_events >= BULK_EVENTS:
            changes = self._json_changes(window) if self._debezium is None else None
            if self._debezium is not None and not self.settings.connect_records:
                changes = self._debezium_changes(window)
            if changes is not None:
                return Batch(
                    window.scn, window.ts_ms, changes, first=window.first_seq == 0,
                    last=window.last, checkpoint=window.checkpoint,
                )  # fmt: skip
        return self._rows(window)

    def _json_changes(self, window: RecordWindow) -> tuple[Change, ...] | None:
        """A window's changes with Sluice JSON bodies built per table with Arrow, when no
        event needs shaping on its own (no truncate, filter or dropped column)."""
        spans = _spans(window)
        if spans.has_truncate:
            return None
        scn, ts_ms, keys_wanted = window.scn, window.ts_ms, self.settings.keys
        tables: list[_TableBodies] = []
        for (source, version), starts, ops in zip(
            spans.tables, spans.starts, spans.ops, strict=True
        ):
            shape = self._table(window, source, version)
            coder = shape.json_bodies()
            if coder is None or shape.expression is not None or not shape.all_columns:
                return None
            keyed = keys_wanted and bool(shape.schema.primary_key)
            try:
                bodies, keys = coder.lines(window.record, scn, ts_ms, starts, ops, keyed)
            except Undecodable:
                return None
            tables.append((source, version, shape.schema, bodies, keys, None))
        return self._changes(window, spans, tables)

    def _debezium_changes(self, window: RecordWindow) -> tuple[Change, ...] | None:
        """A window's changes with Debezium bodies rendered per table straight from the
        record (``DebeziumFormatter.window_text``: no event objects), when no event needs
        shaping on its own (no truncate, skipped op, transaction block, filter or dropped
        column)."""
        assert self._debezium is not None
        spans, options = _spans(window), self._debezium.options
        if spans.has_truncate or options.transactions:
            return None
        record, scn, ts_ms = window.record, window.scn, window.ts_ms
        tables: list[_TableBodies] = []
        for (source, version), starts, ops in zip(
            spans.tables, spans.starts, spans.ops, strict=True
        ):
            shape = self._table(window, source, version)
            if shape.expression is not None or not shape.all_columns:
                return None
            if not options.skipped.isdisjoint(ops):
                return None
            formatter = self._debezium.formatter(source, version, window.codec_for)
            keys, values, ends = formatter.window_text(record, starts, ops, scn, ts_ms)
            texts = None
            if self.settings.keys and shape.schema.primary_key:
                reader = shape.codec.key_reader()
                texts = [reader(record[a:b]) for a, b in zip(starts, ends, strict=True)]
            pairs = [self._debezium_bytes(k, v) for k, v in zip(keys, values, strict=True)]
            bodies, key_bodies = [p[0] for p in pairs], [p[1] for p in pairs]
            tables.append((source, version, shape.schema, bodies, texts, key_bodies))
        return self._changes(window, spans, tables)

    def _changes(
        self, window: RecordWindow, spans: wire.EventSpans, tables: list[_TableBodies]
    ) -> tuple[Change, ...]:
        """The changes of a window whose bodies were made per table, in the window's order."""
        scn, ts_ms = window.scn, window.ts_ms
        first, tag = self._index_base(window)
        ident = f"{self.settings.origin}-{scn}-{tag}"
        if len(tables) == 1:  # the events in order are the table's
            source, version, schema, bodies, texts, keys = tables[0]
            routes = {op: self.route(source, op) for op in "cudr"}
            return tuple(
                Change(scn, first + j, source, op, ts_ms, version, schema,  # type: ignore[arg-type]
                       None if texts is None else texts[j], None, None, routes[op],
                       f"{ident}{first + j}", bodies[j], None if keys is None else keys[j])
                for j, op in enumerate(spans.ops[0])
            )  # fmt: skip
        cursors = [0] * len(tables)
        changes = []
        for i, number in enumerate(spans.order):
            j = cursors[number]
            cursors[number] = j + 1
            source, version, schema, bodies, texts, keys = tables[number]
            op, index = spans.ops[number][j], first + i
            changes.append(
                Change(scn, index, source, op, ts_ms, version, schema,  # type: ignore[arg-type]
                       None if texts is None else texts[j], None, None, self.route(source, op),
                       f"{ident}{index}", bodies[j], None if keys is None else keys[j])
            )  # fmt: skip
        return tuple(changes)

    def _index_base(self, window: RecordWindow) -> tuple[int, str]:
        """The first event's index, and the id's tag: a snapshot's windows all carry its SCN
        and count their rows from 0, so there the index rises with the window's row cursor
        instead, and ids name the source."""
        snapshot = window.checkpoint
        if isinstance(snapshot, Snapshot) and snapshot.row >= 0:
            return (snapshot.row & SNAPSHOT_ROWS) << SNAPSHOT_INDEX_BITS, f"{snapshot.source}-"
        return window.first_seq, ""

    def _columnar(self, window: RecordWindow) -> Columnar | None:
        """The window as payload spans per table, when no event needs shaping on its own."""
        spans = _spans(window)
        if spans.has_truncate:
            return None
        parts = []
        for (source, version), starts in zip(spans.tables, spans.starts, strict=True):
            shape = self._table(window, source, version)
            route = self._columnar_route(shape)
            if route is None:
                return None
            schema = shape.schema
            parts.append(
                TablePart(source, shape.codec.schema, schema, tuple(shape.keep), route,
                          np.asarray(starts, dtype=np.int64))
            )  # fmt: skip
        events = sum(len(starts) for starts in spans.starts)
        return Columnar(window.record, tuple(parts), events, lambda: self._rows(window).changes)

    def _columnar_route(self, shape: TableShape) -> str | None:
        """The table's one route, when its events need nothing each (else None)."""
        full = shape.codec.schema
        if shape.expression is not None or not full.primary_key or not never_undecodable(full):
            return None
        routes = {self.route(full.source, op) for op in ("c", "u", "d", "r")}
        return routes.pop() if len(routes) == 1 else None  # an {op} route: per event

    def _rows(self, window: RecordWindow) -> Batch:
        changes = []
        first, tag = self._index_base(window)
        for i, raw in enumerate(wire.decode_events(window.record)):
            change = self._change(window, first + i, raw, tag)
            if change is not None:
                changes.append(change)
        return Batch(
            window.scn,
            window.ts_ms,
            tuple(changes),
            first=window.first_seq == 0,
            last=window.last,
            checkpoint=window.checkpoint,
        )

    def route(self, source: str, op: str) -> str:
        route = self._routes.get((source, op))
        if route is None:
            db, table = split_source(source)
            route = self.settings.route.format(
                source=source,
                db=db,
                table=table,
                op=op,
                prefix=self._prefix,
                partition=self.settings.partition,
            )
            self._routes[(source, op)] = route
        return route

    def _skip(self, raw: wire.RawEvent) -> None:
        """Count a skipped event; say so once per table and op."""
        self.skipped += 1
        if (raw.source, raw.op) not in self._skipped_said:
            self._skipped_said.add((raw.source, raw.op))
            log.warning(
                "%s: %s events are not sent (skipped.operations, Debezium's default skips "
                "t; --debezium-option skipped.operations=none sends them)",
                raw.source, _OP_NAMES.get(raw.op, raw.op),
            )  # fmt: skip

    def _table(self, window: RecordWindow, source: str, version: int) -> TableShape:
        shape = self._tables.get((source, version))
        if shape is None:
            codec = window.codec_for(source, version)
            shape = self._tables[(source, version)] = TableShape(
                codec, self.settings, self._debezium
            )
        return shape

    def _change(
        self, window: RecordWindow, index: int, raw: wire.RawEvent, tag: str = ""
    ) -> Change | None:
        scn, settings = window.scn, self.settings
        ident = f"{settings.origin}-{scn}-{tag}{index}"
        if self._debezium is not None and raw.op in self._debezium.options.skipped:
            self._skip(raw)  # skipped.operations (Debezium's default: t), as the relay does
            return None
        if raw.op == "t":  # no rows to filter or select: always passes
            body, record = self._truncate_body(window, raw) if settings.bodies else (b"", None)
            return Change(
                scn, index, raw.source, "t", window.ts_ms, raw.schema_version, None, None,
                None, None, self.route(raw.source, "t"), ident, body, None, record,
            )  # fmt: skip
        shape = self._table(window, raw.source, raw.schema_version)
        before = after = None
        if shape.images_needed:
            before, after = shape.images(raw.payload)
        op = raw.op
        if shape.expression is not None:
            meta = {**shape.meta, "op": op, "scn": scn}
            if not shape.matches(after if after is not None else before, meta):
                if not (before is not None and shape.matches(before, meta)):
                    self.filtered += 1
                    if not settings.filtered_as_deletes or op == "d":
                        return None
                # the row left the filter (or never matched): a table target deletes it
                if settings.filtered_as_deletes:
                    op, before, after = "d", before if before is not None else after, None
        key = None  # table targets key rows by their images
        if settings.keys and settings.bodies and shape.schema.primary_key:
            key = shape.codec.payload_key(raw.payload)
        before, after = shape.project(before), shape.project(after)
        body, key_body, record = b"", None, None
        if settings.bodies:
            body, key_body, record = self._body(window, raw, shape, key, before, after)
        return Change(
            scn, index, raw.source, op, window.ts_ms, raw.schema_version, shape.schema, key,
            before, after, self.route(raw.source, op), ident, body, key_body, record,
        )  # fmt: skip

    def _body(
        self,
        window: RecordWindow,
        raw: wire.RawEvent,
        shape: TableShape,
        key: str | None,
        before: list[Any] | None,
        after: list[Any] | None,
    ) -> tuple[bytes, bytes | None, Record | None]:
        """The event's body, its message key where the format has its own (``message_keys``:
        Debezium's key struct), and Debezium's objects (``connect_records``, body empty)."""
        fmt = self.settings.format
        if fmt == "avro":
            return raw.payload, None, None
        if fmt == "debezium":
            return self._debezium_body(window, raw, shape)
        if shape.all_columns:  # the relay's own JSON text, straight from Avro
            key_text, before_text, after_text = shape.codec.decode_text(raw.payload)
            line = json_line(window.scn, window.ts_ms, raw, key_text, before_text, after_text)
            return line.encode(), None, None
        event = {
            "scn": window.scn,
            "source": raw.source,
            "op": raw.op,
            "key": json.loads(key) if key is not None else None,
            "before": shape.json_row(before),
            "after": shape.json_row(after),
            "ts_ms": window.ts_ms,
            "schema_version": raw.schema_version,
        }
        return json.dumps(event, ensure_ascii=False).encode(), None, None

    def _debezium_body(
        self, window: RecordWindow, raw: wire.RawEvent, shape: TableShape
    ) -> tuple[bytes, bytes | None, Record | None]:
        assert self._debezium is not None
        formatter = self._debezium.formatter(raw.source, raw.schema_version, window.codec_for)
        # (a primary-key change is a delete and an insert from the capture on, as Debezium
        # sends it: no update here changes its key)
        event = (raw.op, raw.payload, window.scn, window.ts_ms, None, True)
        if shape.all_columns and not self.settings.connect_records:  # text, without dicts
            key, value = formatter.text(*event)
        else:
            key_dict, value_dict = formatter.event(*event)
            _project(shape, value_dict)
            if self.settings.connect_records:
                return b"", None, (key_dict, value_dict)
            key = None if key_dict is None else compact(key_dict)
            value = compact(value_dict)
        return (*self._debezium_bytes(key, value), None)

    def _debezium_bytes(self, key: str | None, value: str) -> tuple[bytes, bytes | None]:
        """An event's body, and its message key (``message_keys``), from their texts."""
        assert self._debezium is not None
        if self.settings.message_keys:
            return value.encode(), None if key is None else key.encode()
        if self._debezium.options.keys:  # json.dumps({"key": ..., "value": ...})'s text
            value = f'{{"key":{key or "null"},"value":{value}}}'
        return value.encode(), None

    def _truncate_body(
        self, window: RecordWindow, raw: wire.RawEvent
    ) -> tuple[bytes, Record | None]:
        fmt = self.settings.format
        if fmt == "debezium":
            assert self._debezium is not None
            formatter = self._debezium.formatter(
                raw.source, raw.schema_version or -1, window.codec_for
            )
            _, value = formatter.event("t", None, window.scn, window.ts_ms)
            if self.settings.connect_records:
                return b"", (None, value)
            return compact(value).encode(), None
        if fmt == "avro":
            return b"", None
        return json_line(window.scn, window.ts_ms, raw, "null", "null", "null").encode(), None


def _project(shape: TableShape, value: dict[str, Any]) -> None:
    """Drop the columns not selected from a Debezium envelope's images."""
    if shape.all_columns:
        return
    kept = {col.name for col in shape.schema.columns}
    body = value.get("payload", value)
    for side in ("before", "after"):
        if isinstance(body.get(side), dict):
            body[side] = {k: v for k, v in body[side].items() if k in kept}
