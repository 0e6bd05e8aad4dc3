"""Avro ``Row`` bytes -> the design brief's JSON mapping, generated once per schema version.

Two outputs from one generator: JSON-mapped Python values (``Event.before``/``after``, what
``fastavro`` plus the kinds' ``from_avro`` give, several times faster) and JSON text (what
``json.JSONEncoder(ensure_ascii=False)`` writes for ``Event.to_json_dict()``, for JSON
consumers such as ``sluice tail``). ``tests/unit/test_decoder.py`` checks both against
fastavro and the encoder on every kind; the differential test on every MariaDB type.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from collections.abc import Callable, Sequence
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from json.encoder import encode_basestring
from typing import Any

from sluice.schemas.codegen import run_generated
from sluice.schemas.columns import (
    KIND,
    Column,
    float_json,
    float_text,
)

Row = dict[str, Any]
RowValues = Callable[[bytes, int], tuple[Row, "Row | None", int]]
RowText = Callable[[bytes, int], tuple[str, str, int]]

_ENCODER = json.JSONEncoder(ensure_ascii=False)
_EPOCH = dt.date(1970, 1, 1)
_DAY_MICROS = 86_400_000_000
# The one-byte zigzag varints: values -64..63, and their text.
_ONE_BYTE = [(b >> 1) ^ -(b & 1) for b in range(128)]
_ONE_BYTE_TEXT = [str(v) for v in _ONE_BYTE]


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


# Decimal arithmetic without rounding: the default context keeps 28 digits, and a DECIMAL(65,30)
# (or a PostgreSQL numeric of any size) lost its last digits in scaleb and quantize
EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)


def decimal_text(scale: int) -> Callable[[bytes], str]:
    """``format(Decimal, "f")`` of an Avro decimal's bytes at ``scale``."""

    def text(raw: bytes) -> str:
        unscaled = int.from_bytes(raw, "big", signed=True)
        digits = str(abs(unscaled))
        sign = "-" if unscaled < 0 else ""
        if not scale:
            return sign + digits
        digits = digits.rjust(scale + 1, "0")
        return f"{sign}{digits[:-scale]}.{digits[-scale:]}"

    return text


def _uint64(raw: bytes) -> int:
    return int.from_bytes(raw, "big", signed=True)


def _base64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _json(raw: bytes) -> Any:
    return json.loads(raw.decode())


def _set(data: bytes, pos: int) -> tuple[list[str], int]:
    members: list[str] = []
    while True:
        count, pos = read_long(data, pos)
        if count == 0:
            return members, pos
        if count < 0:  # a block with its byte size: skip the size
            count = -count
            _, pos = read_long(data, pos)
        for _ in range(count):
            n, pos = read_long(data, pos)
            members.append(data[pos : pos + n].decode())
            pos += n


def _set_text(data: bytes, pos: int) -> tuple[str, int]:
    members, pos = _set(data, pos)
    return "[" + ", ".join(map(encode_basestring, members)) + "]", pos


