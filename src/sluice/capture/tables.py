"""Per table map: the columns' schema kinds, and a decoder of rows events into events."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from sluice.capture.binlog import constants as t
from sluice.capture.binlog.fastrow import build_fast_row
from sluice.capture.binlog.reader import Reader
from sluice.capture.binlog.tablemap import BinlogColumn, TableMap
from sluice.capture.binlog.values import ValueDecoder, make_decoder
from sluice.capture.metadata import ColumnInfo
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
    """``(kind, mysql_type)`` of a binlog column, refined by information_schema when it fits."""
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
        columns: list[Column] = []
        decoders: list[ValueDecoder] = []
        codecs: list[str | None] = []
        for col in table_map.columns:
            codec = _codec(col, collations)
            kind, mysql_type = column_kind(col, codec, info.get(col.name))
            columns.append(
                Column(
                    col.name,
                    kind,
                    col.nullable,
                    mysql_type,
                    col.precision,
                    col.scale if kind == "decimal" else 0,
                )
            )
            decoders.append(make_decoder(col, kind, codec))
            codecs.append(codec)
        primary_key = tuple(table_map.columns[i].name for i in table_map.primary_key)
        schema = registry.register(self.source, tuple(columns), primary_key)
        self.version = schema.version
        self.codec: RowCodec = registry.codec(self.source, schema.version)
        self._decoders = decoders
        self._count = len(decoders)
        self._null_bytes = (self._count + 7) // 8
        self._null_mask = (1 << self._count) - 1
        self._fast = build_fast_row(table_map.columns, [c.kind for c in columns], codecs, decoders)

    def _row(self, data: bytes, pos: int) -> tuple[list[Any], int]:
        end = pos + self._null_bytes
        # The server may set the unused high bits of the last byte; only real columns count.
        nulls = int.from_bytes(data[pos:end], "little") & self._null_mask
        if not nulls:
            return self._fast(data, end)
        pos = end
        values: list[Any] = []
        for i, decode in enumerate(self._decoders):
            if nulls >> i & 1:
                values.append(None)
            else:
                value, pos = decode(data, pos)
                values.append(value)
        return values, pos

    def events(self, event_type: int, body: bytes) -> Iterator[bytes]:
        """Encoded wire events for a rows event body (the table map already matched)."""
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
        data, pos, end = body, r.pos, len(body)
        while pos < end:
            first, pos = self._row(data, pos)
            if event_type in t.WRITE_ROWS:
                yield self._event("c", None, first)
            elif event_type in t.DELETE_ROWS:
                yield self._event("d", first, None)
            else:
                second, pos = self._row(data, pos)
                yield from self._update(first, second)

    def _update(self, before: list[Any], after: list[Any]) -> Iterator[bytes]:
        old_key = self.codec.key_text(before)
        if old_key is not None and old_key != self.codec.key_text(after):
            # A primary key change is a delete of the old key and an insert of the new one.
            yield self._event("d", before, None)
            yield self._event("c", None, after)
        else:
            yield self._event("u", before, after)

    def _event(self, op: Op, before: list[Any] | None, after: list[Any] | None) -> bytes:
        payload = self.codec.encode(before, after)
        row = after if after is not None else before
        assert row is not None
        key = self.codec.key_text(row)
        hashed = zlib.crc32(key.encode() if key is not None else payload)
        return wire.encode_event(wire.RawEvent(self.source, op, self.version, hashed, payload))


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
