"""Per table map: the columns' schema kinds, and a decoder of rows events into events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from zlib import crc32

from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.binlog.reader import Reader
from sluice.capture.mysql.binlog.tablemap import BinlogColumn, TableMap
from sluice.capture.mysql.binlog.values import make_decoder
from sluice.capture.mysql.fastrows import DELETE, UPDATE, WRITE, program, python_columns
from sluice.capture.mysql.metadata import ColumnInfo
from sluice.capture.mysql.transcode import ColumnPlan, build_transcoder
from sluice.core import wire
from sluice.core.event import Op
from sluice.errors import DecodeError
from sluice.schemas import Column, RowCodec, SchemaRegistry

_INT_NAMES = {
    t.T_TINY: "tinyint",
    t.T_SHORT: "smallint",
    t.T_INT24: "mediumint",
    t.T_LONG: "int",
    t.T_LONGLONG: "bigint",
}
_SIMPLE = {
    t.T_FLOAT: ("float", "float"),
    t.T_DOUBLE: ("double", "double"),
    t.T_YEAR: ("year", "year"),
    t.T_DATE: ("date", "date"),
    t.T_NEWDATE: ("date", "date"),
    t.T_TIMESTAMP: ("timestamp", "timestamp"),
    t.T_DATETIME: ("datetime", "datetime"),
    t.T_TIME: ("time", "time"),
    t.T_ENUM: ("enum", "enum"),
    t.T_SET: ("set", "set"),
    t.T_GEOMETRY: ("geometry", "geometry"),
}


def column_kind(col: BinlogColumn, codec: str | None, info: ColumnInfo | None) -> tuple[str, str]:
    """``(kind, source_type)`` of a binlog column, refined by information_schema when it fits."""
    ct = col.type
    if ct in _INT_NAMES:
        name = _INT_NAMES[ct] + (" unsigned" if col.unsigned else "")
        return ("uint64" if ct == t.T_LONGLONG and col.unsigned else "int"), name
    if ct in _SIMPLE:
        return _SIMPLE[ct]
    if ct == t.T_NEWDECIMAL:
        return "decimal", f"decimal({col.precision},{col.scale})"
    if ct in (t.T_DATETIME2, t.T_TIMESTAMP2, t.T_TIME2):
        kind = {t.T_DATETIME2: "datetime", t.T_TIMESTAMP2: "timestamp", t.T_TIME2: "time"}[ct]
        return kind, f"{kind}({col.scale})"
    if ct == t.T_BIT:
        return ("uint64" if col.bits > 63 else "bit"), f"bit({col.bits})"
    if (
        ct == t.T_STRING
        and codec is None
        and col.length == 16
        and info is not None
        and (info.data_type in ("uuid", "inet6"))
    ):
        return info.data_type, info.data_type
    if ct in t.BLOB_TYPES and codec is not None and info is not None and info.is_json:
        return "json", "json"
    names = {
        t.T_STRING: ("char", "binary"),
        t.T_VARCHAR: ("varchar", "varbinary"),
        t.T_VAR_STRING: ("varchar", "varbinary"),
    }
    text_name, bin_name = names.get(ct, ("text", "blob"))
    return ("bytes", bin_name) if codec is None else ("string", text_name)


class TableDecoder:
    """Decodes the rows events of one table map into encoded wire events."""

    def __init__(
        self,
        table_map: TableMap,
        registry: SchemaRegistry,
        collations: dict[int, str | None],
        info: dict[str, ColumnInfo],
    ) -> None:
        self.source = table_map.source
        plans: list[ColumnPlan] = []
        for col in table_map.columns:
            codec = _codec(col, collations)
            described = info.get(col.name)
            kind, source_type = column_kind(col, codec, described)
            column = Column(
                col.name,
                kind,
                col.nullable,
                source_type,
                col.precision,
                col.scale if kind == "decimal" else 0,
                default=None if described is None else described.default,
            )
            union = isinstance(column.avro_type(), list)
            plans.append(ColumnPlan(col, column, codec, make_decoder(col, kind, codec), union))
        primary_key = tuple(table_map.columns[i].name for i in table_map.primary_key)
        schema = registry.register(self.source, tuple(p.schema for p in plans), primary_key)
        self.version = schema.version
        self.codec: RowCodec = registry.codec(self.source, schema.version)
        self._decoders = [p.decoder for p in plans]
        self._count = len(plans)
        self._null_bytes = (self._count + 7) // 8
        self._null_mask = (1 << self._count) - 1
        self._source = self.source.encode()
        if len(self._source) > 255:
            raise DecodeError(f"source name too long: {self.source!r}", source=self.source)
        transcoder = build_transcoder(plans, table_map.primary_key, self._source, self.version)
        self._row, self._inserts = transcoder.row, transcoder.inserts
        # The compiled twin of the transcoder where it reads every column (fastrows.py);
        # else ``python_why`` says why this table keeps the Python path.
        choice = program(plans, table_map.primary_key, self._source, self.version)
        self._program, self.python_why = choice.program, choice.why
        # Columns the compiled path reads through their Python decoder (rare forms).
        self.python_columns = python_columns(plans, table_map.primary_key) if choice.program else []

    def _rows(self, event_type: int, body: bytes) -> tuple[int, int]:
        """Check a rows event's header; returns (images per row, offset of the first row)."""
        r = Reader(body, 8)
        if event_type in t.ROWS_V2:
            r.take(r.uint(2) - 2)
        count = r.lenenc()
        if count != self._count:
            raise DecodeError(
                f"rows event for {self.source} has {count} columns, its table map {self._count}",
                source=self.source,
            )
        images = 2 if event_type in t.UPDATE_ROWS else 1
        for _ in range(images):
            present = int.from_bytes(r.take(self._null_bytes), "little") & self._null_mask
            if present != self._null_mask:
                raise DecodeError(
                    f"partial row image for {self.source}: set binlog_row_image=FULL",
                    source=self.source,
                )
        return images, r.pos

    def events(self, event_type: int, body: bytes) -> list[bytes]:
        """Encoded wire events for a rows event body (the table map already matched); a row
        that cannot be decoded is a ``DecodeError`` naming the table, row and column."""
        try:
            return self._events(event_type, body)
        except DecodeError:
            raise
        except Exception as exc:  # the generated code met bytes it cannot read
            raise self._diagnose(event_type, body, exc) from exc

    def _diagnose(self, event_type: int, body: bytes, exc: Exception) -> DecodeError:
        """Find the failing column by decoding the event column by column (the slow path)."""
        images, pos = self._rows(event_type, body)
        row = 0
        while pos < len(body):
            for _ in range(images):
                nulls = int.from_bytes(body[pos : pos + self._null_bytes], "little")
                pos += self._null_bytes
                for i, decode in enumerate(self._decoders):
                    if nulls >> i & 1:
                        continue
                    try:
                        _value, pos = decode(body, pos)
                        problem = "the event ends inside it" if pos > len(body) else ""
                    except Exception as inner:
                        problem = f"{type(inner).__name__}: {inner}"
                    if problem:
                        col = self.codec.schema.columns[i]
                        return DecodeError(
                            f"cannot decode column {col.name!r} ({col.source_type}) of row "
                            f"{row} of {self.source}: {problem}",
                            source=self.source,
                        )
            row += 1
        return DecodeError(
            f"cannot encode a row of {self.source} (its columns decode one by one): "
            f"{type(exc).__name__}: {exc}",
            source=self.source,
        )

    def _events(self, event_type: int, body: bytes) -> list[bytes]:
        _, pos = self._rows(event_type, body)
        if self._program is not None:
            mode = (
                WRITE
                if event_type in t.WRITE_ROWS
                else DELETE
                if event_type in t.DELETE_ROWS
                else UPDATE
            )
            events: list[bytes] = self._program.events(mode, body, pos)
            return events
        return self.python_events(event_type, body, pos)

    def python_events(self, event_type: int, body: bytes, pos: int) -> list[bytes]:
        """The generated Python transcoder's events from ``pos`` (the compiled path's
        reference)."""
        row, end = self._row, len(body)
        if event_type in t.WRITE_ROWS:
            return self._inserts(body, pos, end)
        out: list[bytes] = []
        add = out.append
        if event_type in t.DELETE_ROWS:
            while pos < end:
                before, key, pos = row(body, pos)
                add(self._event(_OP_D, key, b"\x02" + before + b"\x00"))
        else:
            while pos < end:
                before, old_key, pos = row(body, pos)
                after, key, pos = row(body, pos)
                if old_key == key:
                    add(self._event(_OP_U, key, b"".join((b"\x02", before, b"\x02", after))))
                else:  # a primary key change: delete the old key, insert the new one
                    add(self._event(_OP_D, old_key, b"\x02" + before + b"\x00"))
                    add(self._event(_OP_C, key, b"\x00\x02" + after))
        return out

    def _event(self, op: int, key: bytes | None, payload: bytes) -> bytes:
        hashed = crc32(key) if key is not None else wire.KEYLESS_HASH
        size = wire.EVENT_HEADER_SIZE + len(self._source) + len(payload)
        head = wire.EVENT_HEADER.pack(size, hashed, op, len(self._source), self.version)
        return b"".join((head, self._source, payload))

    # -- the reference path: canonical values, then the schema's encoder ---------------------
    def reference_events(self, event_type: int, body: bytes) -> Iterator[bytes]:
        """What ``events`` must return, by the slow path (values first); for tests."""
        images, pos = self._rows(event_type, body)
        while pos < len(body):
            first, pos = self._values(body, pos)
            second = None
            if images == 2:
                second, pos = self._values(body, pos)
            if event_type in t.WRITE_ROWS:
                yield self._reference("c", None, first)
            elif event_type in t.DELETE_ROWS:
                yield self._reference("d", first, None)
            elif self.codec.key_text(first) != self.codec.key_text(second or []):
                yield self._reference("d", first, None)
                yield self._reference("c", None, second)
            else:
                yield self._reference("u", first, second)

    def _values(self, data: bytes, pos: int) -> tuple[list[Any], int]:
        end = pos + self._null_bytes
        nulls = int.from_bytes(data[pos:end], "little") & self._null_mask
        pos = end
        values: list[Any] = []
        for i, decode in enumerate(self._decoders):
            if nulls >> i & 1:
                values.append(None)
            else:
                value, pos = decode(data, pos)
                values.append(value)
        return values, pos

    def _reference(self, op: Op, before: list[Any] | None, after: list[Any] | None) -> bytes:
        payload = self.codec.encode(before, after)
        row = after if after is not None else before
        assert row is not None
        key = self.codec.key_text(row)
        hashed = crc32(key.encode()) if key is not None else wire.KEYLESS_HASH
        return wire.encode_event(wire.RawEvent(self.source, op, self.version, hashed, payload))


_OP_C, _OP_U, _OP_D = ord("c"), ord("u"), ord("d")


def _codec(col: BinlogColumn, collations: dict[int, str | None]) -> str | None:
    if col.type in (t.T_ENUM, t.T_SET):
        return collations.get(col.collation, "utf-8") if col.collation is not None else "utf-8"
    if col.collation is None or col.type not in (
        t.T_STRING,
        t.T_VARCHAR,
        t.T_VAR_STRING,
        *t.BLOB_TYPES,
    ):
        return None
    return collations.get(col.collation) if col.collation in collations else "utf-8"
