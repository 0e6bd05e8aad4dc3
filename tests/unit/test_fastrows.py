"""The compiled rows transcoder (``_rows.c``) gives exactly the generated Python transcoder's
events, and both the reference path's (values, then the schema's encoder): on random row
images of every column form it reads, NULLs, edge values, every key shape, all three kinds
of rows event, and primary-key changes."""

from __future__ import annotations

import os
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.capture.mysql import fastrows
from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.binlog.tablemap import BinlogColumn, TableMap
from sluice.capture.mysql.tables import TableDecoder
from sluice.schemas import SchemaRegistry

UTF8, BINARY = 45, 63
COLLATIONS: dict[int, str | None] = {UTF8: "utf-8", BINARY: None}
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _col(name: str, kind: int, nullable: bool = True, **kw: Any) -> BinlogColumn:
    return BinlogColumn(name, kind, nullable, **kw)


# Every column form the compiled transcoder reads; the first two can be key columns.
COLUMNS = (
    _col("id", t.T_LONG, False),
    _col("code", t.T_VARCHAR, False, collation=UTF8, length=40),
    _col("ti", t.T_TINY),
    _col("tiu", t.T_TINY, unsigned=True),
    _col("si", t.T_SHORT),
    _col("siu", t.T_SHORT, unsigned=True),
    _col("mi", t.T_INT24),
    _col("miu", t.T_INT24, unsigned=True),
    _col("li", t.T_LONG),
    _col("liu", t.T_LONG, unsigned=True),
    _col("bi", t.T_LONGLONG),
    _col("yr", t.T_YEAR),
    _col("db", t.T_DOUBLE, length=8),
    _col("vc", t.T_VARCHAR, collation=UTF8, length=1000),
    _col("ch", t.T_STRING, collation=UTF8, length=40),
    _col("vb", t.T_VARCHAR, collation=BINARY, length=200),
    _col("tx", t.T_BLOB, collation=UTF8, length=2),
    _col("tb", t.T_BLOB, collation=BINARY, length=1),
    _col("mb", t.T_BLOB, collation=BINARY, length=3),
    _col("d1", t.T_NEWDECIMAL, precision=10, scale=2),
    _col("d2", t.T_NEWDECIMAL, precision=38, scale=10),
    _col("d3", t.T_NEWDECIMAL, precision=5, scale=0),
    _col("d4", t.T_NEWDECIMAL, precision=19, scale=19),
    _col("dt", t.T_DATE),
    *(_col(f"dtm{f}", t.T_DATETIME2, scale=f) for f in (0, 1, 3, 6)),
    *(_col(f"ts{f}", t.T_TIMESTAMP2, scale=f) for f in (0, 2, 6)),
    _col("en", t.T_ENUM, collation=UTF8, length=1, members=(b"a", b'"q"', b"\xc3\xa9")),
    _col("nn", t.T_LONG, False),
)


