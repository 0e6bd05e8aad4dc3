"""A specialised Avro binary encoder, built once per schema version (capture's hot path).

Encodes the canonical values capture decodes (ints, Decimal, str, bytes, days, micros, lists)
straight into Avro bytes, with one small function per column: no dicts, no schema walk per
row. fastavro reads the result; ``tests/unit/test_encoder.py`` checks both agree.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from sluice.schemas.codegen import run_generated
from sluice.schemas.columns import KIND, Column

Encode = Callable[[Any], bytes]

_SMALL = [bytes([n]) if n < 0x80 else bytes([(n & 0x7F) | 0x80, n >> 7]) for n in range(1 << 14)]
_DOUBLE = struct.Struct("<d").pack


# 14 bits at a time: two bytes, both with the continuation bit set.
_CONT14 = [bytes([(n & 0x7F) | 0x80, (n >> 7) | 0x80]) for n in range(1 << 14)]


def varint(n: int) -> bytes:
    """Unsigned LEB128 (``n`` >= 0); unrolled up to 56 bits (timestamps in micros)."""
    if n < 1 << 14:
        return _SMALL[n]
    if n < 1 << 28:
        return _CONT14[n & 0x3FFF] + _SMALL[n >> 14]
    if n < 1 << 42:
        return _CONT14[n & 0x3FFF] + _CONT14[n >> 14 & 0x3FFF] + _SMALL[n >> 28]
    if n < 1 << 56:
        return (
            _CONT14[n & 0x3FFF] + _CONT14[n >> 14 & 0x3FFF] + _CONT14[n >> 28 & 0x3FFF]
        ) + _SMALL[n >> 42]
    parts = []
    while n >= 1 << 14:
        parts.append(_CONT14[n & 0x3FFF])
        n >>= 14
    parts.append(_SMALL[n])
    return b"".join(parts)


def long(n: int) -> bytes:
    zigzag = (n << 1) ^ (n >> 63)
    return _SMALL[zigzag] if zigzag < 1 << 14 else varint(zigzag)


def _string(value: str) -> bytes:
    raw = value.encode()
    return long(len(raw)) + raw


def _bytes(value: bytes) -> bytes:
    return long(len(value)) + value


def _double(value: float) -> bytes:
    return _DOUBLE(value)


def _decimal(scale: int) -> Encode:
    def encode(value: Decimal) -> bytes:
        sign, digits, exp = value.as_tuple()
        unscaled: int = 0
        for digit in digits:
            unscaled = unscaled * 10 + digit
        shift = int(exp) + scale  # exp is an int for finite decimals
        unscaled = unscaled * int(10**shift) if shift >= 0 else unscaled // int(10**-shift)
        if sign:
            unscaled = -unscaled
        raw = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
        return long(len(raw)) + raw

    return encode


def _set(members: list[str]) -> bytes:
    if not members:
        return b"\x00"
    return long(len(members)) + b"".join(_string(m) for m in members) + b"\x00"


def column_encoder(col: Column) -> Encode:
    """The Avro encoder of one column's non-null canonical value, by the kind's wire form."""
    wire = KIND[col.kind].wire
    if wire == "decimal":
        base = col.avro_type()
        base = base[1] if isinstance(base, list) else base
        return _decimal(int(base["scale"]))
    return _BY_WIRE[wire]


_BY_WIRE: dict[str, Encode] = {
    "long": long,
    "double": _double,
    "bytes": _bytes,
    "string": _string,
    "strings": _set,
}
_SMALL_UNION = [b"\x02" + b for b in _SMALL]
SMALL_VARINTS = _SMALL  # LEB128 of every n < 2**14
SMALL_UNION_VARINTS = _SMALL_UNION  # the same behind a union's non-null branch byte
CONT14_VARINTS = _CONT14  # the low 14 bits of a longer LEB128 (continuation bits set)


def _column_code(i: int, col: Column, nullable: bool, env: dict[str, Any]) -> list[str]:
    """Statements appending column ``i`` (value in ``x``) to ``out``; ints and strings inline."""
    wire = KIND[col.kind].wire
    if wire == "long":
        small = "_SU" if nullable else "_S"
        prefix = 'b"\\x02" + ' if nullable else ""
        body = ["z = (x << 1) ^ (x >> 63)", f"a({small}[z] if z < 16384 else {prefix}_V(z))"]
    elif wire == "string":
        union = 'a(b"\\x02"); ' if nullable else ""
        body = [f"r = x.encode(); n = len(r) << 1; {union}a(_S[n] if n < 16384 else _V(n)); a(r)"]
    else:
        env[f"_e{i}"] = column_encoder(col)
        body = [f'a(b"\\x02" + _e{i}(x))' if nullable else f"a(_e{i}(x))"]
    lines = [f"    x = v[{i}]"]
    if nullable:
        lines.append('    if x is None: a(b"\\x00")')
        lines.append("    else:")
        lines += [f"        {line}" for line in body]
    else:
        lines += [f"    {line}" for line in body]
    return lines


def row_encoder(columns: Sequence[Column]) -> Callable[[Sequence[Any]], bytes]:
    """Encodes a row (values in column order) as the schema's ``Row`` record, with code
    generated for this schema: no per-column dispatch for ints and strings."""
    env: dict[str, Any] = {"_S": _SMALL, "_SU": _SMALL_UNION, "_V": varint}
    lines = ["def encode(v):", "    out = []", "    a = out.append"]
    for i, col in enumerate(columns):
        lines += _column_code(i, col, isinstance(col.avro_type(), list), env)
    lines.append('    return b"".join(out)')
    run_generated(lines, env, "row encoder")
    encode: Callable[[Sequence[Any]], bytes] = env["encode"]
    return encode


def envelope_encoder(
    columns: Sequence[Column],
) -> Callable[[Sequence[Any] | None, Sequence[Any] | None], bytes]:
    """Encodes ``{before, after}``, each a union of null and the row."""
    row = row_encoder(columns)

    def encode(before: Sequence[Any] | None, after: Sequence[Any] | None) -> bytes:
        return (b"\x00" if before is None else b"\x02" + row(before)) + (
            b"\x00" if after is None else b"\x02" + row(after)
        )

    return encode
