"""Events to Arrow record batches: the generic columns, or a table's own typed columns."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, Protocol

import pyarrow as pa

from sluice.core import wire
from sluice.core.pieces import Piece
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.columns import KIND
from sluice.schemas.debezium import DebeziumWindows

GENERIC_DDL = (
    "scn long, source string, op string, ts timestamp, key string, before string, "
    "after string, schema_version int"
)
RAW_DDL = ", seq int, key_hash long, payload binary"
_TS = pa.timestamp("us", tz="UTC")
GENERIC_ARROW = [
    ("scn", pa.int64()),
    ("source", pa.string()),
    ("op", pa.string()),
    ("ts", _TS),
    ("key", pa.string()),
    ("before", pa.string()),
    ("after", pa.string()),
    ("schema_version", pa.int32()),
]
RAW_ARROW = [("seq", pa.int32()), ("key_hash", pa.int64()), ("payload", pa.binary())]

CodecLookup = Callable[[str, int], RowCodec]


class GenericRows:
    """Accumulates events as the generic columns."""

    def __init__(
        self, include_raw: bool, op_override: str | None = None, images: bool = True
    ) -> None:
        fields = GENERIC_ARROW + (RAW_ARROW if include_raw else [])
        self.schema = pa.schema([pa.field(n, t) for n, t in fields])
        self.columns: list[list[Any]] = [[] for _ in fields]
        self.include_raw = include_raw
        self.op_override = op_override
        # Without images (the bootstrap log): before/after stay null, only the key is read
        # from the payload, which the log keeps whole.
        self.images = images

    def __len__(self) -> int:
        return len(self.columns[0])

    def add_window(self, record: bytes, codec_for: CodecLookup, first_seq: int = 0) -> None:
        header = wire.read_window_header(record)
        ts = dt.datetime.fromtimestamp(header.ts_ms / 1000, dt.UTC)
        for seq, raw in enumerate(wire.decode_events(record), first_seq):
            if raw.op == "t":
                key, before, after = "null", "null", "null"
            elif self.images:
                codec = codec_for(raw.source, raw.schema_version)
                key, before, after = codec.decode_text(raw.payload, canonical_key=True)
            else:
                codec = codec_for(raw.source, raw.schema_version)
                key, before, after = codec.payload_key(raw.payload), "null", "null"
            values: list[Any] = [
                header.scn,
                raw.source,
                self.op_override or raw.op,
                ts,
                None if key == "null" else key,
                None if before == "null" else before,
                None if after == "null" else after,
                raw.schema_version,
            ]
            if self.include_raw:
                values += [seq, raw.key_hash, raw.payload]
            for column, value in zip(self.columns, values, strict=True):
                column.append(value)

    def batch(self) -> pa.RecordBatch:
        arrays = [pa.array(c, type=f.type) for c, f in zip(self.columns, self.schema, strict=True)]
        self.columns = [[] for _ in self.columns]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


DEBEZIUM_DDL = "scn long, source string, op string, ts timestamp, key string, value string"
DEBEZIUM_ARROW = [
    ("scn", pa.int64()),
    ("source", pa.string()),
    ("op", pa.string()),
    ("ts", _TS),
    ("key", pa.string()),
    ("value", pa.string()),
]


class DebeziumRows:
    """Events as Debezium's key and value JSON (what a Kafka topic of Debezium holds)."""

    def __init__(self, windows: DebeziumWindows, op_override: str | None = None) -> None:
        self.windows = windows
        self.schema = pa.schema([pa.field(n, t) for n, t in DEBEZIUM_ARROW])
        self.columns: list[list[Any]] = [[] for _ in DEBEZIUM_ARROW]
        self.op_override = op_override

    def __len__(self) -> int:
        return len(self.columns[0])

    def add_window(self, record: bytes, codec_for: CodecLookup, first_seq: int = 0) -> None:
        header = wire.read_window_header(record)
        ts = dt.datetime.fromtimestamp(header.ts_ms / 1000, dt.UTC)
        events = self.windows.events(record, codec_for, self.op_override, with_keys=True)
        for raw, key, value in events:
            row = [
                header.scn,
                raw.source,
                self.op_override or raw.op,
                ts,
                None if key is None else json.dumps(key, ensure_ascii=False),
                json.dumps(value, ensure_ascii=False),
            ]
            for column, item in zip(self.columns, row, strict=True):
                column.append(item)

    def batch(self) -> pa.RecordBatch:
        arrays = [pa.array(c, type=f.type) for c, f in zip(self.columns, self.schema, strict=True)]
        self.columns = [[] for _ in self.columns]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def gap_markers(sources: list[str], after: int, until: int) -> pa.RecordBatch:
    """One marker row per source (op ``g``, at SCN ``until``, no key): the log lacks the
    windows ``(after, until]``. ``after`` holds ``{"gap_after": SCN}``."""
    rows = GenericRows(include_raw=True)
    ts = dt.datetime.now(dt.UTC)
    marker = json.dumps({"gap_after": after})
    for source in sources:
        values = [until, source, "g", ts, None, None, marker, 0, 0, 0, b""]
        for column, value in zip(rows.columns, values, strict=True):
            column.append(value)
    return rows.batch()


