"""Shaping: window records into the ``Change``s a target takes: column selection, the row
filter, routing templates, the event format (Sluice JSON, Debezium JSON, Avro) and stable ids.

What each table version needs (selected columns, decoders, the filter's converters) is made
once per (source, schema version) in ``_TableShape``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from sluice.client import RecordWindow
from sluice.core import wire
from sluice.core.checkpoint import Snapshot
from sluice.core.names import split_source
from sluice.errors import ConfigError
from sluice.schemas.arrow_decoder import Undecodable, arrow_decodable, never_undecodable
from sluice.schemas.avro import RowCodec, TableSchema
from sluice.schemas.columns import KIND
from sluice.schemas.debezium import DebeziumOptions, DebeziumWindows
from sluice.schemas.debezium_text import compact
from sluice.schemas.decoder import canonical_envelope
from sluice.schemas.events import json_line
from sluice.sink.columnar import Columnar, JsonBodies, TablePart
from sluice.sink.expr import Expression, parse_filter
from sluice.sink.target import Batch, Change

Format = Literal["json", "debezium", "avro"]
log = logging.getLogger(__name__)
_OP_NAMES = {"c": "insert", "u": "update", "d": "delete", "t": "TRUNCATE"}
CONTENT_TYPES = {"json": "application/json", "debezium": "application/json", "avro": "avro/binary"}
ROUTE_FIELDS = ("source", "db", "table", "op", "prefix")  # prefix: topic.prefix
# Snapshot rows: the bootstrap's row cursor holds the row number in its low 48 bits (the
# generation above); a snapshot window has at most 2**12 rows (the bootstrap sends 500).
SNAPSHOT_ROWS = (1 << 48) - 1
SNAPSHOT_INDEX_BITS = 12
# Windows of at least this many events get their JSON bodies from Arrow (below it, Arrow's
# fixed cost per window outweighs the row decoder's cost per event).
BULK_EVENTS = 64


def check_template(template: str, what: str = "route") -> str:
    """A routing template may use ``{source}``, ``{db}``, ``{table}``, ``{op}``."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ConfigError(f"{what} template {template!r} is malformed: {exc}") from None
    for name in names:
        if name not in ROUTE_FIELDS:
            raise ConfigError(
                f"{what} template {template!r} uses {{{name}}}; it may use "
                + ", ".join("{" + f + "}" for f in ROUTE_FIELDS)
            )
    return template


def origin_of(source_info: Mapping[str, Any]) -> str:
    """A short, stable name of the physical source (the relay's ``/sources`` block): part of
    every message id, so two sources' SCNs never collide in one target. How formats render
    the source (``debezium``) is not who it is, and is left out: origins stay as they were."""
    identity = {k: v for k, v in source_info.items() if k != "debezium"}
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class ShapeSettings:
    format: Format = "json"
    debezium: tuple[tuple[str, str], ...] = ()
    include_columns: tuple[str, ...] = ()  # DB.TABLE.COLUMN, shell-style patterns
    exclude_columns: tuple[str, ...] = ()
    filter: str | None = None  # for every source
    filters: tuple[tuple[str, str], ...] = ()  # (source, expression): that source only
    route: str = "{source}"
    origin: str = ""
    bodies: bool = True  # False: table targets take images, not formatted bodies
    keys: bool = True  # the canonical key text on each change (Redis's ``key`` field)
    message_keys: bool = False  # --format debezium: Debezium's key apart (``Change.key_body``)
    connect_records: bool = False  # Debezium's key and value as objects (``Change.record``)
    filtered_as_deletes: bool = False  # table targets: a row leaving the filter is deleted
    columnar: bool = False  # table targets that decode whole windows (``Batch.columns``)
    parsed: dict[str, Expression | None] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        check_template(self.route)
        if self.format == "avro" and (self.include_columns or self.exclude_columns):
            raise ConfigError(
                "--format avro sends the relay's Avro payloads as they are, so it cannot drop "
                "columns: remove --include-column/--exclude-column, or use --format json"
            )
        for pattern in (*self.include_columns, *self.exclude_columns):
            if pattern.count(".") < 2:
                raise ConfigError(f"column pattern {pattern!r} must be DB.TABLE.COLUMN (* allowed)")
        self.parsed["*"] = parse_filter(self.filter) if self.filter else None
        for source, text in self.filters:
            self.parsed[source] = parse_filter(text)

    def expression(self, source: str) -> Expression | None:
        return self.parsed.get(source, self.parsed.get("*"))