class _Generator:
    """Statements per column reading its non-null Avro value at ``pos`` into ``v<i>``: the
    JSON-mapped value, or its JSON text when ``text``."""

    def __init__(self, text: bool) -> None:
        self.text = text
        self.env: dict[str, Any] = {
            "_L": read_long,
            "_T1": _ONE_BYTE_TEXT if text else _ONE_BYTE,
            "_esc": encode_basestring,
            "_unpack": struct.Struct("<d").unpack_from,
            "_INF": float("inf"),
            "_float": float_text if text else float_json,
            "_set": _set_text if text else _set,
        }

    def column(self, i: int, col: Column) -> list[str]:
        kind = KIND[col.kind]
        if kind.wire == "long":
            return self._long(i, kind.json, kind.canonical_json())
        if kind.wire == "double":
            # NaN and the infinities as strings (strict JSON has no such numbers)
            value = "_float(x)" if self.text else "x if -_INF < x < _INF else _float(x)"
            return [f"x = _unpack(data, pos)[0]; pos += 8; v{i} = {value}"]
        if kind.wire == "strings":
            return [f"v{i}, pos = _set(data, pos)"]
        read = [
            "n = data[pos]",
            "if n < 128: n >>= 1; pos += 1",
            "else: n, pos = _L(data, pos)",
            "r = data[pos : pos + n]; pos += n",
        ]
        if kind.json == "string":
            return [*read, f"v{i} = _esc(r.decode())" if self.text else f"v{i} = r.decode()"]
        convert: Callable[[bytes], Any] = {
            ("decimal", "quoted"): decimal_text(col.scale),
            ("decimal", "value"): _uint64,
            ("string", "value"): _json,
            ("bytes", "quoted"): _base64,
        }[(kind.wire, kind.json)]
        self.env[f"_c{i}"] = convert
        value = f"_c{i}(r)"
        if self.text and kind.json == "value":
            self.env["_dump"] = _ENCODER.encode
            value = f"_dump({value})"
        return [*read, f"v{i} = {self._quote(kind.json, value)}"]

    def _long(self, i: int, style: str, convert: Callable[[int], Any]) -> list[str]:
        """A zigzag varint: a number, a bool, or a converter's text (dates, times)."""
        if style == "number":
            # Inline up to three bytes (keys and counters up to 2**20), the function beyond.
            value = (
                f"v{i} = str((x >> 1) ^ -(x & 1))" if self.text else f"v{i} = (x >> 1) ^ -(x & 1)"
            )
            as_text = f"; v{i} = str(v{i})" if self.text else ""
            return [
                "b = data[pos]",
                f"if b < 128: v{i} = _T1[b]; pos += 1",
                "else:",
                "    c = data[pos + 1]",
                f"    if c < 128: x = b & 127 | c << 7; pos += 2; {value}",
                "    else:",
                "        d = data[pos + 2]",
                f"        if d < 128: x = b & 127 | (c & 127) << 7 | d << 14; pos += 3; {value}",
                f"        else: v{i}, pos = _L(data, pos){as_text}",
            ]
        if style == "bool":  # 0 or 1
            value = '("true" if x else "false")' if self.text else "x != 0"
            return [f"x, pos = _L(data, pos); v{i} = {value}"]
        self.env[f"_c{i}"] = convert
        return [f"x, pos = _L(data, pos); v{i} = {self._quote(style, f'_c{i}(x)')}"]

    def _quote(self, style: str, value: str) -> str:
        """In JSON text, a ``quoted`` converter's text (it needs no escaping) gets quotes."""
        return f"'\"' + {value} + '\"'" if self.text and style == "quoted" else value

    def function(self, columns: Sequence[Column], result: str) -> Callable[..., Any]:
        lines = ["def row(data, pos):"]
        null = '"null"' if self.text else "None"
        for i, col in enumerate(columns):
            body = self.column(i, col)
            if isinstance(col.avro_type(), list):
                lines.append(f"    if data[pos] == 0: pos += 1; v{i} = {null}")
                lines.append("    else:")
                lines.append("        pos += 1")
                lines += [f"        {line}" for line in body]
            else:
                lines += [f"    {line}" for line in body]
        lines.append(f"    return {result}, pos")
        run_generated(lines, self.env, "row decoder")
        row: Callable[..., Any] = self.env["row"]
        return row


def _tuple(names: Sequence[str]) -> str:
    return ", ".join(names) + ("," if len(names) == 1 else "")


def row_values(columns: Sequence[Column], primary_key: Sequence[str]) -> RowValues:
    """``row(data, pos) -> (row dict, key dict or None, next pos)``: JSON-mapped values."""
    index = {c.name: i for i, c in enumerate(columns)}
    row = "{" + ", ".join(f"{c.name!r}: v{i}" for i, c in enumerate(columns)) + "}"
    key = "{" + ", ".join(f"{n!r}: v{index[n]}" for n in primary_key) + "}"
    result = f"{row}, {key if primary_key else 'None'}"
    return _Generator(text=False).function(columns, result)


