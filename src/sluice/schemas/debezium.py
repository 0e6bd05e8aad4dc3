"""Events in Debezium's JSON value envelope (``format=debezium``), for consumers written for
Debezium: ``before``, ``after``, ``source``, ``op``, ``ts_ms``, ``transaction``, and keys as
Debezium's key struct. Values come from the payload's Avro decoded to canonical values
(``decoder.canonical_envelope``: Sluice's JSON mapping parses JSON columns and would lose their
text), converted by each connector's conventions (``debezium_values.py``).

The ``source`` block follows Debezium's connector that the source kind names in
``source_info(url)`` (``connector``); what depends on the source itself, constant fields and
the fields an SCN gives, the kind declares there too (``debezium``; see ``_Position``), so
nothing here knows how any kind makes its SCNs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.core import wire
from sluice.core.event import JsonWindow
from sluice.schemas.avro import TableSchema
from sluice.schemas.columns import Column, default_value
from sluice.schemas.debezium_text import ImagesText, ascii_json, compact, images_text
from sluice.schemas.debezium_values import (
    DebeziumOptions,
    Field,
    check_connector,
    column_fields,
)
from sluice.schemas.decoder import canonical_envelope

__all__ = ["DebeziumFormatter", "DebeziumOptions", "DebeziumWindows", "check_connector"]

VERSION = "sluice"  # source.version: which software made the event
Key = dict[str, Any] | None


class DebeziumFormatter:
    """Turns one table's events into Debezium value envelopes and keys. What does not depend
    on the event (converters, schemas, the key's columns) is made once, here."""

    def __init__(
        self, schema: TableSchema, source: dict[str, Any], options: DebeziumOptions
    ) -> None:
        check_connector(source)
        self.schema, self.source, self.options = schema, source, options
        self.connector = str(source["connector"])
        self.fields = column_fields(self.connector, schema.columns, options)
        self.images = canonical_envelope(schema.columns)
        namespace, _, table = schema.source.partition(".")
        self.namespace, self.table = namespace, table
        prefix = f"{options.name}.{schema.source}"
        index = {c.name: i for i, c in enumerate(schema.columns)}
        self.key_index = [(name, index[name]) for name in schema.primary_key]
        self.key_schema = self._struct(f"{prefix}.Key", schema.primary_key, False)
        self.envelope_schema = self._envelope_schema(prefix)
        described = source.get("debezium") or {}
        self._block = _block_template(self.connector, options.name, namespace, table, described)
        self._positions = [
            _Position.of(name, spec)
            for name, spec in (described.get("position") or {}).items()
            if name in self._block
        ]
        self._texts: ImagesText | None = None  # made on first use: Spark rows never need it
        self._frames: dict[tuple[str, int, int], tuple[str, str]] = {}
        self._open = '{"before":'
        self._key_open = self._close = ""
        if options.schemas:  # each event's schema block, as text once
            self._open = f'{{"schema":{compact(self.envelope_schema)},"payload":{{"before":'
            self._key_open, self._close = f'{{"schema":{compact(self.key_schema)},"payload":', "}"

    def event(
        self,
        op: str,
        payload: bytes | None,
        scn: int,
        ts_ms: int,
        transaction: dict[str, Any] | None = None,
        with_key: bool = False,
    ) -> tuple[Key, dict[str, Any]]:
        """``(key, value envelope)`` of one event (``payload`` None: a TRUNCATE, no images;
        the key only ``with_key``), the payload decoded once."""
        before = after = None
        if payload is not None:
            before, after = self.images(payload)
            if op == "r":
                before = None
        body = {
            "before": self._image(before),
            "after": self._image(after),
            "source": self.source_block(op, scn, ts_ms),
            "transaction": transaction,
            "op": op,
            "ts_ms": ts_ms,
            "ts_us": ts_ms * 1000,
            "ts_ns": ts_ms * 1_000_000,
        }
        value = (
            body
            if not self.options.schemas
            else {
                "schema": self.envelope_schema,
                "payload": body,
            }
        )
        row = after if after is not None else before
        return (self._key(row) if with_key else None), value

    def text(
        self,
        op: str,
        payload: bytes | None,
        scn: int,
        ts_ms: int,
        transaction: dict[str, Any] | None = None,
        with_key: bool = False,
    ) -> tuple[str | None, str]:
        """``event``'s key and value as the JSON text ``json.dumps(..., ensure_ascii=False,
        separators=(",", ":"))`` writes for them, made without the dicts: the images straight
        from the payload (``debezium_text.py``), the rest of the envelope per (op, SCN,
        time) once."""
        if payload is None:  # a truncate: no images (rare, the dicts' path)
            key_dict, value_dict = self.event(op, None, scn, ts_ms, transaction, with_key)
            return (None if key_dict is None else compact(key_dict)), compact(value_dict)
        before, after, key, _ = self._images_text()(payload, 0)
        return self._text(op, before, after, key, scn, ts_ms, transaction, with_key)

    def window_text(
        self, record: bytes, starts: Sequence[int], ops: Sequence[str], scn: int, ts_ms: int
    ) -> tuple[list[str | None], list[str], list[int]]:
        """``text`` (with keys) of this table's events in a window, their payloads read where
        they start in ``record`` (no truncates, no transaction blocks): the keys, the values,
        and where each payload ends."""
        images, render = self._images_text(), self._text
        keys: list[str | None] = []
        values, ends = [], []
        for start, op in zip(starts, ops, strict=True):
            before, after, key, end = images(record, start)
            key, value = render(op, before, after, key, scn, ts_ms, None, True)
            keys.append(key)
            values.append(value)
            ends.append(end)
        return keys, values, ends

    def _images_text(self) -> ImagesText:
        if self._texts is None:
            self._texts = images_text(
                self.schema.columns, self.fields, self.key_index, self.options.unavailable,
                f"{self.schema.source} v{self.schema.version}",
            )  # fmt: skip
        return self._texts

    def _text(
        self,
        op: str,
        before: str,
        after: str,
        key: str | None,
        scn: int,
        ts_ms: int,
        transaction: dict[str, Any] | None,
        with_key: bool,
    ) -> tuple[str | None, str]:
        """The envelope around an event's image texts, and its key's."""
        if op == "r":
            before = "null"
            if after == "null":
                key = None
        frame = self._frames.get((op, scn, ts_ms))
        if frame is None:
            frame = self._frame(op, scn, ts_ms)
        middle, close = frame
        tx = "null" if transaction is None else compact(transaction)
        value = f'{self._open}{before},"after":{after}{middle}{tx}{close}'
        if not with_key or key is None:
            return None, value
        return (f"{self._key_open}{key}{self._close}" if self._key_open else key), value

    def _frame(self, op: str, scn: int, ts_ms: int) -> tuple[str, str]:
        """The envelope's text after the images, around the transaction block."""
        if len(self._frames) >= 64:  # one window's ops at a time
            self._frames.clear()
        source = compact(self.source_block(op, scn, ts_ms))
        tail = {"op": op, "ts_ms": ts_ms, "ts_us": ts_ms * 1000, "ts_ns": ts_ms * 1_000_000}
        frame = (f',"source":{source},"transaction":', f",{compact(tail)[1:]}{self._close}")
        self._frames[(op, scn, ts_ms)] = frame
        return frame

    def _image(self, row: list[Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {
            col.name: None if value is None else field.convert(value)
            for col, field, value in zip(self.schema.columns, self.fields, row, strict=True)
        }

    def _key(self, row: list[Any] | None) -> Key:
        if row is None or not self.key_index:
            return None
        payload = {
            name: None if row[i] is None else self.fields[i].convert(row[i])
            for name, i in self.key_index
        }
        if not self.options.schemas:
            return payload
        return {"schema": self.key_schema, "payload": payload}

    def source_block(self, op: str, scn: int, ts_ms: int) -> dict[str, Any]:
        """The event's ``source`` block: the table's and the kind's fields made once
        (``_block``), the commit's time and the SCN's fields filled in, in Debezium's order."""
        block = dict(self._block)
        block["ts_ms"] = ts_ms
        block["snapshot"] = "true" if op == "r" else "false"
        block["ts_us"] = ts_ms * 1000
        block["ts_ns"] = ts_ms * 1_000_000
        for position in self._positions:
            block[position.field] = position.value(scn)
        return block

    def _struct(self, name: str, columns: Sequence[str], optional: bool) -> dict[str, Any]:
        by_name = {c.name: (c, f) for c, f in zip(self.schema.columns, self.fields, strict=True)}
        return {
            "type": "struct",
            "fields": [_column_schema(*by_name[column]) for column in columns],
            "optional": optional,
            "name": name,
        }

    def _envelope_schema(self, prefix: str) -> dict[str, Any]:
        value = self._struct(f"{prefix}.Value", [c.name for c in self.schema.columns], True)
        return {
            "type": "struct",
            "fields": [
                {**value, "field": "before"},
                {**value, "field": "after"},
                {
                    "type": "struct",
                    "fields": _SOURCE_FIELDS[self.connector],
                    "optional": False,
                    "name": f"io.debezium.connector.{self.connector}.Source",
                    "version": 1,
                    "field": "source",
                },
                {
                    "type": "struct",
                    "fields": _TX_FIELDS,
                    "optional": True,
                    "name": "event.block",
                    "version": 1,
                    "field": "transaction",
                },
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                {"type": "int64", "optional": True, "field": "ts_us"},
                {"type": "int64", "optional": True, "field": "ts_ns"},
            ],
            "optional": False,
            "name": f"{prefix}.Envelope",
            "version": 2,
        }


CodecFor = Callable[[str, int], Any]  # (source, version) -> a RowCodec (its ``schema``)


class DebeziumWindows:
    """One stream's formatters (a table version each) and its window records as Debezium's
    JSON: the relay's ``format=debezium``, ``sluice tail --format debezium``, Spark."""

    def __init__(self, source: dict[str, Any], options: DebeziumOptions) -> None:
        check_connector(source)
        self.source, self.options = source, options
        self._formatters: dict[tuple[str, int], DebeziumFormatter] = {}

    def formatter(self, source: str, version: int, codec_for: CodecFor) -> DebeziumFormatter:
        """``version`` -1: no columns (a truncate of a table whose schema is unknown); an
        unknown version raises (the client then fetches the schemas and decodes again)."""
        formatter = self._formatters.get((source, version))
        if formatter is None:
            schema = (
                TableSchema(source, 0, (), ()) if version < 0 else codec_for(source, version).schema
            )
            formatter = DebeziumFormatter(schema, self.source, self.options)
            self._formatters[(source, version)] = formatter
        return formatter

    def events(
        self,
        record: bytes,
        codec_for: CodecFor,
        op_override: str | None = None,
        with_keys: bool = False,
    ) -> Iterator[tuple[wire.RawEvent, Key, dict[str, Any]]]:
        """``(event, key, value envelope)`` for each event of a window record. With
        ``provide.transaction.metadata`` each envelope has Debezium's ``transaction`` block:
        the window is the transaction (its id is the SCN), orders count from 1 over the
        window and over its table's events."""
        header = wire.read_window_header(record)
        for raw, formatter, op, tx in self._walk(record, codec_for, op_override):
            payload = None if raw.op == "t" else raw.payload
            key, value = formatter.event(op, payload, header.scn, header.ts_ms, tx, with_keys)
            yield raw, key, value

    def _walk(
        self, record: bytes, codec_for: CodecFor, op_override: str | None = None
    ) -> Iterator[tuple[wire.RawEvent, DebeziumFormatter, str, dict[str, Any] | None]]:
        """``(event, its formatter, op, transaction block)`` of each event sent."""
        header = wire.read_window_header(record)
        per_table: dict[str, int] = {}
        skipped = self.options.skipped
        order = 0
        for raw in wire.decode_events(record):
            op = raw.op if raw.op == "t" else (op_override or raw.op)
            if op in skipped:  # skipped.operations (Debezium's default: t)
                continue
            order += 1
            per_table[raw.source] = per_table.get(raw.source, 0) + 1
            # a truncate's envelope schema lists the table's columns, as of its version
            formatter = self.formatter(raw.source, raw.schema_version or -1, codec_for)
            tx = None
            if self.options.transactions:
                tx = {
                    "id": str(header.scn),
                    "total_order": order,
                    "data_collection_order": per_table[raw.source],
                }
            yield raw, formatter, op, tx

    def lines(self, record: bytes, codec_for: CodecFor) -> Iterator[str]:
        """The record's events as JSON lines (with ``keys``: ``{"key", "value"}``), the text
        of ``events``' dicts made without them (``DebeziumFormatter.text``)."""
        header = wire.read_window_header(record)
        keys, tombstones = self.options.keys, self.options.keys and self.options.tombstones
        for raw, formatter, op, tx in self._walk(record, codec_for):
            payload = None if raw.op == "t" else raw.payload
            key, value = formatter.text(op, payload, header.scn, header.ts_ms, tx, keys)
            key = "null" if key is None else key
            yield f'{{"key":{key},"value":{value}}}' if keys else value
            if tombstones and raw.op == "d":  # tombstones.on.delete: the key, no value
                yield f'{{"key":{ascii_json(key)},"value":null}}'

    def __call__(self, record: bytes, codec_for: CodecFor) -> JsonWindow:
        """The client's window decoder (the signature of ``events.window_json``)."""
        header = wire.read_window_header(record)
        return JsonWindow(header.scn, header.ts_ms, tuple(self.lines(record, codec_for)))


def _column_schema(col: Column, field: Field) -> dict[str, Any]:
    """A column's Kafka Connect field, keys in Debezium's order: the source's own
    nullability, and its constant default as an event would carry it."""
    out: dict[str, Any] = {"type": field.schema["type"], "optional": col.declared_nullable}
    out.update((k, v) for k, v in field.schema.items() if k != "type")
    default = default_value(col)
    if default is not None:
        try:
            converted = field.convert(default)
        except (ValueError, ArithmeticError, TypeError):  # a literal Debezium would not read
            converted = None
        if converted is not None:
            out["default"] = converted
    out["field"] = col.name
    return out


_SNAPSHOT_VALUES = (
    "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)
_HEAD_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {
        "type": "string",
        "optional": True,
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": _SNAPSHOT_VALUES},
        "default": "false",
        "field": "snapshot",
    },
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "int64", "optional": True, "field": "ts_us"},
    {"type": "int64", "optional": True, "field": "ts_ns"},
]


def _fields(*spec: tuple[str, str, bool]) -> list[dict[str, Any]]:
    return [{"type": t, "optional": o, "field": f} for f, t, o in spec]


# Debezium's source block per Debezium connector (its format's vocabulary, not Sluice's source
# kinds: a kind names the connector whose format it speaks in ``source_info``): the fields, in
# Debezium's order, of both the block's schema and the block itself.
_SOURCE_FIELDS = {
    "postgresql": _HEAD_FIELDS
    + _fields(
        ("schema", "string", False),
        ("table", "string", False),
        ("txId", "int64", True),
        ("lsn", "int64", True),
        ("xmin", "int64", True),
        ("origin", "string", True),
        ("origin_lsn", "int64", True),
    ),
    "mysql": _HEAD_FIELDS
    + _fields(
        ("table", "string", True),
        ("server_id", "int64", False),
        ("gtid", "string", True),
        ("file", "string", False),
        ("pos", "int64", False),
        ("row", "int32", False),
        ("thread", "int64", True),
        ("query", "string", True),
    ),
}
# Which field of each connector's block holds the first part of a table's name (``DB.TABLE``):
# Debezium's MySQL connector calls it the database, its PostgreSQL connector the schema.
_NAMESPACE_FIELD = {"mysql": "db", "postgresql": "schema"}


def _block_template(
    connector: str, name: str, namespace: str, table: str, described: dict[str, Any]
) -> dict[str, Any]:
    """A table's source block before an event fills it in: every field of the connector's
    block (None unless known), its naming fields, and the constant ``fields`` the source
    kind declared (``source_info(url)["debezium"]``, e.g. MySQL's ``server_id``)."""
    block: dict[str, Any] = dict.fromkeys(f["field"] for f in _SOURCE_FIELDS[connector])
    block.update(version=VERSION, connector=connector, name=name, table=table)
    block[_NAMESPACE_FIELD[connector]] = namespace
    fields = described.get("fields") or {}
    block.update((k, v) for k, v in fields.items() if k in block)
    return block


@dataclass(frozen=True, slots=True)
class _Position:
    """A source-block field an event's SCN gives, as the source kind declared it
    (``source_info(url)["debezium"]["position"]``: field -> ``shift``, ``mask``, ``format``):
    ``(scn >> shift) & mask``, through ``format`` (``str.format``) when given. How an SCN is
    made is the kind's knowledge (MySQL: file number and offset; PostgreSQL: the LSN itself);
    this only follows the recipe."""

    field: str
    shift: int = 0
    mask: int | None = None
    format: str | None = None

    @classmethod
    def of(cls, field: str, spec: dict[str, Any]) -> _Position:
        mask, fmt = spec.get("mask"), spec.get("format")
        return cls(
            field,
            int(spec.get("shift", 0)),
            None if mask is None else int(mask),
            None if fmt is None else str(fmt),
        )

    def value(self, scn: int) -> int | str:
        number = scn >> self.shift
        if self.mask is not None:
            number &= self.mask
        return number if self.format is None else self.format.format(number)


_TX_FIELDS = [
    {"type": "string", "optional": False, "field": "id"},
    {"type": "int64", "optional": False, "field": "total_order"},
    {"type": "int64", "optional": False, "field": "data_collection_order"},
]
