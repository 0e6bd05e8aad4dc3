"""Columns and the one registry of column kinds: for each kind, how its value travels in Avro,
its Avro type, and how its JSON value is made (the design brief's table). The encoder, the
decoders and the key formatter go by a kind's categories here, never by its name, so a new
kind that fits them is one line below."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

# An unchanged TOASTed PostgreSQL value the server did not send, where the row cannot be
# completed (texts and JSON only): Sluice's marker in events; Debezium's placeholder replaces it.
UNCHANGED_TOAST = "__sluice_unchanged_toast__"
_NAME_RE = re.compile(r"[^A-Za-z0-9_]")
_EPOCH_DATE = dt.date(1970, 1, 1)
_DAY_MICROS = 86_400_000_000


def _identity(value: Any) -> Any:
    return value


# PostgreSQL's ``infinity``/``-infinity`` dates and timestamps as canonical values: the
# extremes of their Avro types (PostgreSQL's own DATEVAL_NOEND/NOBEGIN and DT_NOEND/NOBEGIN),
# far outside any calendar value (years 1..9999). Their JSON is "infinity"/"-infinity".
DATE_INFINITY, DATE_MINUS_INFINITY = 2**31 - 1, -(2**31)
MICROS_INFINITY, MICROS_MINUS_INFINITY = 2**63 - 1, -(2**63)
INFINITE = {
    DATE_INFINITY: "infinity",
    DATE_MINUS_INFINITY: "-infinity",
    MICROS_INFINITY: "infinity",
    MICROS_MINUS_INFINITY: "-infinity",
}
# Apart, per kind: a date's infinities (+-2**31) are ordinary microseconds (00:35:47.483647
# after 1970), and a timestamp of them is not infinite.
_INFINITE_DAYS = {DATE_INFINITY: "infinity", DATE_MINUS_INFINITY: "-infinity"}
_INFINITE_MICROS = {MICROS_INFINITY: "infinity", MICROS_MINUS_INFINITY: "-infinity"}


# -- JSON text of canonical values (also the generated decoders' converters) -----------------
_days_text: dict[int, str] = {}


def date_text(days: int) -> str:
    """ISO date of days since 1970-01-01 (cached: tables hold few distinct dates);
    ``infinity``/``-infinity`` for the infinite dates."""
    text = _days_text.get(days)
    if text is None and days in _INFINITE_DAYS:
        return _INFINITE_DAYS[days]
    if text is None:
        if len(_days_text) > 1 << 16:
            _days_text.clear()
        text = _days_text[days] = (_EPOCH_DATE + dt.timedelta(days=days)).isoformat()
    return text


def datetime_text(micros: int) -> str:
    """``datetime.isoformat()`` of microseconds since 1970, without building a datetime;
    ``infinity``/``-infinity`` for the infinite timestamps."""
    if micros in _INFINITE_MICROS:
        return _INFINITE_MICROS[micros]
    days, rest = divmod(micros, _DAY_MICROS)
    seconds, frac = divmod(rest, 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    if frac:
        return f"{date_text(days)}T{hour:02d}:{minute:02d}:{sec:02d}.{frac:06d}"
    return f"{date_text(days)}T{hour:02d}:{minute:02d}:{sec:02d}"


def timestamp_text(micros: int) -> str:
    text = datetime_text(micros)
    return text if micros in _INFINITE_MICROS else text + "Z"


def time_text(micros: int) -> str:
    sign = "-" if micros < 0 else ""
    seconds, frac = divmod(abs(micros), 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minute:02d}:{sec:02d}"
    return f"{text}.{frac:06d}" if frac else text


_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_INF = float("inf")
_F32 = struct.Struct("<f")


def float_json(value: float) -> float | str:
    """A float's JSON value: ``NaN`` and the infinities as the strings ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"`` (strict JSON has no such numbers; Debezium writes these)."""
    if -_INF < value < _INF:
        return value
    return _NONFINITE[repr(value)]


def shortest_float32(value: float) -> float:
    """The shortest decimal that rounds to the same float32 (a FLOAT column's value as MySQL
    prints it, and as capture gives it)."""
    packed = _F32.pack(value)
    for digits in range(6, 10):
        candidate = float(f"{value:.{digits}g}")
        if _F32.pack(candidate) == packed:
            return candidate
    return value


def float_text(value: float) -> str:
    """A float's JSON text (``float_json``'s value as JSON)."""
    if -_INF < value < _INF:
        return repr(value)
    return '"' + _NONFINITE[repr(value)] + '"'


