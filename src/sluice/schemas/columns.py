"""Columns, their kinds, their Avro types and their JSON mapping (the design brief's table)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

KINDS = frozenset(
    {
        "int",
        "uint64",
        "float",
        "double",
        "decimal",
        "string",
        "enum",
        "set",
        "bytes",
        "date",
        "datetime",
        "timestamp",
        "time",
        "year",
        "bit",
        "json",
        "uuid",
        "inet6",
        "geometry",
    }
)
_NAME_RE = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a captured table. ``kind`` picks the Avro type and the JSON mapping."""

    name: str
    kind: str
    nullable: bool
    mysql_type: str
    precision: int = 0
    scale: int = 0

    def avro_type(self) -> Any:
        base = _avro_base(self)
        # Temporal columns can hold zero dates, which map to null whatever the column says.
        if self.nullable or self.kind in ("date", "datetime", "timestamp"):
            return ["null", base]
        return base


def _avro_base(col: Column) -> Any:
    kind = col.kind
    if kind in ("int", "year", "bit", "time", "bool"):
        return "long"  # bool: 0 or 1
    if kind in ("float", "double"):
        return "double"
    if kind == "decimal":
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": max(col.precision, 1),
            "scale": col.scale,
        }
    if kind == "uint64":
        return {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}
    if kind in ("bytes", "geometry"):
        return "bytes"
    if kind == "date":
        return {"type": "int", "logicalType": "date"}
    if kind == "datetime":
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if kind == "timestamp":
        return {"type": "long", "logicalType": "timestamp-micros"}
    if kind == "set":
        return {"type": "array", "items": "string"}
    return "string"  # string, enum, json, uuid, inet6


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


def _time_text(micros: int) -> str:
    sign = "-" if micros < 0 else ""
    seconds, frac = divmod(abs(micros), 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minute:02d}:{sec:02d}"
    return f"{text}.{frac:06d}" if frac else text


def _timestamp_text(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat() + "Z"


def _decimal_text(value: Decimal) -> str:
    return format(value, "f")


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _identity(value: Any) -> Any:
    return value


_TO_JSON: dict[str, Callable[[Any], Any]] = {
    "uint64": int,
    "decimal": _decimal_text,
    "bytes": _b64,
    "geometry": _b64,
    "date": dt.date.isoformat,
    "datetime": dt.datetime.isoformat,
    "timestamp": _timestamp_text,
    "time": _time_text,
    "json": json.loads,
    "bool": bool,
}


def json_converter(kind: str) -> Callable[[Any], Any]:
    """Turns a value read back from Avro into the design brief's JSON value."""
    return _TO_JSON.get(kind, _identity)


_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)


def _days_text(days: int) -> str:
    return (_EPOCH_DATE + dt.timedelta(days=days)).isoformat()


def _micros_text(micros: int) -> str:
    return (_EPOCH + dt.timedelta(microseconds=micros)).isoformat()


def _micros_utc_text(micros: int) -> str:
    return _micros_text(micros) + "Z"


_CANONICAL_TO_JSON: dict[str, Callable[[Any], Any]] = {
    **_TO_JSON,
    "date": _days_text,
    "datetime": _micros_text,
    "timestamp": _micros_utc_text,
}


def canonical_converter(kind: str) -> Callable[[Any], Any]:
    """Turns a value as capture decodes it (before Avro) into the JSON value."""
    return _CANONICAL_TO_JSON.get(kind, _identity)