def _decimal(precision: int, scale: int, unscaled: int, negative: bool) -> bytes:
    """MySQL's binary DECIMAL: digit groups, the sign in the top bit (negatives inverted)."""
    intg0, intg0x = divmod(precision - scale, 9)
    frac0, frac0x = divmod(scale, 9)
    whole, frac = divmod(unscaled, 10**scale)
    groups: list[tuple[int, int]] = []  # (bytes, value)
    if intg0x:
        groups.append((_DIG2BYTES[intg0x], whole // 10 ** (9 * intg0)))
    groups += [(4, whole // 10 ** (9 * k) % 10**9) for k in reversed(range(intg0))]
    groups += [(4, frac // 10 ** (scale - 9 * (k + 1)) % 10**9) for k in range(frac0)]
    if frac0x:
        groups.append((_DIG2BYTES[frac0x], frac % 10**frac0x))
    raw = bytearray(b"".join(v.to_bytes(n, "big") for n, v in groups))
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
        raw[0] &= 0x7F
    else:
        raw[0] |= 0x80
    return bytes(raw)


def _frac(draw: st.DrawFn, fsp: int) -> bytes:
    nbytes = (fsp + 1) // 2
    return draw(st.integers(0, 10 ** (2 * nbytes) - 1)).to_bytes(nbytes, "big") if nbytes else b""


def _text(draw: st.DrawFn, limit: int, prefix: int) -> bytes:
    raw = draw(st.text(max_size=limit)).encode()[:limit]
    while True:  # cut on a character boundary
        try:
            raw.decode()
            break
        except UnicodeDecodeError:
            raw = raw[:-1]
    return len(raw).to_bytes(prefix, "little") + raw


def _value(draw: st.DrawFn, col: BinlogColumn) -> bytes:
    """One non-NULL column value as the binlog stores it."""
    ct = col.type
    sizes = {t.T_TINY: 1, t.T_SHORT: 2, t.T_INT24: 3, t.T_LONG: 4, t.T_LONGLONG: 8}
    if ct in sizes:
        bits = sizes[ct] * 8
        lo, hi = (0, 2**bits - 1) if col.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        edge = st.sampled_from([lo, hi, 0, -1 if lo else 1])
        value = draw(st.one_of(edge, st.integers(lo, hi)))
        return value.to_bytes(sizes[ct], "little", signed=not col.unsigned)
    if ct == t.T_YEAR:
        return bytes([draw(st.integers(0, 255))])
    if ct == t.T_DOUBLE:
        return struct.pack("<d", draw(st.floats(allow_nan=False)))
    if ct in (t.T_VARCHAR, t.T_STRING) and col.collation == UTF8:
        return _text(draw, min(col.length, 300), 1 if col.length < 256 else 2)
    if ct == t.T_BLOB and col.collation == UTF8:
        return _text(draw, 300, col.length)
    if ct in (t.T_VARCHAR, t.T_BLOB):
        raw = draw(st.binary(max_size=255))
        return len(raw).to_bytes(1 if ct == t.T_VARCHAR else col.length, "little") + raw
    if ct == t.T_NEWDECIMAL:
        top = 10**col.precision - 1
        unscaled = draw(st.one_of(st.sampled_from([0, 1, top]), st.integers(0, top)))
        return _decimal(col.precision, col.scale, unscaled, draw(st.booleans()))
    if ct == t.T_DATE:  # any packed value: zero and impossible dates are NULL on both paths
        y, m, d = draw(st.integers(0, 9999)), draw(st.integers(0, 12)), draw(st.integers(0, 31))
        return (y << 9 | m << 5 | d).to_bytes(3, "little")
    if ct == t.T_DATETIME2:
        y, m, d = draw(st.integers(0, 9999)), draw(st.integers(0, 12)), draw(st.integers(0, 31))
        h, mi, s = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
        packed = ((y * 13 + m) << 5 | d) << 17 | h << 12 | mi << 6 | s
        return (packed + 0x8000000000).to_bytes(5, "big") + _frac(draw, col.scale)
    if ct == t.T_TIMESTAMP2:
        return draw(st.integers(0, 2**31 - 1)).to_bytes(4, "big") + _frac(draw, col.scale)
    if ct == t.T_ENUM:
        return bytes([draw(st.integers(0, 5))])  # 0 and past the members: ''
    raise AssertionError(ct)


@st.composite
def _image(draw: st.DrawFn, columns: tuple[BinlogColumn, ...], keep: dict[int, bytes]) -> bytes:
    """A row image; ``keep`` fixes some columns' bytes (an update that keeps its key)."""
    nulls, parts = 0, []
    for i, col in enumerate(columns):
        if i in keep:
            parts.append(keep[i])
        elif col.nullable and draw(st.booleans()):
            nulls |= 1 << i
        else:
            parts.append(_value(draw, col))
    return nulls.to_bytes((len(columns) + 7) // 8, "little") + b"".join(parts)


def _key_bytes(
    image: bytes, columns: tuple[BinlogColumn, ...], key: tuple[int, ...]
) -> dict[int, bytes]:
    """The key columns' bytes of a NULL-free key (keys are NOT NULL): columns before them
    are re-read by the Python decoder to find where each starts."""
    decoder = _decoder(columns, key)
    pos = (len(columns) + 7) // 8
    nulls = int.from_bytes(image[:pos], "little")
    out = {}
    for i, decode in enumerate(decoder._decoders):
        if nulls >> i & 1:
            continue
        _, end = decode(image, pos)
        if i in key:
            out[i] = image[pos:end]
        pos = end
    return out


def _decoder(columns: tuple[BinlogColumn, ...], key: tuple[int, ...]) -> TableDecoder:
    table_map = TableMap(7, "shop", "t", columns, key, b"sig")
    return TableDecoder(table_map, SchemaRegistry(), COLLATIONS, {})


KEYS = {"int": (0,), "composite": (1, 0), "text": (1,), "none": ()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), keyed=st.sampled_from(sorted(KEYS)), kind=st.sampled_from((23, 24, 25)))
def test_compiled_events_equal_the_python_and_reference_paths(
    data: st.DataObject, keyed: str, kind: int
) -> None:
    key = KEYS[keyed]
    decoder = _decoder(COLUMNS, key)
    assert decoder._program is not None, decoder.python_why
    present = b"\xff" * ((len(COLUMNS) + 7) // 8)
    body = bytearray((7).to_bytes(6, "little") + b"\0\0" + bytes([len(COLUMNS)]) + present)
    if kind == t.UPDATE_ROWS_V1:
        body += present  # the after image's
    for _ in range(data.draw(st.integers(1, 4))):
        before = data.draw(_image(COLUMNS, {}))
        body += before
        if kind == t.UPDATE_ROWS_V1:
            same = data.draw(st.booleans())
            keep = _key_bytes(before, COLUMNS, key) if same else {}
            body += data.draw(_image(COLUMNS, keep))
    body = bytes(body)
    compiled = decoder.events(kind, body)
    pos = decoder._rows(kind, body)[1]
    assert compiled == decoder.python_events(kind, body, pos)
    assert compiled == list(decoder.reference_events(kind, body))


@pytest.mark.parametrize(
    "text",
    ['a"b\\c', "line\nbreak\ttab\r\b\f", "\x00\x01\x1f\x7f", "é€😀", ""],
)
def test_a_text_key_is_escaped_as_json_dumps_does(text: str) -> None:
    decoder = _decoder(COLUMNS[:2], (1, 0))
    raw = text.encode()
    row = b"\0" + (5).to_bytes(4, "little") + bytes([len(raw)]) + raw
    body = (7).to_bytes(6, "little") + b"\0\0\x02\x03" + row
    compiled = decoder.events(t.WRITE_ROWS_V1, body)
    assert compiled == list(decoder.reference_events(t.WRITE_ROWS_V1, body))


def test_a_text_key_that_is_not_utf8_is_a_decode_error_naming_the_table() -> None:
    from sluice.errors import DecodeError

    decoder = _decoder(COLUMNS[:2], (1,))
    row = b"\0" + (5).to_bytes(4, "little") + b"\x02\xff\xfe"
    body = (7).to_bytes(6, "little") + b"\0\0\x02\x03" + row
    with pytest.raises(DecodeError, match=r"shop\.t"):
        decoder.events(t.WRITE_ROWS_V1, body)


def test_a_table_with_a_column_it_does_not_read_keeps_the_python_path_and_says_why() -> None:
    columns = (COLUMNS[0], _col("f", t.T_FLOAT, length=4))
    decoder = _decoder(columns, (0,))
    assert decoder._program is None
    assert "'f' (float)" in decoder.python_why
    body = (7).to_bytes(6, "little") + b"\0\0\x02\x03" + b"\0" + b"\1\0\0\0" + b"\0\0\x80\x3f"
    assert decoder.events(t.WRITE_ROWS_V1, body) == list(
        decoder.reference_events(t.WRITE_ROWS_V1, body)
    )


def test_sluice_pure_python_forces_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
    decoder = _decoder(COLUMNS, (0,))
    assert decoder._program is None and decoder.python_why == "SLUICE_PURE_PYTHON is set"


def test_the_extension_is_built() -> None:
    """`pip install -e .` compiles it; under CI a missing build is a failure, not a fallback."""
    if os.environ.get("CI") != "true" and fastrows.unavailable():
        pytest.skip(fastrows.unavailable())
    assert fastrows.unavailable() == ""
