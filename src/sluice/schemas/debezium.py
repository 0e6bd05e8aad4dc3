"""Events in Debezium's JSON value envelope (``format=debezium``), for consumers written for
Debezium: ``before``, ``after``, ``source``, ``op``, ``ts_ms``, ``transaction``, with
Debezium's value conventions per connector, checked against Debezium itself
(``interop/``, ``tests/golden/debezium/``).

Values come from the payload's Avro, decoded to canonical values here (not from Sluice's JSON
mapping, which parses JSON columns and so loses their text). What a connector's conventions
need beyond a column's kind comes from its source type name (``numeric(10,2)``,
``time(3) without time zone``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sluice.core import wire
from sluice.core.event import JsonWindow
from sluice.errors import ConfigError
from sluice.schemas.avro import TableSchema
from sluice.schemas.columns import KIND, Column
from sluice.schemas.decoder import read_long

VERSION = "sluice"  # source.version: which software made the event
_DOUBLE = struct.Struct("<d")
_PRECISION = re.compile(r"\((\d+)(?:\s*,\s*(-?\d+))?\)")
_EPOCH = dt.datetime(1970, 1, 1)
_DAYS_PER_MONTH = 365.25 / 12  # Debezium's MicroDuration month
_ISO_DURATION = re.compile(
    r"^(?P<sign>-)?P(?:(?P<y>-?\d+)Y)?(?:(?P<mo>-?\d+)M)?(?:(?P<w>-?\d+)W)?(?:(?P<d>-?\d+)D)?"
    r"(?:T(?:(?P<h>-?\d+)H)?(?:(?P<mi>-?\d+)M)?(?:(?P<s>-?\d+(?:\.\d+)?)S)?)?$"
)
MODES = {
    "decimal.handling.mode": ("precise", "string", "double"),
    "time.precision.mode": ("adaptive", "adaptive_time_microseconds", "connect"),
    "binary.handling.mode": ("bytes", "base64", "base64-url-safe", "hex"),
    "schemas.enable": ("false", "true"),
    "bigint.unsigned.handling.mode": ("long", "precise"),
    "provide.transaction.metadata": ("false", "true"),
    "keys": ("false", "true"),  # Sluice's: each line {"key", "value"}, as a topic holds them
}


@dataclass(frozen=True, slots=True)
class DebeziumOptions:
    """The Debezium settings users commonly change; defaults are Debezium's."""

    decimal_mode: str = "precise"
    time_precision: str = "adaptive"
    binary_mode: str = "bytes"
    schemas: bool = False
    name: str = "sluice"  # Debezium's topic.prefix: the source block's ``name``
    unsigned_precise: bool = False  # bigint.unsigned.handling.mode=precise
    transactions: bool = False  # provide.transaction.metadata=true: the transaction block
    keys: bool = False  # JSON lines of {"key": Debezium's key, "value": the envelope}

    @classmethod
    def parse(cls, options: dict[str, str], name: str = "sluice") -> DebeziumOptions:
        """From Debezium's own option names; an unknown value is a ``ConfigError``."""
        for key, value in options.items():
            allowed = MODES.get(key)
            if allowed is not None and value not in allowed:
                raise ConfigError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")
        return cls(
            decimal_mode=options.get("decimal.handling.mode", "precise"),
            time_precision=options.get("time.precision.mode", "adaptive"),
            binary_mode=options.get("binary.handling.mode", "bytes"),
            schemas=options.get("schemas.enable", "false") == "true",
            name=options.get("topic.prefix", name),
            unsigned_precise=options.get("bigint.unsigned.handling.mode") == "precise",
            transactions=options.get("provide.transaction.metadata") == "true",
            keys=options.get("keys") == "true",
        )


