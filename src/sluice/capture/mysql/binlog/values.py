"""Decoders of single column values in a rows event, built once per column.

Each decoder is ``(data, pos) -> (value, new_pos)`` and returns the canonical value that the
Avro encoder takes: ints, ``Decimal``, ``str``, ``bytes``, days since the epoch for DATE,
microseconds for DATETIME/TIMESTAMP/TIME, a list of members for SET. A zero date is None.
"""

from __future__ import annotations

import codecs
import datetime as dt
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.binlog.tablemap import BinlogColumn
from sluice.errors import DecodeError
from sluice.schemas.columns import shortest_float32

ValueDecoder = Callable[[bytes, int], tuple[Any, int]]

_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")


def _mysql_latin1(error: UnicodeError) -> tuple[str, int]:
    # MySQL's latin1 is cp1252 with the five undefined bytes mapped straight to U+0080..U+009F.
    assert isinstance(error, UnicodeDecodeError)
    return chr(error.object[error.start]), error.start + 1


codecs.register_error("sluice-latin1", _mysql_latin1)


def _int(size: int, signed: bool) -> ValueDecoder:
    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        end = pos + size
        return int.from_bytes(data[pos:end], "little", signed=signed), end

    return decode


def _uint64_decimal(data: bytes, pos: int) -> tuple[Any, int]:
    return Decimal(int.from_bytes(data[pos : pos + 8], "little")), pos + 8


def _float(data: bytes, pos: int) -> tuple[Any, int]:
    return shortest_float32(_F32.unpack_from(data, pos)[0]), pos + 4


def _double(data: bytes, pos: int) -> tuple[Any, int]:
    return _F64.unpack_from(data, pos)[0], pos + 8


def _year(data: bytes, pos: int) -> tuple[Any, int]:
    value = data[pos]
    return (1900 + value if value else 0), pos + 1


def _decimal(precision: int, scale: int) -> ValueDecoder:
    intg = precision - scale
    intg0, intg0x = divmod(intg, 9)
    frac0, frac0x = divmod(scale, 9)
    size = intg0 * 4 + _DIG2BYTES[intg0x] + frac0 * 4 + _DIG2BYTES[frac0x]
    layout: list[tuple[int, int]] = []  # (bytes, digits) groups, most significant first
    if intg0x:
        layout.append((_DIG2BYTES[intg0x], intg0x))
    layout += [(4, 9)] * intg0
    int_groups = len(layout)
    layout += [(4, 9)] * frac0
    if frac0x:
        layout.append((_DIG2BYTES[frac0x], frac0x))

    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        raw = bytearray(data[pos : pos + size])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        if negative:
            raw = bytearray(b ^ 0xFF for b in raw)
        parts: list[str] = []
        at = 0
        for nbytes, ndigits in layout:
            parts.append(str(int.from_bytes(raw[at : at + nbytes], "big")).zfill(ndigits))
            at += nbytes
        text = "".join(parts[:int_groups]) or "0"
        if scale:
            text += "." + "".join(parts[int_groups:])
        return Decimal(("-" if negative else "") + text), pos + size

    return decode


def _date(data: bytes, pos: int) -> tuple[Any, int]:
    value = int.from_bytes(data[pos : pos + 3], "little")
    return days_since_epoch(value >> 9, (value >> 5) & 15, value & 31), pos + 3


def days_since_epoch(year: int, month: int, day: int) -> int | None:
    """Days since 1970-01-01, or None for MySQL's zero dates (a zero in any part)."""
    try:
        return dt.date(year, month, day).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None  # zero date, or a zero in a date part


def _frac(data: bytes, pos: int, fsp: int) -> tuple[int, int]:
    """Fractional seconds of TIME2/DATETIME2/TIMESTAMP2 in microseconds (big-endian)."""
    nbytes = (fsp + 1) // 2
    if not nbytes:
        return 0, pos
    value = int.from_bytes(data[pos : pos + nbytes], "big")
    return value * (10000, 100, 1)[nbytes - 1], pos + nbytes


