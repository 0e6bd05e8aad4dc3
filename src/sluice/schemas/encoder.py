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

from sluice.schemas.columns import Column

Encode = Callable[[Any], bytes]

_SMALL = [bytes([n]) if n < 0x80 else bytes([(n & 0x7F) | 0x80, n >> 7]) for n in range(1 << 14)]
_DOUBLE = struct.Struct("<d").pack


def varint(n: int) -> bytes:
    """Unsigned LEB128 (``n`` >= 0)."""
    if n < 1 << 14:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


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


def _base(col: Column) -> Encode:
    kind = col.kind
    if kind in ("int", "year", "bit", "time", "date", "datetime", "timestamp"):
        return long
    if kind in ("float", "double"):
        return _double
    if kind == "decimal":
        return _decimal(col.scale)
    if kind == "uint64":
        return _decimal(0)
    if kind in ("bytes", "geometry"):
        return _bytes
    if kind == "set":
        return _set
    return _string


def _nullable(base: Encode) -> Encode:
    def encode(value: Any) -> bytes:
        return b"\x00" if value is None else b"\x02" + base(value)

    return encode


def row_encoder(columns: Sequence[Column]) -> Callable[[Sequence[Any]], bytes]:
    """Encodes a row (values in column order) as the schema's ``Row`` record."""
    encoders = []
    for col in columns:
        base = _base(col)
        union = isinstance(col.avro_type(), list)
        encoders.append(_nullable(base) if union else base)

    def encode(values: Sequence[Any]) -> bytes:
        return b"".join([enc(v) for enc, v in zip(encoders, values, strict=True)])

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