def row_text(
    columns: Sequence[Column], primary_key: Sequence[str], canonical_key: bool = False
) -> RowText:
    """``row(data, pos) -> (row JSON, key JSON, next pos)``: the encoder's text. The key is
    ``{name: value}`` in key order, or with ``canonical_key`` sorted and compact (the text
    the relay hashes for partitions)."""
    names = [encode_basestring(c.name).replace("%", "%%") for c in columns]
    row_format = "{" + ", ".join(f"{n}: %s" for n in names) + "}"
    index = {c.name: i for i, c in enumerate(columns)}
    key_names = sorted(primary_key) if canonical_key else primary_key
    key = [(encode_basestring(name).replace("%", "%%"), index[name]) for name in key_names]
    values = _tuple([f"v{i}" for i in range(len(columns))])
    if key:
        sep, colon = (",", ":") if canonical_key else (", ", ": ")
        key_format = "{" + sep.join(f"{n}{colon}%s" for n, _ in key) + "}"
        key_expr = f"{key_format!r} % ({_tuple([f'v{i}' for _, i in key])})"
    else:
        key_expr = '"null"'
    return _Generator(text=True).function(columns, f"{row_format!r} % ({values}), {key_expr}")


def row_end(columns: Sequence[Column]) -> Callable[[bytes, int], int]:
    """``end(data, pos) -> pos`` after the row at ``pos``, reading only lengths."""
    lines = ["def end(data, pos):"]
    for col in columns:
        indent = "    "
        if isinstance(col.avro_type(), list):
            lines.append("    pos += 1")
            lines.append("    if data[pos - 1]:")
            indent = "        "
        lines += _skip_lines(col, indent)
    lines.append("    return pos")
    env: dict[str, Any] = {"_L": read_long, "_set": _set}
    run_generated(lines, env, "row end finder")
    end: Callable[[bytes, int], int] = env["end"]
    return end


def _skip_lines(col: Column, indent: str) -> list[str]:
    """Statements moving ``pos`` past a non-null value of ``col`` (lengths only)."""
    wire = KIND[col.kind].wire
    if wire == "double":
        return [f"{indent}pos += 8"]
    if wire == "strings":
        return [f"{indent}_, pos = _set(data, pos)"]
    if wire == "long":
        return [f"{indent}while data[pos] & 0x80: pos += 1", f"{indent}pos += 1"]
    return [f"{indent}n, pos = _L(data, pos); pos += n"]


def _envelope(
    row: Callable[[bytes, int], tuple[Any, Any, int]], null: Any
) -> Callable[[bytes], tuple[Any, Any, Any]]:
    def decode(payload: bytes) -> tuple[Any, Any, Any]:
        """``(key, before, after)``; the key is the after image's, else the before image's."""
        key = null
        if payload[0]:
            before, key, pos = row(payload, 1)
        else:
            before, pos = null, 1
        if payload[pos]:
            after, key, _ = row(payload, pos + 1)
        else:
            after = null
        return key, before, after

    return decode


def envelope_values(
    columns: Sequence[Column], primary_key: Sequence[str]
) -> Callable[[bytes], tuple[Row | None, Row | None, Row | None]]:
    """``payload -> (key, before, after)`` as JSON-mapped dicts (None when absent)."""
    return _envelope(row_values(columns, primary_key), None)


def envelope_text(
    columns: Sequence[Column], primary_key: Sequence[str], canonical_key: bool = False
) -> Callable[[bytes], tuple[str, str, str]]:
    """``payload -> (key, before, after)`` as JSON text (``null`` when absent)."""
    return _envelope(row_text(columns, primary_key, canonical_key), "null")


def key_text(columns: Sequence[Column], primary_key: Sequence[str]) -> Callable[[bytes], str]:
    """``payload -> canonical key JSON`` (sorted, compact; ``null`` without a key), reading
    only up to the last key column of the image that names the key (the after image, else the
    before image): what the bootstrap log needs, without decoding rows."""
    if not primary_key:
        return lambda _payload: "null"
    index = {c.name: i for i, c in enumerate(columns)}
    last = max(index[n] for n in primary_key)
    gen = _Generator(text=True)
    lines = ["def key(data, pos):"]
    for i, col in enumerate(columns[: last + 1]):
        union = isinstance(col.avro_type(), list)
        indent = "        " if union else "    "
        if union:
            # A key column can be null in Avro: a zero DATE/DATETIME in a key is JSON null.
            default = [f'    v{i} = "null"'] if col.name in primary_key else []
            lines += [*default, "    pos += 1", "    if data[pos - 1]:"]
        if col.name in primary_key:
            lines += [f"{indent}{line}" for line in gen.column(i, col)]
        else:
            lines += _skip_lines(col, indent)
    names = sorted(primary_key)
    key_format = (
        "{" + ",".join(f"{encode_basestring(n).replace('%', '%%')}:%s" for n in names) + "}"
    )
    lines.append(f"    return {key_format!r} % ({_tuple([f'v{index[n]}' for n in names])})")
    gen.env["_set"] = _set
    run_generated(lines, gen.env, "key decoder")
    key: Callable[[bytes, int], str] = gen.env["key"]
    end = row_end(columns)

    def decode(payload: bytes) -> str:
        if payload[0]:
            pos = end(payload, 1)
            if payload[pos]:
                return key(payload, pos + 1)
            return key(payload, 1)
        return key(payload, 2)

    return decode