def _selected(schema: TableSchema, settings: ShapeSettings) -> list[int]:
    """Indexes of the columns kept: included (all when no include pattern names the table),
    minus excluded; key columns are always kept (targets need them to upsert and delete)."""

    def hit(patterns: tuple[str, ...], column: str) -> bool:
        name = f"{schema.source}.{column}"
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    table_included = [
        p
        for p in settings.include_columns
        if fnmatch.fnmatchcase(schema.source, p.rsplit(".", 1)[0])
    ]
    keep = []
    for i, col in enumerate(schema.columns):
        if col.name in schema.primary_key:
            keep.append(i)
        elif table_included and not hit(tuple(table_included), col.name):
            continue
        elif not hit(settings.exclude_columns, col.name):
            keep.append(i)
    return keep


def _filter_value(kind: str) -> Callable[[Any], Any]:
    """A canonical value as the filter sees it: the JSON mapping, but decimals stay exact."""
    if (KIND[kind].wire == "decimal" and kind != "uint64") or KIND[kind].wire == "double":
        return lambda v: v  # NaN stays a number here (JSON writes it as a string)
    return KIND[kind].canonical_json()


class _TableShape:
    """One table version: its selected columns, images and filter."""

    def __init__(
        self, codec: RowCodec, settings: ShapeSettings, debezium: DebeziumWindows | None
    ) -> None:
        full = codec.schema
        self.codec = codec
        self.keep = _selected(full, settings)
        self.all_columns = len(self.keep) == len(full.columns)
        columns = tuple(full.columns[i] for i in self.keep)
        self.schema = TableSchema(full.source, full.version, columns, full.primary_key)
        self.images = canonical_envelope(full.columns)
        self.expression = settings.expression(full.source)
        self.filter_columns: list[tuple[str, int, Callable[[Any], Any]]] = []
        if self.expression is not None:
            index = {col.name: i for i, col in enumerate(full.columns)}
            self.filter_columns = [
                (name, index[name], _filter_value(full.columns[index[name]].kind))
                for name in sorted(self.expression.names)
                if name in index  # excluded columns can still be filtered on
            ]
        self.json_values = [KIND[col.kind].canonical_json() for col in columns]
        db, table = split_source(full.source)  # the filter's @source @db @table, made once
        self.meta: dict[str, Any] = {"source": full.source, "db": db, "table": table}
        self.debezium = debezium
        self._json_bodies: JsonBodies | None = None
        # Images are decoded only where something reads them: tables, the filter, JSON
        # bodies without some columns (else the body comes straight from Avro).
        self.images_needed = (
            not settings.bodies
            or self.expression is not None
            or (settings.format == "json" and not self.all_columns)
        )

    def json_bodies(self) -> JsonBodies | None:
        """The Arrow builder of this version's JSON lines (None: a kind it cannot read)."""
        if self._json_bodies is None and arrow_decodable(self.codec.schema):
            self._json_bodies = JsonBodies(self.codec.schema)
        return self._json_bodies

    def project(self, image: list[Any] | None) -> list[Any] | None:
        if image is None or self.all_columns:
            return image
        return [image[i] for i in self.keep]

    def matches(self, image: list[Any] | None, meta: Mapping[str, Any]) -> bool:
        if self.expression is None:
            return True
        if image is None:
            return False
        row = {
            name: None if image[i] is None else convert(image[i])
            for name, i, convert in self.filter_columns
        }
        return self.expression.matches(row, meta)

    def json_row(self, image: list[Any] | None) -> dict[str, Any] | None:
        if image is None:
            return None
        return {
            col.name: None if value is None else convert(value)
            for col, convert, value in zip(
                self.schema.columns, self.json_values, image, strict=True
            )
        }


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
        self._tables: dict[tuple[str, int], _TableShape] = {}
        self._routes: dict[tuple[str, str], str] = {}
        self._debezium: DebeziumWindows | None = None
        self._json_bulk = settings.bodies and settings.format == "json"
        self._prefix = DebeziumOptions.parse(dict(settings.debezium)).name  # {prefix}
        self._record: tuple[Any, Any] | None = None  # connect_records: the event's, see _change
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
        if self._json_bulk and wire.read_window_header(window.record).n_events >= BULK_EVENTS:
            changes = self._json_changes(window)
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
        tables: list[tuple[str, int, TableSchema, list[bytes], list[str] | None]] = []
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
            tables.append((source, version, shape.schema, bodies, keys))
        first, tag = self._index_base(window)
        ident = f"{self.settings.origin}-{scn}-{tag}"
        if len(tables) == 1:  # the events in order are the table's
            source, version, schema, bodies, texts = tables[0]
            routes = {op: self.route(source, op) for op in "cudr"}
            return tuple(
                Change(scn, first + j, source, op, ts_ms, version, schema,  # type: ignore[arg-type]
                       None if texts is None else texts[j], None, None, routes[op],
                       f"{ident}{first + j}", bodies[j])
                for j, op in enumerate(spans.ops[0])
            )  # fmt: skip
        cursors = [0] * len(tables)
        changes = []
        for i, number in enumerate(spans.order):
            j = cursors[number]
            cursors[number] = j + 1
            source, version, schema, bodies, texts = tables[number]
            op, index = spans.ops[number][j], first + i
            changes.append(
                Change(scn, index, source, op, ts_ms, version, schema,  # type: ignore[arg-type]
                       None if texts is None else texts[j], None, None, self.route(source, op),
                       f"{ident}{index}", bodies[j])
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

    def _columnar_route(self, shape: _TableShape) -> str | None:
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
                source=source, db=db, table=table, op=op, prefix=self._prefix
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

    def _table(self, window: RecordWindow, source: str, version: int) -> _TableShape:
        shape = self._tables.get((source, version))
        if shape is None:
            codec = window.codec_for(source, version)
            shape = self._tables[(source, version)] = _TableShape(
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
            body = self._truncate_body(window, raw) if settings.bodies else b""
            record, self._record = self._record, None
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
        body, key_body = b"", None
        if settings.bodies:
            body, key_body = self._body(window, raw, shape, key, before, after)
        record, self._record = self._record, None
        return Change(
            scn, index, raw.source, op, window.ts_ms, raw.schema_version, shape.schema, key,
            before, after, self.route(raw.source, op), ident, body, key_body, record,
        )  # fmt: skip

    def _body(
        self,
        window: RecordWindow,
        raw: wire.RawEvent,
        shape: _TableShape,
        key: str | None,
        before: list[Any] | None,
        after: list[Any] | None,
    ) -> tuple[bytes, bytes | None]:
        """The event's body, and its message key where the format has its own
        (``message_keys``: Debezium's key struct)."""
        fmt = self.settings.format
        if fmt == "avro":
            return raw.payload, None
        if fmt == "debezium":
            return self._debezium_body(window, raw, shape)
        if shape.all_columns:  # the relay's own JSON text, straight from Avro
            key_text, before_text, after_text = shape.codec.decode_text(raw.payload)
            line = json_line(window.scn, window.ts_ms, raw, key_text, before_text, after_text)
            return line.encode(), None
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
        return json.dumps(event, ensure_ascii=False).encode(), None

    def _debezium_body(
        self, window: RecordWindow, raw: wire.RawEvent, shape: _TableShape
    ) -> tuple[bytes, bytes | None]:
        assert self._debezium is not None
        formatter = self._debezium.formatter(raw.source, raw.schema_version, window.codec_for)
        # (a primary-key change is a delete and an insert from the capture on, as Debezium
        # sends it: no update here changes its key)
        if shape.all_columns and not self.settings.connect_records:  # text, without dicts
            key, value = formatter.text(raw.op, raw.payload, window.scn, window.ts_ms, None, True)
        else:
            key_dict, value_dict = formatter.event(
                raw.op, raw.payload, window.scn, window.ts_ms, None, True
            )
            _project(shape, value_dict)
            if self.settings.connect_records:
                self._record = (key_dict, value_dict)
                return b"", None
            key = None if key_dict is None else compact(key_dict)
            value = compact(value_dict)
        if self.settings.message_keys:
            return value.encode(), None if key is None else key.encode()
        if self._debezium.options.keys:  # json.dumps({"key": ..., "value": ...})'s text
            value = f'{{"key":{key or "null"},"value":{value}}}'
        return value.encode(), None

    def _truncate_body(self, window: RecordWindow, raw: wire.RawEvent) -> bytes:
        fmt = self.settings.format
        if fmt == "debezium":
            assert self._debezium is not None
            formatter = self._debezium.formatter(
                raw.source, raw.schema_version or -1, window.codec_for
            )
            _, value = formatter.event("t", None, window.scn, window.ts_ms)
            if self.settings.connect_records:
                self._record = (None, value)
                return b""
            return compact(value).encode()
        if fmt == "avro":
            return b""
        return json_line(window.scn, window.ts_ms, raw, "null", "null", "null").encode()


def _project(shape: _TableShape, value: dict[str, Any]) -> None:
    """Drop the columns not selected from a Debezium envelope's images."""
    if shape.all_columns:
        return
    kept = {col.name for col in shape.schema.columns}
    body = value.get("payload", value)
    for side in ("before", "after"):
        if isinstance(body.get(side), dict):
            body[side] = {k: v for k, v in body[side].items() if k in kept}