def _datetime2(fsp: int) -> ValueDecoder:
    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        packed = int.from_bytes(data[pos : pos + 5], "big") - 0x8000000000
        micros, end = _frac(data, pos + 5, fsp)
        ymd, hms = packed >> 17, packed % (1 << 17)
        ym = ymd >> 5
        days = days_since_epoch(ym // 13, ym % 13, ymd % 32)
        if days is None:
            return None, end
        seconds = (hms >> 12) * 3600 + ((hms >> 6) % 64) * 60 + hms % 64
        return (days * 86400 + seconds) * 1_000_000 + micros, end

    return decode


def _timestamp2(fsp: int) -> ValueDecoder:
    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        seconds = int.from_bytes(data[pos : pos + 4], "big")
        micros, end = _frac(data, pos + 4, fsp)
        if seconds == 0 and micros == 0:
            return None, end  # the zero timestamp
        return seconds * 1_000_000 + micros, end

    return decode


def _time2(fsp: int) -> ValueDecoder:
    nbytes = (fsp + 1) // 2

    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        intpart = int.from_bytes(data[pos : pos + 3], "big") - 0x800000
        end = pos + 3 + nbytes
        if nbytes == 0:
            packed = intpart << 24
        elif nbytes == 3:
            packed = int.from_bytes(data[pos:end], "big") - 0x800000000000
        else:
            frac = int.from_bytes(data[pos + 3 : end], "big")
            if intpart < 0 and frac:  # negative values borrow from the integer part
                intpart += 1
                frac -= 0x100 if nbytes == 1 else 0x10000
            packed = (intpart << 24) + frac * (10000 if nbytes == 1 else 100)
        sign = -1 if packed < 0 else 1
        packed = abs(packed)
        hms, micros = packed >> 24, packed % (1 << 24)
        seconds = ((hms >> 12) % 1024) * 3600 + ((hms >> 6) % 64) * 60 + hms % 64
        return sign * (seconds * 1_000_000 + micros), end

    return decode


def _old_timestamp(data: bytes, pos: int) -> tuple[Any, int]:
    seconds = int.from_bytes(data[pos : pos + 4], "little")
    return (seconds * 1_000_000 if seconds else None), pos + 4


def _old_datetime(data: bytes, pos: int) -> tuple[Any, int]:
    value = int.from_bytes(data[pos : pos + 8], "little")
    date_part, time_part = divmod(value, 1_000_000)
    days = days_since_epoch(date_part // 10000, (date_part // 100) % 100, date_part % 100)
    if days is None:
        return None, pos + 8
    seconds = (time_part // 10000) * 3600 + ((time_part // 100) % 100) * 60 + time_part % 100
    return (days * 86400 + seconds) * 1_000_000, pos + 8


def _old_time(data: bytes, pos: int) -> tuple[Any, int]:
    value = int.from_bytes(data[pos : pos + 3], "little", signed=True)
    sign, value = (-1 if value < 0 else 1), abs(value)
    seconds = (value // 10000) * 3600 + ((value // 100) % 100) * 60 + value % 100
    return sign * seconds * 1_000_000, pos + 3


def _length_prefixed(prefix: int, finish: Callable[[bytes], Any]) -> ValueDecoder:
    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        start = pos + prefix
        end = start + int.from_bytes(data[pos:start], "little")
        return finish(data[start:end]), end

    return decode


def _text(codec: str) -> Callable[[bytes], Any]:
    errors = "sluice-latin1" if codec == "cp1252" else "strict"

    def finish(raw: bytes) -> Any:
        try:
            return raw.decode(codec, errors)
        except UnicodeDecodeError as exc:
            raise DecodeError(f"cannot decode {raw[:40]!r} as {codec}: {exc}") from None

    return finish


def _padded(length: int) -> Callable[[bytes], Any]:
    # The binlog strips BINARY(n)'s trailing zero bytes; the column's value keeps them.
    def finish(raw: bytes) -> Any:
        return raw.ljust(length, b"\0")

    return finish


def _uuid_text(raw: bytes) -> Any:
    h = raw.ljust(16, b"\0").hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _inet6_text(raw: bytes) -> Any:
    """MariaDB's own INET6 text form: the first longest zero run (even of one group) is
    compressed, and IPv4-compatible/mapped addresses end in dotted quads."""
    data = raw.ljust(16, b"\0")
    words = struct.unpack(">8H", data)
    gap_pos, gap_len, run_pos, run_len = -1, 0, -1, 0
    for i, word in enumerate((*words, 1)):  # the sentinel closes a trailing run
        if word == 0:
            run_pos, run_len = (run_pos, run_len + 1) if run_pos >= 0 else (i, 1)
        elif run_pos >= 0:
            if run_len > gap_len:
                gap_pos, gap_len = run_pos, run_len
            run_pos, run_len = -1, 0
    if gap_pos == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
        prefix = "::" if gap_len == 6 else "::ffff:"
        return prefix + ".".join(str(b) for b in data[12:])
    parts: list[str] = []
    i = 0
    while i < 8:
        if i == gap_pos:
            parts.append(":" if i == 0 else "")
            i += gap_len
            if i == 8:
                parts.append("")
            continue
        parts.append(f"{words[i]:x}")
        i += 1
    return ":".join(parts)


def _enum(size: int, members: tuple[str, ...]) -> ValueDecoder:
    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        index = int.from_bytes(data[pos : pos + size], "little")
        return (members[index - 1] if 0 < index <= len(members) else ""), pos + size

    return decode


def _set(size: int, members: tuple[str, ...]) -> ValueDecoder:
    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        mask = int.from_bytes(data[pos : pos + size], "little")
        return [m for i, m in enumerate(members) if mask >> i & 1], pos + size

    return decode


def _bit(nbytes: int) -> ValueDecoder:
    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        end = pos + nbytes
        return int.from_bytes(data[pos:end], "big"), end

    return decode


def _bit_decimal(nbytes: int) -> ValueDecoder:
    inner = _bit(nbytes)

    def decode(data: bytes, pos: int) -> tuple[Any, int]:
        value, end = inner(data, pos)
        return Decimal(value), end

    return decode


_INT_SIZES = {t.T_TINY: 1, t.T_SHORT: 2, t.T_INT24: 3, t.T_LONG: 4, t.T_LONGLONG: 8}


def make_decoder(col: BinlogColumn, kind: str, codec: str | None) -> ValueDecoder:
    """The decoder for one column; ``kind`` is its schema kind, ``codec`` its text codec."""
    ct = col.type
    if ct in _INT_SIZES:
        if kind == "uint64":
            return _uint64_decimal
        return _int(_INT_SIZES[ct], signed=not col.unsigned)
    simple: dict[int, ValueDecoder] = {
        t.T_FLOAT: _float,
        t.T_DOUBLE: _double,
        t.T_YEAR: _year,
        t.T_DATE: _date,
        t.T_NEWDATE: _date,
        t.T_TIMESTAMP: _old_timestamp,
        t.T_DATETIME: _old_datetime,
        t.T_TIME: _old_time,
    }
    if ct in simple:
        return simple[ct]
    if ct == t.T_NEWDECIMAL:
        return _decimal(col.precision, col.scale)
    if ct == t.T_DATETIME2:
        return _datetime2(col.scale)
    if ct == t.T_TIMESTAMP2:
        return _timestamp2(col.scale)
    if ct == t.T_TIME2:
        return _time2(col.scale)
    if ct == t.T_BIT:
        nbytes = (col.bits + 7) // 8
        return _bit_decimal(nbytes) if kind == "uint64" else _bit(nbytes)
    if ct in (t.T_ENUM, t.T_SET):
        members = tuple(m.decode(codec or "utf-8") for m in col.members)
        return (_enum if ct == t.T_ENUM else _set)(col.length, members)
    return _string_decoder(col, kind, codec)


def _string_decoder(col: BinlogColumn, kind: str, codec: str | None) -> ValueDecoder:
    ct = col.type
    if ct in (t.T_VARCHAR, t.T_VAR_STRING, t.T_STRING):
        prefix = 1 if col.length < 256 else 2
    elif ct in t.BLOB_TYPES or ct in (t.T_GEOMETRY, t.T_JSON):
        prefix = col.length
    else:
        raise DecodeError(f"column {col.name!r} has an unsupported binlog type {ct}")
    if ct == t.T_JSON:
        raise DecodeError(
            f"column {col.name!r} uses MySQL's binary JSON, which this relay does not decode yet"
        )
    finish: Callable[[bytes], Any]
    if kind == "uuid":
        finish = _uuid_text
    elif kind == "inet6":
        finish = _inet6_text
    elif codec is None:
        finish = _padded(col.length) if ct == t.T_STRING else bytes
    else:
        finish = _text(codec)
    return _length_prefixed(prefix, finish)
