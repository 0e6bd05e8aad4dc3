"""PostgreSQL column types -> Sluice column kinds, and the server's text form of a value ->
the canonical value the schema's encoder takes (ints, str, bytes, days, micros...).

Values arrive as the server's text output (``DateStyle=ISO``, ``TimeZone=UTC``, shortest
exact floats), so each conversion is exact. Arrays of the mapped types are JSON arrays;
other types are kept as their PostgreSQL text form, a string.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import struct
from collections.abc import Callable
from typing import Any

from sluice.schemas.columns import (
    DATE_INFINITY,
    DATE_MINUS_INFINITY,
    MICROS_INFINITY,
    MICROS_MINUS_INFINITY,
)

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_F32 = struct.Struct("<f")


def _float32(text: str) -> float:
    (value,) = _F32.unpack(_F32.pack(float(text)))
    return float(value)


def _bool(text: str) -> bool:
    return text == "t"


def _bytea(text: str) -> bytes:
    return bytes.fromhex(text[2:])  # bytea_output = hex: \x...


# infinity/-infinity: the schemas' sentinels (DATE_INFINITY...), not null, which a NULL has
_DATE_INFINITE = {"infinity": DATE_INFINITY, "-infinity": DATE_MINUS_INFINITY}
_MICROS_INFINITE = {"infinity": MICROS_INFINITY, "-infinity": MICROS_MINUS_INFINITY}


def _date(text: str) -> int:
    infinite = _DATE_INFINITE.get(text)
    if infinite is not None:
        return infinite
    return (dt.date.fromisoformat(text) - _EPOCH_DATE).days


def _micros(value: dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamp(text: str) -> int:
    infinite = _MICROS_INFINITE.get(text)
    if infinite is not None:
        return infinite
    return _micros(dt.datetime.fromisoformat(text))


def _timestamptz(text: str) -> int:
    infinite = _MICROS_INFINITE.get(text)
    if infinite is not None:
        return infinite
    value = dt.datetime.fromisoformat(text)  # "...+00" with TimeZone=UTC
    return _micros(value.astimezone(dt.UTC).replace(tzinfo=None))


def _time(text: str) -> int:
    if text.startswith("24:"):
        return 86_400_000_000  # PostgreSQL allows 24:00:00
    value = dt.time.fromisoformat(text)
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return seconds * 1_000_000 + value.microsecond


def same_text(text: str) -> str:
    """The text form as it is (texts, numerics, uuids, json)."""
    return text


_same = same_text


# oid -> (kind, converter)
_BY_OID: dict[int, tuple[str, Callable[[str], Any]]] = {
    16: ("bool", _bool),
    17: ("bytes", _bytea),
    20: ("int", int),
    21: ("int", int),
    23: ("int", int),
    26: ("int", int),
    700: ("float", _float32),
    701: ("double", float),
    1082: ("date", _date),
    1083: ("time", _time),
    1114: ("datetime", _timestamp),
    1184: ("timestamp", _timestamptz),
    114: ("json", _same),
    3802: ("json", _same),
    2950: ("uuid", _same),
}


def column_kind(type_oid: int) -> tuple[str, Callable[[str], Any]]:
    """``(kind, text -> canonical value)`` of a column type; other types: their text form."""
    return _BY_OID.get(type_oid, ("string", _same))


# -- arrays: JSON arrays (nested for more dimensions, null for NULL elements) ------------------
def _array_of(element: Callable[[str], Any]) -> Callable[[str], str]:
    """PostgreSQL array text (``{1,2,NULL}``, ``{{"a b",c},{d,e}}``, ``[0:1]={1,2}``) -> the
    JSON text of the array, elements converted by ``element``."""

    def convert(text: str) -> str:
        if text.startswith("["):  # explicit bounds: the elements follow "="
            text = text[text.index("=") + 1 :]
        value, end = _parse_array(text, 0, element)
        if end != len(text):
            raise ValueError(f"array text has trailing characters: {text[end:][:20]!r}")
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    return convert


def _parse_array(text: str, pos: int, element: Callable[[str], Any]) -> tuple[list[Any], int]:
    if text[pos] != "{":
        raise ValueError(f"not an array at {pos}: {text[:20]!r}")
    pos += 1
    out: list[Any] = []
    if text[pos] == "}":
        return out, pos + 1
    while True:
        if text[pos] == "{":
            item, pos = _parse_array(text, pos, element)
            out.append(item)
        elif text[pos] == '"':
            chars, pos = [], pos + 1
            while text[pos] != '"':
                if text[pos] == "\\":
                    pos += 1
                chars.append(text[pos])
                pos += 1
            out.append(element("".join(chars)))
            pos += 1
        else:
            end = pos
            while text[end] not in ",}":
                end += 1
            raw = text[pos:end]
            out.append(None if raw == "NULL" else element(raw))
            pos = end
        if text[pos] == "}":
            return out, pos + 1
        pos += 1  # the comma


def _number_or_text(kind: str) -> Callable[[str], Any]:
    if kind == "int":
        return int
    if kind in ("float", "double"):
        return _json_float
    if kind == "bool":
        return _bool
    return _same  # numeric stays exact text; dates, uuids, ... their text form


def _json_float(text: str) -> Any:
    """A number, or its text where JSON has no number (NaN, Infinity)."""
    value = float(text)
    return value if math.isfinite(value) else text


# array converter -> how it reads its elements: "int", "double" (_json_float), "bool" or
# "text"; what the compiled transcoder (compiled.py) reads them as
_ARRAY_ELEMENT: dict[Callable[[str], Any], str] = {}


def array_element(convert: Callable[[str], Any]) -> str | None:
    """How an array column's converter reads its elements (None: not an array's)."""
    return _ARRAY_ELEMENT.get(convert)


# array oid -> element oid
_ARRAYS = {
    1000: 16,
    1005: 21,
    1007: 23,
    1016: 20,
    1021: 700,
    1022: 701,
    1231: 1700,
    1009: 25,
    1015: 1043,
    1014: 1042,
    1182: 1082,
    1183: 1083,
    1115: 1114,
    1185: 1184,
    2951: 2950,
    199: 114,
    3807: 3802,
    1001: 17,
}
_ELEMENT_FORM: dict[Callable[[str], Any], str] = {
    int: "int",
    _json_float: "double",
    _bool: "bool",
    _same: "text",
}
for _array, _element in _ARRAYS.items():
    _kind = _BY_OID.get(_element, ("string", _same))[0]
    _read = _number_or_text(_kind)
    _convert = _array_of(_read)
    _ARRAY_ELEMENT[_convert] = _ELEMENT_FORM[_read]
    _BY_OID[_array] = ("json", _convert)
