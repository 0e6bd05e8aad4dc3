"""PostgreSQL column types -> Sluice column kinds, and the server's text form of a value ->
the canonical value the schema's encoder takes (ints, str, bytes, days, micros...).

Values arrive as the server's text output (``DateStyle=ISO``, ``TimeZone=UTC``, shortest
exact floats), so each conversion is exact. Types without their own mapping yet are kept as
their PostgreSQL text form, a string (exact, but arrays and ranges are not JSON structures).
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable
from typing import Any

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


def _date(text: str) -> int | None:
    if text in ("infinity", "-infinity"):
        return None  # no calendar date: null (documented)
    return (dt.date.fromisoformat(text) - _EPOCH_DATE).days


def _micros(value: dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamp(text: str) -> int | None:
    if text in ("infinity", "-infinity"):
        return None
    return _micros(dt.datetime.fromisoformat(text))


def _timestamptz(text: str) -> int | None:
    if text in ("infinity", "-infinity"):
        return None
    value = dt.datetime.fromisoformat(text)  # "...+00" with TimeZone=UTC
    return _micros(value.astimezone(dt.UTC).replace(tzinfo=None))


def _time(text: str) -> int:
    if text.startswith("24:"):
        return 86_400_000_000  # PostgreSQL allows 24:00:00
    value = dt.time.fromisoformat(text)
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return seconds * 1_000_000 + value.microsecond


def _same(text: str) -> str:
    return text


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