# -- canonical values out of a payload ----------------------------------------------------------
def _read_row(columns: Sequence[Column], data: bytes, pos: int) -> tuple[list[Any], int]:
    row: list[Any] = []
    for col in columns:
        kind = KIND[col.kind]
        if col.nullable or kind.zero_dates:
            branch, pos = read_long(data, pos)
            if branch == 0:
                row.append(None)
                continue
        wire = kind.wire
        value: Any
        if wire == "long":
            value, pos = read_long(data, pos)
        elif wire == "double":
            (value,) = _DOUBLE.unpack_from(data, pos)
            pos += 8
        elif wire in ("string", "bytes", "decimal"):
            size, pos = read_long(data, pos)
            raw = data[pos : pos + size]
            pos += size
            if wire == "string":
                value = raw.decode()
            elif wire == "bytes":
                value = bytes(raw)
            else:
                scale = col.scale if kind.avro is None else 0
                value = Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
        else:  # strings: an Avro array of strings
            members: list[str] = []
            count, pos = read_long(data, pos)
            while count:
                if count < 0:
                    count = -count
                    _size, pos = read_long(data, pos)
                for _ in range(count):
                    size, pos = read_long(data, pos)
                    members.append(data[pos : pos + size].decode())
                    pos += size
                count, pos = read_long(data, pos)
            value = members
        row.append(value)
    return row, pos


def canonical_images(
    columns: Sequence[Column], payload: bytes
) -> tuple[list[Any] | None, list[Any] | None]:
    """``(before, after)`` of a payload as canonical values in column order."""
    images: list[list[Any] | None] = []
    pos = 0
    for _ in range(2):
        branch, pos = read_long(payload, pos)
        if branch == 0:
            images.append(None)
        else:
            row, pos = _read_row(columns, payload, pos)
            images.append(row)
    return images[0], images[1]


# -- Debezium's conventions -------------------------------------------------------------------
def _precision(source_type: str) -> tuple[int | None, int | None]:
    match = _PRECISION.search(source_type)
    if match is None:
        return None, None
    return int(match.group(1)), (int(match.group(2)) if match.group(2) is not None else None)


def _unscaled_bytes(unscaled: int) -> bytes:
    """Java's ``BigInteger.toByteArray()``: minimal two's complement, big-endian."""
    return unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)


@dataclass(frozen=True, slots=True)
class _Field:
    """One column's Debezium value converter and its Kafka Connect schema."""

    convert: Callable[[Any], Any]
    schema: dict[str, Any]