# -- JSON values of what an Avro reader (fastavro) returns -----------------------------------
def _timestamp_json(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat() + "Z"


def _decimal_json(value: Decimal) -> str:
    return format(value, "f")


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


# -- the registry ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Kind:
    """One column kind.

    ``wire``: how a non-null value travels in Avro: ``long`` (zigzag varint; Avro int too),
    ``double``, ``decimal`` (two's-complement bytes), ``bytes``, ``string``, ``strings`` (an
    array of strings).
    ``json``: how its JSON value is made from the Avro value: ``number`` (as is), ``bool``,
    ``string`` (as is), ``quoted`` (a converter's text that needs no JSON escaping), ``value``
    (a converter's JSON value: an int, a parsed document), ``members`` (a list of strings).
    """

    name: str
    wire: str
    avro: Any  # the Avro type of a non-null value; None: a decimal built from the column
    json: str
    spark: str | None  # the Spark SQL type of typed rows; None: a decimal from the column
    from_avro: Callable[[Any], Any] = _identity  # what an Avro reader returns -> JSON
    from_canonical: Callable[[Any], Any] | None = None  # capture's value -> JSON (None: as above)
    zero_dates: bool = False  # holds zero dates, which map to null whatever the column says

    def canonical_json(self) -> Callable[[Any], Any]:
        return self.from_canonical or self.from_avro


_LONG, _STRING = "long", "string"
_DATE = {"type": "int", "logicalType": "date"}
_LOCAL_MICROS = {"type": "long", "logicalType": "local-timestamp-micros"}
_UTC_MICROS = {"type": "long", "logicalType": "timestamp-micros"}
_UINT64 = {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}

KIND: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("int", "long", _LONG, "number", "long"),
        Kind("year", "long", _LONG, "number", "long"),
        Kind("bit", "long", _LONG, "number", "long"),
        Kind("bool", "long", _LONG, "bool", "boolean", bool),  # 0 or 1
        Kind("time", "long", _LONG, "quoted", "string", time_text),  # signed microseconds
        Kind("date", "long", _DATE, "quoted", "date", dt.date.isoformat, date_text, True),
        Kind(
            "datetime",
            "long",
            _LOCAL_MICROS,
            "quoted",
            "timestamp_ntz",
            dt.datetime.isoformat,
            datetime_text,
            True,
        ),
        Kind(
            "timestamp",
            "long",
            _UTC_MICROS,
            "quoted",
            "timestamp",
            _timestamp_json,
            timestamp_text,
            True,
        ),
        Kind("float", "double", "double", "number", "double", float_json),  # float32 values
        Kind("double", "double", "double", "number", "double", float_json),
        Kind("decimal", "decimal", None, "quoted", None, _decimal_json),
        Kind("uint64", "decimal", _UINT64, "value", "decimal(20,0)", int),
        Kind("bytes", "bytes", "bytes", "quoted", "binary", _b64),
        Kind("geometry", "bytes", "bytes", "quoted", "binary", _b64),
        Kind("string", "string", _STRING, "string", "string"),
        Kind("enum", "string", _STRING, "string", "string"),
        Kind("uuid", "string", _STRING, "string", "string"),
        Kind("inet6", "string", _STRING, "string", "string"),
        Kind("json", "string", _STRING, "value", "string", json.loads),
        Kind("set", "strings", {"type": "array", "items": "string"}, "members", "array<string>"),
    )
}
KINDS = frozenset(KIND)


def kind_of(name: str) -> Kind:
    return KIND[name]


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a captured table. ``kind`` is the source-neutral logical type (it picks the
    Avro type and the JSON mapping); ``source_type`` is the source's own type name
    (``decimal(10,2)``, ``timestamp with time zone``)."""

    name: str
    kind: str
    nullable: bool
    source_type: str
    precision: int = 0
    scale: int = 0
    # What the source declares, where it differs from what events need: a PostgreSQL NOT
    # NULL column is ``nullable`` in events (a before image holds only the key) but not here.
    source_nullable: bool | None = None
    default: str | None = None  # the column's constant default, as its literal's text

    @property
    def declared_nullable(self) -> bool:
        return self.nullable if self.source_nullable is None else self.source_nullable

    def avro_type(self) -> Any:
        kind = KIND[self.kind]
        base = kind.avro
        if base is None:
            base = {
                "type": "bytes",
                "logicalType": "decimal",
                "precision": max(self.precision, 1),
                "scale": self.scale,
            }
        if self.nullable or kind.zero_dates:
            return ["null", base]
        return base


def avro_name(name: str, taken: set[str]) -> str:
    """A valid, unique Avro field name for a column name."""
    candidate = _NAME_RE.sub("_", name) or "_"
    if candidate[0].isdigit():
        candidate = "_" + candidate
    base, n = candidate, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}_{n}"
    taken.add(candidate)
    return candidate


def json_converter(kind: str) -> Callable[[Any], Any]:
    """Turns a value read back from Avro into the design brief's JSON value."""
    return KIND[kind].from_avro


def canonical_converter(kind: str) -> Callable[[Any], Any]:
    """Turns a value as capture decodes it (before Avro) into the JSON value."""
    return KIND[kind].canonical_json()


def default_value(col: Column) -> Any:
    """The column's default as a canonical value of its kind (what capture gives for such a
    value), or None when it has none Sluice can read (an expression, a binary literal)."""
    text = col.default
    if text is None:
        return None
    parse: Callable[[str], Any] = _DEFAULT_PARSERS.get(col.kind, _identity)
    try:
        return parse(text)
    except (ValueError, ArithmeticError):
        return None


def _bool_default(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "t", "1", "yes", "on"):
        return True
    if lowered in ("false", "f", "0", "no", "off"):
        return False
    raise ValueError(text)


def _date_default(text: str) -> int:
    return (dt.date.fromisoformat(text) - _EPOCH_DATE).days


def _micros_default(text: str) -> int:
    stamp = dt.datetime.fromisoformat(text)
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(dt.UTC).replace(tzinfo=None)
    delta = stamp - dt.datetime(1970, 1, 1)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _unsupported(text: str) -> Any:
    raise ValueError(text)


_DEFAULT_PARSERS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "year": int,
    "uint64": int,
    "bit": _unsupported,
    "bool": _bool_default,
    "float": float,
    "double": float,
    "decimal": lambda text: str(Decimal(text)),
    "date": _date_default,
    "datetime": _micros_default,
    "timestamp": _micros_default,
    "time": _unsupported,
    "bytes": _unsupported,
    "geometry": _unsupported,
    "set": lambda text: text.split(",") if text else [],
}
