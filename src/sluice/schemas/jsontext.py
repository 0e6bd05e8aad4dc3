"""Avro ``Row`` bytes -> the design brief's JSON text, generated once per schema version.

``sluice tail`` and other JSON consumers do not need Python values: this reads the Avro
binary and writes JSON text in one pass, with the same text ``json.JSONEncoder(
ensure_ascii=False)`` gives for ``Event.to_json_dict()`` (``tests/unit/test_jsontext.py`` and
the differential test compare both on every type).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from typing import Any

from sluice.schemas.columns import Column, json_converter

RowText = Callable[[bytes, int], tuple[str, str, int]]

_ENCODER = json.JSONEncoder(ensure_ascii=False)
_EPOCH = dt.date(1970, 1, 1)
_DAY_MICROS = 86_400_000_000
# Text of the one-byte zigzag varints: values -64..63.
_ONE_BYTE = [str((b >> 1) ^ -(b & 1)) for b in range(128)]


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: ``(value, next pos)``."""
    b = data[pos]
    pos += 1
    value, shift = b & 0x7F, 7
    while b & 0x80:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
    return (value >> 1) ^ -(value & 1), pos


_days_text: dict[int, str] = {}


def _day(days: int) -> str:
    text = _days_text.get(days)
    if text is None:
        if len(_days_text) > 1 << 16:
            _days_text.clear()
        text = _days_text[days] = (_EPOCH + dt.timedelta(days=days)).isoformat()
    return text


def _date_text(days: int) -> str:
    return f'"{_day(days)}"'


def _micros_text(micros: int, suffix: str) -> str:
    days, rest = divmod(micros, _DAY_MICROS)
    seconds, frac = divmod(rest, 1_000_000)
    minutes, sec = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    if frac:
        return f'"{_day(days)}T{hour:02d}:{minute:02d}:{sec:02d}.{frac:06d}{suffix}"'
    return f'"{_day(days)}T{hour:02d}:{minute:02d}:{sec:02d}{suffix}"'


def _datetime_text(micros: int) -> str:
    return _micros_text(micros, "")


def _timestamp_text(micros: int) -> str:
    return _micros_text(micros, "Z")


_TIME = json_converter("time")


def _time_text(micros: int) -> str:
    return f'"{_TIME(micros)}"'


def _float_text(value: float) -> str:
    return _ENCODER.encode(value)


def _decimal_text(scale: int) -> Callable[[bytes], str]:
    def text(raw: bytes) -> str:
        unscaled = int.from_bytes(raw, "big", signed=True)
        digits = str(abs(unscaled))
        sign = "-" if unscaled < 0 else ""
        if not scale:
            return f'"{sign}{digits}"'
        digits = digits.rjust(scale + 1, "0")
        return f'"{sign}{digits[:-scale]}.{digits[-scale:]}"'

    return text


def _uint64_text(raw: bytes) -> str:
    return str(int.from_bytes(raw, "big", signed=True))


def _bytes_text(raw: bytes) -> str:
    return '"' + base64.b64encode(raw).decode("ascii") + '"'


def _json_text(raw: bytes) -> str:
    return _ENCODER.encode(json.loads(raw.decode()))


def _set_text(data: bytes, pos: int) -> tuple[str, int]:
    members: list[str] = []
    while True:
        count, pos = read_long(data, pos)
        if count == 0:
            return "[" + ", ".join(members) + "]", pos
        if count < 0:  # a block with its byte size: skip the size
            count = -count
            _, pos = read_long(data, pos)
        for _ in range(count):
            n, pos = read_long(data, pos)
            members.append(encode_basestring(data[pos : pos + n].decode()))
            pos += n


_LONG_TEXT: dict[str, Callable[[int], str]] = {
    "time": _time_text,
    "date": _date_text,
    "datetime": _datetime_text,
    "timestamp": _timestamp_text,
}