class _Conventions:
    def __init__(self, options: DebeziumOptions) -> None:
        self.options = options

    def binary(self, raw: bytes) -> Any:
        mode = self.options.binary_mode
        if mode == "hex":
            return raw.hex()
        if mode == "base64-url-safe":
            return base64.urlsafe_b64encode(raw).decode()
        return base64.b64encode(raw).decode()  # bytes in JSON, and base64, are both base64

    def binary_schema(self) -> dict[str, Any]:
        return {"type": "bytes" if self.options.binary_mode == "bytes" else "string"}

    def decimal(self, scale: int | None, precision: int | None) -> _Field:
        mode = self.options.decimal_mode
        if mode == "string":
            return _Field(lambda d: format(Decimal(d), "f"), {"type": "string"})
        if mode == "double":
            return _Field(lambda d: float(Decimal(d)), {"type": "double"})
        if scale is None:  # numeric without a scale: io.debezium.data.VariableScaleDecimal
            return _Field(_variable_scale, _VARIABLE_SCALE)
        step = Decimal(1).scaleb(-scale)

        def precise(value: Any) -> str:
            unscaled = int(Decimal(value).quantize(step).scaleb(scale))
            return base64.b64encode(_unscaled_bytes(unscaled)).decode()

        params = {"scale": str(scale)}
        if precision is not None:
            params["connect.decimal.precision"] = str(precision)
        return _Field(precise, _named("bytes", "org.apache.kafka.connect.data.Decimal", params))

    def micros_time(self, precision: int | None, always_micro: bool = False) -> _Field:
        """A time of day (microseconds) by ``time.precision.mode`` (MySQL's default mode,
        ``adaptive_time_microseconds``, keeps every TIME in microseconds)."""
        mode = self.options.time_precision
        if mode == "connect":
            return _Field(lambda us: us // 1000, _connect("int32", "Time"))
        micro = always_micro or mode == "adaptive_time_microseconds"
        if not micro and precision is not None and precision <= 3:
            return _Field(lambda us: us // 1000, _named("int32", "io.debezium.time.Time"))
        return _Field(lambda us: us, _named("int64", "io.debezium.time.MicroTime"))

    def micros_timestamp(self, precision: int | None) -> _Field:
        if self.options.time_precision == "connect":
            return _Field(lambda us: us // 1000, _connect("int64", "Timestamp"))
        if precision is not None and precision <= 3:
            return _Field(lambda us: us // 1000, _named("int64", "io.debezium.time.Timestamp"))
        return _Field(lambda us: us, _named("int64", "io.debezium.time.MicroTimestamp"))

    def date(self) -> _Field:
        if self.options.time_precision == "connect":
            return _Field(int, _connect("int32", "Date"))
        return _Field(int, _named("int32", "io.debezium.time.Date"))


def _connect(kind: str, name: str) -> dict[str, Any]:
    return {"type": kind, "name": f"org.apache.kafka.connect.data.{name}", "version": 1}


def _named(kind: str, name: str, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "name": name, "version": 1}
    if parameters:
        out["parameters"] = parameters
    return out


_VARIABLE_SCALE = {
    "type": "struct",
    "fields": [
        {"type": "int32", "optional": False, "field": "scale"},
        {"type": "bytes", "optional": False, "field": "value"},
    ],
    "name": "io.debezium.data.VariableScaleDecimal",
    "version": 1,
    "doc": "Variable scaled decimal",
}


def _variable_scale(value: Any) -> dict[str, Any]:
    number = Decimal(value)
    exponent = int(number.as_tuple().exponent)
    scale = max(0, -exponent)
    unscaled = int(number.scaleb(scale))
    return {"scale": scale, "value": base64.b64encode(_unscaled_bytes(unscaled)).decode()}


def _zoned_timestamp(precision: int | None) -> Callable[[int], str]:
    digits = 6 if precision is None else precision

    def convert(micros: int) -> str:
        stamp = _EPOCH + dt.timedelta(microseconds=micros)
        text = stamp.strftime("%Y-%m-%dT%H:%M:%S")
        if digits:
            text += "." + f"{stamp.microsecond:06d}"[:digits]
        return text + "Z"

    return convert


def _zoned_time(text: str) -> str:
    """``10:11:12+02`` -> ``08:11:12Z`` (Debezium's ZonedTime: the time in UTC)."""
    if re.search(r"[+-]\d\d$", text):
        text += ":00"  # PostgreSQL writes +02; Python wants +02:00
    clock = dt.time.fromisoformat(text)
    stamp = dt.datetime.combine(dt.date(2000, 1, 1), clock)
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(dt.UTC)
    out = stamp.strftime("%H:%M:%S")
    if stamp.microsecond:
        out += "." + f"{stamp.microsecond:06d}".rstrip("0")
    return out + "Z"


def _micro_duration(text: str) -> int:
    """An ISO 8601 interval (``P1Y2M3DT4H5M6.5S``) in microseconds, months as 30.4375 days."""
    match = _ISO_DURATION.match(text)
    if match is None:
        raise ValueError(f"not an ISO 8601 interval: {text!r}")
    g = {k: v or "0" for k, v in match.groupdict().items()}
    months = int(g["y"]) * 12 + int(g["mo"])
    days = int(g["w"]) * 7 + int(g["d"])
    seconds = Decimal(g["h"]) * 3600 + Decimal(g["mi"]) * 60 + Decimal(g["s"])
    micros = round(Decimal(months) * Decimal(str(_DAYS_PER_MONTH)) * 86_400_000_000) + int(
        (Decimal(days) * 86400 + seconds) * 1_000_000
    )
    return -micros if g["sign"] == "-" else micros


def _money(text: str) -> Decimal:
    negative = text.startswith("-") or (text.startswith("(") and text.endswith(")"))
    digits = re.sub(r"[^0-9.]", "", text)
    value = Decimal(digits)
    return -value if negative else value


def _bits(text: str) -> str:
    value = int(text, 2) if text else 0
    return base64.b64encode(value.to_bytes((value.bit_length() + 7) // 8, "little")).decode()


_PG_INTS = {"smallint": "int16", "integer": "int32", "bigint": "int64", "oid": "int64"}


def _pg_field(col: Column, c: _Conventions) -> _Field:
    """PostgreSQL connector conventions for one column."""
    base = col.source_type.split("(")[0].strip()
    precision, scale = _precision(col.source_type)
    kind = col.kind
    if kind == "int":
        return _Field(int, {"type": _PG_INTS.get(base, "int64")})
    if kind == "bool":
        return _Field(bool, {"type": "boolean"})
    if kind == "float":
        return _Field(float, {"type": "float"})
    if kind == "double":
        return _Field(float, {"type": "double"})
    if kind == "bytes":
        return _Field(c.binary, c.binary_schema())
    if kind == "date":
        return c.date()
    if kind == "time":
        return c.micros_time(precision)
    if kind == "datetime":
        return c.micros_timestamp(precision)
    if kind == "timestamp":
        return _Field(
            _zoned_timestamp(precision), _named("string", "io.debezium.time.ZonedTimestamp")
        )
    if kind == "uuid":
        return _Field(str, _named("string", "io.debezium.data.Uuid"))
    if kind == "json" and base in ("json", "jsonb"):
        return _Field(str, _named("string", "io.debezium.data.Json"))
    if kind == "json" and col.source_type.endswith("[]"):
        return _array_field(col, c)
    if base in {"numeric", "decimal"}:
        return c.decimal(scale, precision)
    if base == "money":
        field = c.decimal(2, None)
        return _Field(lambda text: field.convert(_money(text)), field.schema)
    if base == "interval":
        return _Field(_micro_duration, _named("int64", "io.debezium.time.MicroDuration"))
    if base.startswith("time with time zone") or base == "timetz":
        return _Field(_zoned_time, _named("string", "io.debezium.time.ZonedTime"))
    if base.startswith("bit"):
        length = str(precision) if precision is not None else "2147483647"
        return _Field(_bits, _named("bytes", "io.debezium.data.Bits", {"length": length}))
    return _Field(str, {"type": "string"})


def _array_field(col: Column, c: _Conventions) -> _Field:
    element = Column(col.name, "string", True, col.source_type[:-2])
    inner = col.source_type[:-2]
    if inner in _PG_INTS:
        items: dict[str, Any] = {"type": _PG_INTS[inner], "optional": True}
        return _Field(json.loads, {"type": "array", "items": items})
    field = _pg_field(element, c)
    items = {**field.schema, "optional": True}

    def convert(text: str) -> list[Any]:
        return [None if v is None else field.convert(v) for v in json.loads(text)]

    return _Field(convert, {"type": "array", "items": items})


_MYSQL_INTS = {
    "tinyint": "int16",
    "tinyint unsigned": "int16",
    "smallint": "int16",
    "smallint unsigned": "int32",
    "mediumint": "int32",
    "mediumint unsigned": "int32",
    "int": "int32",
    "int unsigned": "int64",
    "bigint": "int64",
}


def _signed64(value: Any) -> int:
    """BIGINT UNSIGNED as Debezium's default ``bigint.unsigned.handling.mode=long`` gives it:
    the same 64 bits read as a signed long (values above 2^63-1 turn negative)."""
    number = int(value)
    return number - (1 << 64) if number >= 1 << 63 else number


def _mysql_bits(size: int) -> Callable[[int], str]:
    def convert(value: int) -> str:
        return base64.b64encode(int(value).to_bytes(size, "little")).decode()

    return convert


def _mysql_field(col: Column, c: _Conventions) -> _Field:
    """MySQL connector conventions (as on MariaDB) for one column."""
    precision, _scale = _precision(col.source_type)
    kind, base = col.kind, col.source_type.split("(")[0].strip()
    if kind == "int":
        return _Field(int, {"type": _MYSQL_INTS.get(col.source_type, "int64")})
    if kind == "uint64" and base.startswith("bit"):
        return _Field(_mysql_bits(8), _named("bytes", "io.debezium.data.Bits", {"length": "64"}))
    if kind == "uint64":
        if c.options.unsigned_precise:
            return c.decimal(0, 20)
        return _Field(_signed64, {"type": "int64"})
    if kind == "bit":
        bits = precision or 1
        if bits == 1:
            return _Field(bool, {"type": "boolean"})
        size = (bits + 7) // 8
        return _Field(
            _mysql_bits(size), _named("bytes", "io.debezium.data.Bits", {"length": str(bits)})
        )
    if kind == "year":
        return _Field(int, _named("int32", "io.debezium.time.Year"))
    if kind == "decimal":
        return c.decimal(col.scale, col.precision or None)
    if kind == "float":
        return _Field(float, {"type": "float"})
    if kind == "double":
        return _Field(float, {"type": "double"})
    if kind in ("bytes", "geometry"):
        return _Field(c.binary, c.binary_schema())
    if kind == "date":
        return c.date()
    if kind == "time":
        return c.micros_time(precision, always_micro=True)
    if kind == "datetime":
        return c.micros_timestamp(precision or 0)
    if kind == "timestamp":
        return _Field(
            _zoned_timestamp(precision or 0), _named("string", "io.debezium.time.ZonedTimestamp")
        )
    if kind == "enum":
        return _Field(str, _named("string", "io.debezium.data.Enum"))
    if kind == "set":
        return _Field(",".join, _named("string", "io.debezium.data.EnumSet"))
    return _Field(str, {"type": "string"})  # strings, JSON (MariaDB's is text), UUID, INET6


_CONNECTORS: dict[str, Callable[[Column, _Conventions], _Field]] = {
    "postgresql": _pg_field,
    "mysql": _mysql_field,
}


def check_connector(source: dict[str, Any]) -> None:
    """Refuse a source whose Debezium conventions Sluice does not speak yet."""
    connector = str(source.get("connector", ""))
    if connector not in _CONNECTORS:
        raise ConfigError(
            f"format=debezium is not available for {connector or 'this'} sources yet: it "
            "speaks Debezium's PostgreSQL connector (use format=json)"
        )


class DebeziumFormatter:
    """Turns one table's events into Debezium value envelopes (and keys)."""

    def __init__(
        self, schema: TableSchema, source: dict[str, Any], options: DebeziumOptions
    ) -> None:
        check_connector(source)
        field_of = _CONNECTORS[str(source["connector"])]
        self.schema, self.source, self.options = schema, source, options
        conventions = _Conventions(options)
        self.fields = [field_of(col, conventions) for col in schema.columns]
        namespace, _, table = schema.source.partition(".")
        self.namespace, self.table = namespace, table
        self.prefix = f"{options.name}.{schema.source}"

    def _image(self, row: list[Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {
            col.name: None if value is None else field.convert(value)
            for col, field, value in zip(self.schema.columns, self.fields, row, strict=True)
        }

    def key(self, row: list[Any]) -> dict[str, Any]:
        index = {c.name: i for i, c in enumerate(self.schema.columns)}
        payload = {
            name: self.fields[index[name]].convert(row[index[name]])
            if row[index[name]] is not None
            else None
            for name in self.schema.primary_key
        }
        if not self.options.schemas:
            return payload
        return {
            "schema": self._struct(f"{self.prefix}.Key", self.schema.primary_key, False),
            "payload": payload,
        }

    def key_of(self, payload: bytes) -> dict[str, Any] | None:
        """The Debezium key of a payload's row (the after image, else the before)."""
        if not self.schema.primary_key:
            return None
        before, after = canonical_images(self.schema.columns, payload)
        row = after if after is not None else before
        return None if row is None else self.key(row)

    def value(
        self,
        op: str,
        payload: bytes,
        scn: int,
        ts_ms: int,
        last_snapshot: bool = False,
        transaction: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        before, after = canonical_images(self.schema.columns, payload)
        if op == "r":
            before = None
        body = {
            "before": self._image(before),
            "after": self._image(after),
            "source": self._source(op, scn, ts_ms, last_snapshot),
            "transaction": transaction,
            "op": op,
            "ts_ms": ts_ms,
            "ts_us": ts_ms * 1000,
            "ts_ns": ts_ms * 1_000_000,
        }
        if not self.options.schemas:
            return body
        return {"schema": self._envelope_schema(), "payload": body}

    def truncate(
        self, scn: int, ts_ms: int, transaction: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A TRUNCATE, as Debezium's ``t`` event: no images."""
        body = {
            "before": None,
            "after": None,
            "source": self._source("t", scn, ts_ms, False),
            "transaction": transaction,
            "op": "t",
            "ts_ms": ts_ms,
            "ts_us": ts_ms * 1000,
            "ts_ns": ts_ms * 1_000_000,
        }
        if not self.options.schemas:
            return body
        return {"schema": self._envelope_schema(), "payload": body}

    def _source(self, op: str, scn: int, ts_ms: int, last: bool) -> dict[str, Any]:
        snapshot = ("last" if last else "true") if op == "r" else "false"
        head = {
            "version": VERSION,
            "connector": self.source["connector"],
            "name": self.options.name,
            "ts_ms": ts_ms,
            "snapshot": snapshot,
        }
        times = {"sequence": None, "ts_us": ts_ms * 1000, "ts_ns": ts_ms * 1_000_000}
        if self.source["connector"] == "mysql":
            base = self.source.get("log_base", "binlog")
            return {
                **head,
                "db": self.namespace,
                **times,
                "table": self.table,
                "server_id": int(self.source.get("server_id", 0)),
                "gtid": None,
                "file": f"{base}.{scn >> 32:06d}",
                "pos": scn & 0xFFFFFFFF,
                "row": 0,
                "thread": None,
                "query": None,
            }
        return {
            **head,
            "db": self.source.get("db", ""),
            **times,
            "schema": self.namespace,
            "table": self.table,
            "txId": None,
            "lsn": scn,
            "xmin": None,
        }

    def _struct(self, name: str, columns: Sequence[str], optional: bool) -> dict[str, Any]:
        by_name = {c.name: (c, f) for c, f in zip(self.schema.columns, self.fields, strict=True)}
        fields = []
        for column in columns:
            col, field = by_name[column]
            fields.append({**field.schema, "optional": col.nullable, "field": column})
        return {"type": "struct", "fields": fields, "optional": optional, "name": name}

    def _envelope_schema(self) -> dict[str, Any]:
        value = self._struct(f"{self.prefix}.Value", [c.name for c in self.schema.columns], True)
        return {
            "type": "struct",
            "fields": [
                {**value, "field": "before"},
                {**value, "field": "after"},
                {
                    "type": "struct",
                    "fields": _SOURCE_FIELDS[self.source["connector"]],
                    "optional": False,
                    "name": f"io.debezium.connector.{self.source['connector']}.Source",
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
            "name": f"{self.prefix}.Envelope",
            "version": 2,
        }


FormatterFor = Callable[[str, int], DebeziumFormatter]


def envelopes(
    record: bytes, formatter_for: FormatterFor, op_override: str | None = None
) -> Iterator[tuple[wire.RawEvent, DebeziumFormatter, dict[str, Any]]]:
    """``(event, its formatter, its value envelope)`` for each event of a window record; a
    truncate asks for version -1 (it needs no columns). With ``provide.transaction.metadata``
    each envelope has Debezium's ``transaction`` block: the window is the transaction (its
    id is the SCN), orders count from 1 over the window and over its table's events."""
    header = wire.read_window_header(record)
    per_table: dict[str, int] = {}
    for order, raw in enumerate(wire.decode_events(record), 1):
        per_table[raw.source] = per_table.get(raw.source, 0) + 1
        truncate = raw.op == "t"
        formatter = formatter_for(raw.source, -1 if truncate else raw.schema_version)
        tx = None
        if formatter.options.transactions:
            tx = {
                "id": str(header.scn),
                "total_order": order,
                "data_collection_order": per_table[raw.source],
            }
        if truncate:
            value = formatter.truncate(header.scn, header.ts_ms, tx)
        else:
            op = op_override or raw.op
            value = formatter.value(op, raw.payload, header.scn, header.ts_ms, transaction=tx)
        yield raw, formatter, value


def debezium_lines(record: bytes, formatter_for: FormatterFor) -> Iterator[str]:
    """A window record's events as Debezium value envelopes, one JSON text each (with
    ``keys``: ``{"key": ..., "value": ...}``, the key as Debezium's key struct)."""
    for raw, formatter, value in envelopes(record, formatter_for):
        line: dict[str, Any] = value
        if formatter.options.keys:
            key = None if raw.op == "t" else formatter.key_of(raw.payload)
            line = {"key": key, "value": value}
        yield json.dumps(line, ensure_ascii=False, separators=(",", ":"))


class DebeziumWindows:
    """A window decoder for clients (``sluice tail --format debezium``, Spark): a window
    record -> ``JsonWindow`` of Debezium envelopes, given the client's codec lookup."""

    def __init__(self, source: dict[str, Any], options: DebeziumOptions) -> None:
        check_connector(source)
        self.source, self.options = source, options
        self._formatters: dict[tuple[str, int], DebeziumFormatter] = {}

    def formatter(
        self, source: str, version: int, codec_for: Callable[[str, int], Any]
    ) -> DebeziumFormatter:
        """``version`` -1: a truncate's (no columns needed); an unknown version raises, so
        the client fetches the schemas and decodes again."""
        formatter = self._formatters.get((source, version))
        if formatter is None:
            if version < 0:
                schema = TableSchema(source, 0, (), ())
            else:
                schema = codec_for(source, version).schema
            formatter = DebeziumFormatter(schema, self.source, self.options)
            self._formatters[(source, version)] = formatter
        return formatter

    def __call__(self, record: bytes, codec_for: Callable[[str, int], Any]) -> JsonWindow:
        header = wire.read_window_header(record)
        lines = tuple(debezium_lines(record, lambda s, v: self.formatter(s, v, codec_for)))
        return JsonWindow(header.scn, header.ts_ms, lines)


_HEAD_FIELDS = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": True, "field": "snapshot"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "int64", "optional": True, "field": "ts_us"},
    {"type": "int64", "optional": True, "field": "ts_ns"},
]


def _fields(*spec: tuple[str, str, bool]) -> list[dict[str, Any]]:
    return [{"type": t, "optional": o, "field": f} for f, t, o in spec]


_SOURCE_FIELDS = {
    "postgresql": _HEAD_FIELDS
    + _fields(
        ("schema", "string", False),
        ("table", "string", False),
        ("txId", "int64", True),
        ("lsn", "int64", True),
        ("xmin", "int64", True),
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
_TX_FIELDS = [
    {"type": "string", "optional": False, "field": "id"},
    {"type": "int64", "optional": False, "field": "total_order"},
    {"type": "int64", "optional": False, "field": "data_collection_order"},
]
