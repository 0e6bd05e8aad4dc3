"""Debezium's value conventions per connector: for each column (its kind and its source type
name, e.g. ``numeric(10,2)``, ``time(3) without time zone``), the converter from Sluice's
canonical value to Debezium's, and the column's Kafka Connect schema; and the options that
change them (Debezium's own names). Checked against Debezium itself (``interop/``,
``tests/golden/debezium/``)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sluice.errors import ConfigError
from sluice.schemas.columns import (
    DATE_INFINITY,
    DATE_MINUS_INFINITY,
    INFINITE,
    MICROS_INFINITY,
    MICROS_MINUS_INFINITY,
    UNCHANGED_TOAST,
    Column,
    float_json,
)
from sluice.schemas.decoder import EXACT

_PRECISION = re.compile(r"\((\d+)(?:\s*,\s*(-?\d+))?\)")
_EPOCH = dt.datetime(1970, 1, 1)
_DAYS_PER_MONTH = 365.25 / 12.0  # Debezium's MicroDuration.DAYS_PER_MONTH_AVG
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
    "tombstones.on.delete": ("true", "false"),
}
UNAVAILABLE = "__debezium_unavailable_value"  # unavailable.value.placeholder's default
_SKIPPABLE = frozenset("cudt")


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
    unavailable: str = UNAVAILABLE  # unavailable.value.placeholder: an unchanged TOASTed value
    skipped: frozenset[str] = frozenset("t")  # skipped.operations: Debezium's default skips t
    tombstones: bool = True  # tombstones.on.delete: after a delete, {"key": K, "value": null}

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
            unavailable=options.get("unavailable.value.placeholder", UNAVAILABLE),
            skipped=_skipped(options.get("skipped.operations", "t")),
            tombstones=options.get("tombstones.on.delete", "true") == "true",
        )


def _skipped(text: str) -> frozenset[str]:
    """``skipped.operations``: ``none`` or a comma-separated list of ``c``, ``u``, ``d``, ``t``."""
    if text.strip() == "none":
        return frozenset()
    ops = frozenset(part.strip() for part in text.split(",") if part.strip())
    if not ops <= _SKIPPABLE:
        raise ConfigError(
            f"skipped.operations must be none or a comma-separated list of c, u, d, t; got {text!r}"
        )
    return ops


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
class Field:
    """One column's Debezium value converter and its Kafka Connect schema. ``text`` tells the
    text renderers (``debezium_text.py``) what ``convert`` gives beyond its name: ``int`` (an
    int), ``toast`` (the text, or the placeholder for an unchanged TOASTed value), ``decimal``
    (precise mode: base64 of the unscaled value); '' nothing known."""

    convert: Callable[[Any], Any]
    schema: dict[str, Any]
    text: str = ""


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

    def decimal(self, scale: int | None, precision: int | None) -> Field:
        """PostgreSQL's ``NaN``/``Infinity`` numerics: null in precise mode (Debezium's
        Decimal has no such value), their text in string mode, a double's text in double."""
        mode = self.options.decimal_mode
        if mode == "string":
            return Field(
                lambda d: d if d in _SPECIAL_NUMERIC else format(Decimal(d), "f"),
                {"type": "string"},
            )
        if mode == "double":
            return Field(lambda d: float_json(float(Decimal(d))), {"type": "double"})
        if scale is None:  # numeric without a scale: io.debezium.data.VariableScaleDecimal
            return Field(_variable_scale, _VARIABLE_SCALE)
        step = Decimal(1).scaleb(-scale)

        def precise(value: Any) -> str | None:
            if value in _SPECIAL_NUMERIC:
                return None
            unscaled = int(Decimal(value).quantize(step, context=EXACT).scaleb(scale, EXACT))
            return base64.b64encode(_unscaled_bytes(unscaled)).decode()

        params = {"scale": str(scale)}
        if precision is not None:
            params["connect.decimal.precision"] = str(precision)
        schema = _named("bytes", "org.apache.kafka.connect.data.Decimal", params)
        return Field(precise, schema, "decimal")

    def micros_time(self, precision: int | None, always_micro: bool = False) -> Field:
        """A time of day (microseconds) by ``time.precision.mode`` (MySQL's default mode,
        ``adaptive_time_microseconds``, keeps every TIME in microseconds)."""
        mode = self.options.time_precision
        if mode == "connect":
            return Field(lambda us: us // 1000, _connect("int32", "Time"), "int")
        micro = always_micro or mode == "adaptive_time_microseconds"
        if not micro and precision is not None and precision <= 3:
            return Field(lambda us: us // 1000, _named("int32", "io.debezium.time.Time"), "int")
        return Field(lambda us: us, _named("int64", "io.debezium.time.MicroTime"), "int")

    def micros_timestamp(self, precision: int | None) -> Field:
        if self.options.time_precision == "connect":
            return Field(_millis, _connect("int64", "Timestamp"), "int")
        if precision is not None and precision <= 3:
            return Field(_millis, _named("int64", "io.debezium.time.Timestamp"), "int")
        return Field(_micros, _named("int64", "io.debezium.time.MicroTimestamp"), "int")

    def date(self) -> Field:
        if self.options.time_precision == "connect":
            return Field(_days, _connect("int32", "Date"), "int")
        return Field(_days, _named("int32", "io.debezium.time.Date"), "int")


# PostgreSQL's infinite dates and timestamps as Debezium's PostgreSQL connector gives them
# (PostgresValueConverter): a timestamp's infinity is the Instant of PGStatement's
# DATE_POSITIVE_INFINITY / DATE_NEGATIVE_INFINITY read as microseconds, in micros or millis;
# a date's is the LocalDate -5877611-06-21 / -06-22 as epoch days (+infinity is the earlier
# day: so Debezium has it). Measured against Debezium 3.6.3 (tests/golden/debezium/).
_DEBEZIUM_MICROS = {
    MICROS_INFINITY: 9223372036825200000,
    MICROS_MINUS_INFINITY: -9223372036832400000,
}
_DEBEZIUM_DAYS = {DATE_INFINITY: -2147472692, DATE_MINUS_INFINITY: -2147472691}


def _micros(micros: int) -> int:
    return _DEBEZIUM_MICROS.get(micros, micros)


def _millis(micros: int) -> int:
    return _DEBEZIUM_MICROS.get(micros, micros) // 1000


def _days(days: int) -> int:
    return _DEBEZIUM_DAYS.get(days, days)


def _connect(kind: str, name: str) -> dict[str, Any]:
    return {"type": kind, "name": f"org.apache.kafka.connect.data.{name}", "version": 1}


def _named(kind: str, name: str, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "name": name, "version": 1}
    if parameters:
        out["parameters"] = parameters
    return out


_SPECIAL_NUMERIC = frozenset({"NaN", "Infinity", "-Infinity"})
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


def _variable_scale(value: Any) -> dict[str, Any] | None:
    if value in _SPECIAL_NUMERIC:
        return None
    number = Decimal(value)
    exponent = int(number.as_tuple().exponent)
    scale = max(0, -exponent)
    unscaled = int(number.scaleb(scale, EXACT))
    return {"scale": scale, "value": base64.b64encode(_unscaled_bytes(unscaled)).decode()}


def _zoned_timestamp(precision: int | None) -> Callable[[int], str]:
    digits = 6 if precision is None else precision

    def convert(micros: int) -> str:
        if micros in (MICROS_INFINITY, MICROS_MINUS_INFINITY):  # not a date's: 2**31 us is
            return INFINITE[micros]  # a real time. Debezium's ZonedTimestamp says "infinity" too
        stamp = _EPOCH + dt.timedelta(microseconds=micros)
        text = f"{stamp.year:04d}" + stamp.strftime("-%m-%dT%H:%M:%S")  # %Y: no padding
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
    """An ISO 8601 interval (``P1Y2M3DT4H5M6.5S``) in microseconds as Debezium computes it
    (``MicroDuration.durationMicros``): in doubles, a month as 30.4375 days, truncated to a
    long; exact up to 2^53 microseconds (~285 years), rounded as Debezium rounds beyond."""
    match = _ISO_DURATION.match(text)
    if match is None:
        raise ValueError(f"not an ISO 8601 interval: {text!r}")
    g = {k: v or "0" for k, v in match.groupdict().items()}
    months = int(g["y"]) * 12 + int(g["mo"])
    days = months * _DAYS_PER_MONTH + (int(g["w"]) * 7 + int(g["d"]))
    seconds = (((days * 24 + int(g["h"])) * 60) + int(g["mi"])) * 60 + float(g["s"])
    micros = int(seconds * 1e6)
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


def _pg_field(col: Column, c: _Conventions) -> Field:
    """PostgreSQL connector conventions for one column; an unchanged TOASTed value (only
    texts and JSON) is ``unavailable.value.placeholder``."""
    field = _pg_value(col, c)
    if col.kind not in ("string", "json"):
        return field
    convert, placeholder = field.convert, c.options.unavailable

    def or_placeholder(value: Any) -> Any:
        return placeholder if value == UNCHANGED_TOAST else convert(value)

    return Field(or_placeholder, field.schema, "toast" if convert is str else "")


def _pg_value(col: Column, c: _Conventions) -> Field:
    base = col.source_type.split("(")[0].strip()
    precision, scale = _precision(col.source_type)
    kind = col.kind
    if kind == "int":
        return Field(int, {"type": _PG_INTS.get(base, "int64")})
    if kind == "bool":
        return Field(bool, {"type": "boolean"})
    if kind == "float":
        return Field(float_json, {"type": "float"})
    if kind == "double":
        return Field(float_json, {"type": "double"})
    if kind == "bytes":
        return Field(c.binary, c.binary_schema())
    if kind == "date":
        return c.date()
    if kind == "time":
        return c.micros_time(precision)
    if kind == "datetime":
        return c.micros_timestamp(precision)
    if kind == "timestamp":
        return Field(
            _zoned_timestamp(precision), _named("string", "io.debezium.time.ZonedTimestamp")
        )
    if kind == "uuid":
        return Field(str, _named("string", "io.debezium.data.Uuid"))
    if kind == "json" and base in ("json", "jsonb"):
        return Field(str, _named("string", "io.debezium.data.Json"))
    if kind == "json" and col.source_type.endswith("[]"):
        return _array_field(col, c)
    if base in {"numeric", "decimal"}:
        return c.decimal(scale, precision)
    if base == "money":
        field = c.decimal(2, None)
        return Field(lambda text: field.convert(_money(text)), field.schema)
    if base == "interval":
        return Field(_micro_duration, _named("int64", "io.debezium.time.MicroDuration"))
    if base.startswith("time with time zone") or base == "timetz":
        return Field(_zoned_time, _named("string", "io.debezium.time.ZonedTime"))
    if base.startswith("bit"):
        length = str(precision) if precision is not None else "2147483647"
        return Field(_bits, _named("bytes", "io.debezium.data.Bits", {"length": length}))
    return Field(str, {"type": "string"})


def _array_field(col: Column, c: _Conventions) -> Field:
    element = Column(col.name, "string", True, col.source_type[:-2])
    inner = col.source_type[:-2]
    if inner in _PG_INTS:
        items: dict[str, Any] = {"type": _PG_INTS[inner], "optional": True}
        return Field(json.loads, {"type": "array", "items": items})
    field = _pg_value(element, c)
    items = {**field.schema, "optional": True}

    def convert(text: str) -> list[Any]:
        return [None if v is None else field.convert(v) for v in json.loads(text)]

    return Field(convert, {"type": "array", "items": items})


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


def _mysql_field(col: Column, c: _Conventions) -> Field:
    """MySQL connector conventions (as on MariaDB) for one column."""
    precision, _scale = _precision(col.source_type)
    kind, base = col.kind, col.source_type.split("(")[0].strip()
    if kind == "int":
        return Field(int, {"type": _MYSQL_INTS.get(col.source_type, "int64")})
    if kind == "uint64" and base.startswith("bit"):
        return Field(_mysql_bits(8), _named("bytes", "io.debezium.data.Bits", {"length": "64"}))
    if kind == "uint64":
        if c.options.unsigned_precise:
            return c.decimal(0, 20)
        return Field(_signed64, {"type": "int64"}, "int")
    if kind == "bit":
        bits = precision or 1
        if bits == 1:
            return Field(bool, {"type": "boolean"})
        size = (bits + 7) // 8
        return Field(
            _mysql_bits(size), _named("bytes", "io.debezium.data.Bits", {"length": str(bits)})
        )
    if kind == "year":
        return Field(int, _named("int32", "io.debezium.time.Year"))
    if kind == "decimal":
        return c.decimal(col.scale, col.precision or None)
    if kind == "float":
        return Field(float_json, {"type": "float"})
    if kind == "double":
        return Field(float_json, {"type": "double"})
    if kind in ("bytes", "geometry"):
        return Field(c.binary, c.binary_schema())
    if kind == "date":
        return c.date()
    if kind == "time":
        return c.micros_time(precision, always_micro=True)
    if kind == "datetime":
        return c.micros_timestamp(precision or 0)
    if kind == "timestamp":
        return Field(
            _zoned_timestamp(precision or 0), _named("string", "io.debezium.time.ZonedTimestamp")
        )
    if kind == "enum":
        return Field(str, _named("string", "io.debezium.data.Enum"))
    if kind == "set":
        return Field(",".join, _named("string", "io.debezium.data.EnumSet"))
    return Field(str, {"type": "string"})  # strings, JSON (MariaDB's is text), UUID, INET6


# Keyed by Debezium's connector names, which are Debezium's vocabulary (what its events say in
# ``source.connector``), not Sluice's source kinds: a kind says in ``source_info`` which
# connector's conventions its events follow (``mysql://`` and ``mariadb://`` both "mysql").
_CONNECTORS: dict[str, Callable[[Column, _Conventions], Field]] = {
    "postgresql": _pg_field,
    "mysql": _mysql_field,
}


def check_connector(source: dict[str, Any]) -> None:
    """Refuse a source whose Debezium conventions Sluice does not speak yet."""
    connector = str(source.get("connector", ""))
    if connector not in _CONNECTORS:
        raise ConfigError(
            f"format=debezium is not available for {connector or 'this'} sources yet: it "
            "speaks Debezium's MySQL and PostgreSQL connectors (use format=json)"
        )


def column_fields(
    connector: str, columns: Sequence[Column], options: DebeziumOptions
) -> list[Field]:
    """Each column's converter and schema under ``connector``'s conventions."""
    field_of = _CONNECTORS[connector]
    conventions = _Conventions(options)
    return [field_of(col, conventions) for col in columns]