# -- canonical values (the values the encoder takes), for formats that need them ---------------
Image = list[Any] | None
_DOUBLE = struct.Struct("<d")


def _canonical_row(columns: Sequence[Column]) -> Callable[[bytes, int], tuple[list[Any], int]]:
    """Generated ``row(data, pos) -> ([values], pos)``: one straight-line reader per column
    (varints of up to three bytes inline), as the JSON decoders are."""
    env = canonical_env()
    lines = ["def row(data, pos):"]
    for i, col in enumerate(columns):
        body = canonical_lines(i, col, env)
        if isinstance(col.avro_type(), list):
            lines += [
                f"    if data[pos] == 0: pos += 1; v{i} = None",
                "    else:",
                "        pos += 1",
            ]
            lines += [f"        {line}" for line in body]
        else:
            lines += [f"    {line}" for line in body]
    lines.append(f"    return [{', '.join(f'v{i}' for i in range(len(columns)))}], pos")
    run_generated(lines, env, "canonical row decoder")
    row: Callable[[bytes, int], tuple[list[Any], int]] = env["row"]
    return row


def canonical_env() -> dict[str, Any]:
    """The names ``canonical_lines``' statements use, for the generated code's globals."""
    return {"_L": read_long, "_unpack": _DOUBLE.unpack_from, "_set": _set}


def canonical_lines(i: int, col: Column, env: dict[str, Any]) -> list[str]:
    """Generated statements reading a non-null value of ``col`` at ``pos`` into ``v<i>`` as
    its canonical value (the Debezium text renderers read through them too)."""
    kind = KIND[col.kind]
    if kind.wire == "long":
        value = f"v{i} = (x >> 1) ^ -(x & 1)"
        return [  # up to three bytes inline (keys, counters, dates), the function beyond
            "b = data[pos]",
            f"if b < 128: v{i} = (b >> 1) ^ -(b & 1); pos += 1",
            "else:",
            "    c = data[pos + 1]",
            f"    if c < 128: x = b & 127 | c << 7; pos += 2; {value}",
            "    else:",
            "        d = data[pos + 2]",
            f"        if d < 128: x = b & 127 | (c & 127) << 7 | d << 14; pos += 3; {value}",
            f"        else: v{i}, pos = _L(data, pos)",
        ]
    if kind.wire == "double":
        return [f"v{i} = _unpack(data, pos)[0]; pos += 8"]
    if kind.wire == "strings":
        return [f"v{i}, pos = _set(data, pos)"]
    read = [
        "n = data[pos]",
        "if n < 128: n >>= 1; pos += 1",
        "else: n, pos = _L(data, pos)",
        "r = data[pos : pos + n]; pos += n",
    ]
    if kind.wire == "string":
        return [*read, f"v{i} = r.decode()"]
    if kind.wire == "decimal":
        env[f"_d{i}"] = _canonical_decimal(col.scale if kind.avro is None else 0)
        return [*read, f"v{i} = _d{i}(r)"]
    return [*read, f"v{i} = bytes(r)"]


def _canonical_decimal(scale: int) -> Callable[[bytes], Decimal]:
    def convert(raw: bytes) -> Decimal:
        return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale, EXACT)

    return convert


def canonical_envelope(columns: Sequence[Column]) -> Callable[[bytes], tuple[Image, Image]]:
    """``payload -> (before, after)`` as canonical values in column order (Debezium's format
    and sinks need them: the JSON mapping parses JSON columns and loses their text)."""
    row = _canonical_row(columns)

    def envelope(payload: bytes) -> tuple[Image, Image]:
        if payload[0]:
            before, pos = row(payload, 1)
        else:
            before, pos = None, 1
        after = row(payload, pos + 1)[0] if payload[pos] else None
        return before, after

    return envelope