class _Generator:
    def __init__(self) -> None:
        self.env: dict[str, Any] = {
            "_L": read_long,
            "_T1": _ONE_BYTE,
            "_esc": encode_basestring,
            "_unpack": __import__("struct").Struct("<d").unpack_from,
            "_float": _float_text,
            "_set": _set_text,
        }

    def column(self, i: int, col: Column) -> list[str]:
        """Statements reading column ``i``'s non-null Avro value at ``pos`` into text ``t{i}``."""
        kind = col.kind
        if kind in ("int", "year", "bit"):
            return [
                "b = data[pos]",
                f"if b < 128: t{i} = _T1[b]; pos += 1",
                f"else: x, pos = _L(data, pos); t{i} = str(x)",
            ]
        if kind in _LONG_TEXT:
            self.env[f"_c{i}"] = _LONG_TEXT[kind]
            return [f"x, pos = _L(data, pos); t{i} = _c{i}(x)"]
        if kind in ("float", "double"):
            return [f"t{i} = _float(_unpack(data, pos)[0]); pos += 8"]
        if kind == "set":
            return [f"t{i}, pos = _set(data, pos)"]
        read = [
            "n = data[pos]",
            "if n < 128: n >>= 1; pos += 1",
            "else: n, pos = _L(data, pos)",
            "r = data[pos : pos + n]; pos += n",
        ]
        if kind in ("string", "enum", "uuid", "inet6"):
            return [*read, f"t{i} = _esc(r.decode())"]
        convert = {
            "decimal": _decimal_text(col.scale),
            "uint64": _uint64_text,
            "json": _json_text,
        }.get(kind, _bytes_text)
        self.env[f"_c{i}"] = convert
        return [*read, f"t{i} = _c{i}(r)"]


def row_text(columns: Sequence[Column], primary_key: Sequence[str]) -> RowText:
    """``row(data, pos) -> (row JSON, key JSON, next pos)`` for one schema version's rows."""
    gen = _Generator()
    lines = ["def row(data, pos):"]
    for i, col in enumerate(columns):
        body = gen.column(i, col)
        if isinstance(col.avro_type(), list):
            lines.append(f'    if data[pos] == 0: pos += 1; t{i} = "null"')
            lines.append("    else:")
            lines.append("        pos += 1")
            lines += [f"        {line}" for line in body]
        else:
            lines += [f"    {line}" for line in body]
    names = [encode_basestring(c.name).replace("%", "%%") for c in columns]
    row_format = "{" + ", ".join(f"{n}: %s" for n in names) + "}"
    index = {c.name: i for i, c in enumerate(columns)}
    key = [(encode_basestring(name).replace("%", "%%"), index[name]) for name in primary_key]
    key_format = "{" + ", ".join(f"{n}: %s" for n, _ in key) + "}" if key else "null"
    values = ", ".join(f"t{i}" for i in range(len(columns))) + ("," if len(columns) == 1 else "")
    key_values = ", ".join(f"t{i}" for _, i in key) + ("," if len(key) == 1 else "")
    key_expr = f"{key_format!r} % ({key_values})" if key else '"null"'
    lines.append(f"    return {row_format!r} % ({values}), {key_expr}, pos")
    exec("\n".join(lines), gen.env)
    row: RowText = gen.env["row"]
    return row


def envelope_text(
    columns: Sequence[Column], primary_key: Sequence[str]
) -> Callable[[bytes], tuple[str, str, str]]:
    """``payload -> (key, before, after)`` as JSON text; the key is the after image's, or the
    before image's for a delete."""
    row = row_text(columns, primary_key)

    def decode(payload: bytes) -> tuple[str, str, str]:
        key = "null"
        if payload[0]:
            before, key, pos = row(payload, 1)
        else:
            before, pos = "null", 1
        if payload[pos]:
            after, key, _ = row(payload, pos + 1)
        else:
            after = "null"
        return key, before, after

    return decode