# -- typed rows ---------------------------------------------------------------------------------
# Spark type of each kind (decimal: from the column); Arrow type of each Spark type.
_ARROW: dict[str, pa.DataType] = {
    "long": pa.int64(),
    "double": pa.float64(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp_ntz": pa.timestamp("us"),
    "timestamp": _TS,
    "array<string>": pa.list_(pa.string()),
    "decimal(20,0)": pa.decimal128(20, 0),
    "boolean": pa.bool_(),
    "string": pa.string(),
}


def _spark_type(col: Column) -> str:
    spark = KIND[col.kind].spark
    if spark is None:  # a decimal wider than Spark's 38 digits stays exact as text
        return f"decimal({col.precision},{col.scale})" if col.precision <= 38 else "string"
    return spark


def arrow_type(col: Column) -> pa.DataType:
    spark = _spark_type(col)
    if spark.startswith("decimal(") and spark not in _ARROW:
        return pa.decimal128(col.precision, col.scale)
    return _ARROW[spark]


def typed_ddl(schema: TableSchema) -> str:
    parts = [f"`{c.name}` {_spark_type(c)}" for c in schema.columns]
    return ", ".join([*parts, "_scn long", "_op string", "_ts timestamp"])


# JSON value -> the Python value Arrow takes for that Spark type
_FROM_JSON: dict[str, Callable[[Any], Any]] = {
    "binary": base64.b64decode,
    "date": dt.date.fromisoformat,
    "timestamp_ntz": dt.datetime.fromisoformat,
    "timestamp": lambda v: dt.datetime.fromisoformat(v.rstrip("Z")).replace(tzinfo=dt.UTC),
    "double": float,  # "NaN", "Infinity", "-Infinity" in JSON: a double again
}


def _from_json(col: Column) -> Callable[[Any], Any]:
    spark = _spark_type(col)
    if spark.startswith("decimal("):
        return Decimal
    if spark == "string" and KIND[col.kind].json == "value":
        return lambda v: json.dumps(v, ensure_ascii=False)  # a JSON document, kept as text
    convert = _FROM_JSON.get(spark, _same)
    if col.kind in ("date", "datetime", "timestamp"):
        return _finite(convert)
    return convert


def _finite(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Spark's dates and timestamps hold no infinity: PostgreSQL's are null in typed rows."""

    def finite(value: Any) -> Any:
        return None if value in ("infinity", "-infinity") else convert(value)

    return finite


def _same(value: Any) -> Any:
    return value


class TypedRows:
    """Accumulates the row image (after, or before for deletes) as the table's own columns."""

    def __init__(self, schema: TableSchema, op_override: str | None = None) -> None:
        self.op_override = op_override
        self.columns_def = schema.columns
        fields = [pa.field(c.name, arrow_type(c)) for c in schema.columns]
        fields += [pa.field("_scn", pa.int64()), pa.field("_op", pa.string()), pa.field("_ts", _TS)]
        self.schema = pa.schema(fields)
        self.convert = [_from_json(c) for c in schema.columns]
        self.columns: list[list[Any]] = [[] for _ in fields]

    def __len__(self) -> int:
        return len(self.columns[0])

    def add_window(self, record: bytes, codec_for: CodecLookup, first_seq: int = 0) -> None:
        header = wire.read_window_header(record)
        ts = dt.datetime.fromtimestamp(header.ts_ms / 1000, dt.UTC)
        for raw in wire.decode_events(record):
            if raw.op == "t":
                before, after = None, None  # a row of nulls with _op "t"
            else:
                before, after = codec_for(raw.source, raw.schema_version).decode(raw.payload)
            row = after if after is not None else before or {}
            for i, col in enumerate(self.columns_def):
                value = row.get(col.name)
                self.columns[i].append(None if value is None else self.convert[i](value))
            n = len(self.columns_def)
            for j, value in enumerate((header.scn, self.op_override or raw.op, ts)):
                self.columns[n + j].append(value)

    def batch(self) -> pa.RecordBatch:
        arrays = [pa.array(c, type=f.type) for c, f in zip(self.columns, self.schema, strict=True)]
        self.columns = [[] for _ in self.columns]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


class Rows(Protocol):
    def __len__(self) -> int: ...
    def add_window(self, record: bytes, codec_for: CodecLookup, first_seq: int = 0) -> None:
        """A window's events (or a piece's: ``first_seq`` is its first event's number)."""

    def batch(self) -> pa.RecordBatch: ...


def chunks(
    rows: Rows,
    windows: Iterable[bytes | Piece],
    codec_for: CodecLookup,
    arrow: bool = True,
    size: int = 8192,
) -> Iterable[Any]:
    """Arrow record batches (or, with ``arrow=False``, plain tuples) of the windows' events
    (a big window's pieces each as a window, numbered on from its first event)."""
    size = getattr(rows, "batch_rows", size)
    for item in windows:
        if isinstance(item, Piece):
            rows.add_window(item.record, codec_for, item.first_seq)
        else:
            rows.add_window(item, codec_for)
        if len(rows) >= size:
            yield from _drain(rows, arrow)
    if len(rows):
        yield from _drain(rows, arrow)


def _drain(rows: Rows, arrow: bool) -> Iterable[Any]:
    if arrow or not isinstance(rows, GenericRows | TypedRows):
        batch = rows.batch()
        if arrow or not getattr(rows, "tuples", False):
            yield batch
        else:  # rows decoded per batch: the tuples from it
            yield from zip(*(c.to_pylist() for c in batch.columns), strict=True)
        return
    columns, rows.columns = rows.columns, [[] for _ in rows.columns]
    yield from zip(*columns, strict=True)
