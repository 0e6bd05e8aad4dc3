"""The compiled rows transcoder (``_rows.c``) gives exactly the generated Python transcoder's
events, and both the reference path's (values, then the schema's encoder): on random row
images of every column form it reads, NULLs, edge values, every key shape, all three kinds
of rows event, and primary-key changes."""

from __future__ import annotations

import dataclasses
import os
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.capture.mysql import fastrows
from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.binlog.tablemap import BinlogColumn, TableMap
from sluice.capture.mysql.metadata import ColumnInfo
from sluice.capture.mysql.tables import TableDecoder
from sluice.schemas import SchemaRegistry

UTF8, BINARY, LATIN1, CP1251, UTF16 = 45, 63, 8, 14, 54
COLLATIONS: dict[int, str | None] = {
    UTF8: "utf-8",
    BINARY: None,
    LATIN1: "cp1252",
    CP1251: "cp1251",
    UTF16: "utf-16-be",
}
INFO = {
    "uu": ColumnInfo("uuid", False),
    "i6": ColumnInfo("inet6", False),
    "js": ColumnInfo("longtext", True),
}
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
    # Issue 40: the forms that kept the Python path before.
    _col("ubi", t.T_LONGLONG, unsigned=True),  # BIGINT UNSIGNED: uint64
    _col("mie", t.T_INT24, unsigned=True),
    _col("fl", t.T_FLOAT, length=4),
    *(_col(f"bit{n}", t.T_BIT, bits=n) for n in (1, 10, 63, 64)),  # BIT(64): uint64
    *(_col(f"tm{f}", t.T_TIME2, scale=f) for f in range(7)),
    _col("st", t.T_SET, collation=UTF8, length=1, members=(b"a", b"b,", b'"c"', b"\xc3\xa9")),
    _col("st64", t.T_SET, collation=UTF8, length=8, members=tuple(b"m%d" % n for n in range(64))),
    _col("bn", t.T_STRING, collation=BINARY, length=16),  # BINARY(16): zero-padded
    _col("uu", t.T_STRING, collation=BINARY, length=16),
    _col("i6", t.T_STRING, collation=BINARY, length=16),
    _col("geo", t.T_GEOMETRY, collation=BINARY, length=4),
    _col("js", t.T_BLOB, collation=UTF8, length=4),
    _col("l1", t.T_VARCHAR, collation=LATIN1, length=300),
    _col("cy", t.T_BLOB, collation=CP1251, length=2),
    _col("u16", t.T_VARCHAR, collation=UTF16, length=100),  # read by its Python decoder
    _col("d65", t.T_NEWDECIMAL, precision=65, scale=30),
    _col("d40", t.T_NEWDECIMAL, precision=40, scale=0),
    _col("ots", t.T_TIMESTAMP),
    _col("odt", t.T_DATETIME),
    _col("otm", t.T_TIME),
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


_ISSUE40_TEXTS = frozenset({"bn", "uu", "i6", "geo", "js", "l1", "cy", "u16"})


def _time2(draw: st.DrawFn, fsp: int) -> bytes:
    """A TIME(fsp) as MySQL's my_time_packed_to_binary stores it: up to +-838:59:59 (hours
    past 24), microseconds cut to fsp digits, negative values with their borrowed fraction."""
    h: int = draw(st.one_of(st.sampled_from([0, 23, 24, 100, 838]), st.integers(0, 1023)))
    m: int = draw(st.integers(0, 59))
    s: int = draw(st.integers(0, 59))
    unit = 10 ** (6 - fsp)
    micros: int = draw(st.sampled_from([0, 999999 // unit * unit, unit]) | st.integers(0, 999999))
    micros -= micros % unit
    nr = ((h << 12 | m << 6 | s) << 24) + micros
    if draw(st.booleans()):
        nr = -nr
    whole = nr >> 24  # C's >> (floor) and % (truncated), as the server computes them
    frac = -((-nr) % (1 << 24)) if nr < 0 else nr % (1 << 24)
    head = (whole + 0x800000).to_bytes(3, "big")
    if fsp in (1, 2):
        return head + (frac // 10000 if frac >= 0 else -(-frac // 10000)).to_bytes(
            1, "big", signed=True
        )
    if fsp in (3, 4):
        return head + (frac // 100 if frac >= 0 else -(-frac // 100)).to_bytes(
            2, "big", signed=True
        )
    if fsp in (5, 6):
        return (nr + 0x800000000000).to_bytes(6, "big")
    return head


def _inet6(draw: st.DrawFn) -> bytes:
    """16 bytes with zero runs (and the IPv4-mapped and -compatible forms), trailing zero
    bytes stripped as the binlog strips them."""
    word = st.sampled_from([0, 0, 0, 0xFFFF, 1]) | st.integers(0, 0xFFFF)
    raw = b"".join(w.to_bytes(2, "big") for w in draw(st.lists(word, min_size=8, max_size=8)))
    return raw.rstrip(b"\0")


def _value(draw: st.DrawFn, col: BinlogColumn) -> bytes:
    """One non-NULL column value as the binlog stores it."""
    ct = col.type
    if col.name in _ISSUE40_TEXTS:
        return _value_issue40(draw, col)
    sizes = {t.T_TINY: 1, t.T_SHORT: 2, t.T_INT24: 3, t.T_LONG: 4, t.T_LONGLONG: 8}
    if ct in sizes:
        bits = sizes[ct] * 8
        lo, hi = (0, 2**bits - 1) if col.unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        edges = (lo, hi, 0, -1 if lo else 1, hi >> 1, (hi >> 1) + 1)  # 2**63: uint64's middle
        edge = st.sampled_from([v for v in edges if lo <= v <= hi])
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
    return _value_issue40(draw, col)


def _value_issue40(draw: st.DrawFn, col: BinlogColumn) -> bytes:
    ct = col.type
    if ct == t.T_FLOAT:  # any float32, NaNs with payloads included
        bits = st.integers(0, 2**32 - 1) | st.sampled_from([0x7FC00000, 0xFFC00000, 0x80000000])
        packed = st.floats(width=32).map(lambda f: struct.pack("<f", f)) | bits.map(
            lambda b: b.to_bytes(4, "little")
        )
        value: bytes = draw(packed)
        return value
    if ct == t.T_BIT:  # any bytes: a BIT(63) may hold 64 bits
        nbytes = (col.bits + 7) // 8
        edge = st.sampled_from([b"\0" * nbytes, b"\xff" * nbytes, b"\x80" + b"\0" * (nbytes - 1)])
        return draw(edge | st.binary(min_size=nbytes, max_size=nbytes))
    if ct == t.T_TIME2:
        nbytes = (col.scale + 1) // 2
        if draw(st.booleans()):
            return _time2(draw, col.scale)
        return draw(st.binary(min_size=3 + nbytes, max_size=3 + nbytes))
    if ct == t.T_SET:
        full = (1 << len(col.members)) - 1
        mask = draw(
            st.sampled_from([0, full, 1, 1 << (len(col.members) - 1)])
            | st.integers(0, 2 ** (8 * col.length) - 1)
        )
        return mask.to_bytes(col.length, "little")
    if ct == t.T_STRING and col.name == "i6":
        raw = _inet6(draw)
        return bytes([len(raw)]) + raw
    if ct == t.T_STRING:  # BINARY(16), UUID: the binlog strips trailing zero bytes
        raw = draw(st.binary(max_size=16)).rstrip(b"\0")
        return bytes([len(raw)]) + raw
    if ct in (t.T_GEOMETRY, t.T_BLOB, t.T_VARCHAR):
        prefix = col.length if ct != t.T_VARCHAR else (1 if col.length < 256 else 2)
        if col.collation == UTF16:
            raw = draw(st.text(max_size=40)).encode("utf-16-be")
        elif col.collation == CP1251:  # bytes cp1251 maps (0x98 it does not)
            raw = bytes(draw(st.lists(st.integers(0, 255).filter(lambda b: b != 0x98))))
        elif col.collation == UTF8:
            text = draw(st.sampled_from(['{"a": 1}', "[]", '"x"', "null"]))
            raw = text.encode()
        else:  # latin1 (any byte), geometry
            raw = draw(st.binary(max_size=300))
        return len(raw).to_bytes(prefix, "little") + raw
    if ct == t.T_TIMESTAMP:
        return draw(st.sampled_from([0, 1, 2**31]) | st.integers(0, 2**32 - 1)).to_bytes(
            4, "little"
        )
    if ct == t.T_DATETIME:
        y, m, d = draw(st.integers(0, 9999)), draw(st.integers(0, 12)), draw(st.integers(0, 31))
        hms = (
            draw(st.integers(0, 23)) * 10000
            + draw(st.integers(0, 59)) * 100
            + draw(st.integers(0, 59))
        )
        number: int = draw(
            st.just((y * 10000 + m * 100 + d) * 1_000_000 + hms) | st.integers(0, 2**64 - 1)
        )
        return number.to_bytes(8, "little")
    if ct == t.T_TIME:
        hms = (
            draw(st.integers(0, 838)) * 10000
            + draw(st.integers(0, 59)) * 100
            + draw(st.integers(0, 59))
        )
        signed: int = draw(st.sampled_from([hms, -hms]) | st.integers(-(2**23), 2**23 - 1))
        return signed.to_bytes(3, "little", signed=True)
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
    return TableDecoder(table_map, SchemaRegistry(), COLLATIONS, INFO)


def _body(
    data: st.DataObject, columns: tuple[BinlogColumn, ...], key: tuple[int, ...], kind: int
) -> bytes:
    """A rows event body of 1-4 rows (updates: half of them keep their key)."""
    present = b"\xff" * ((len(columns) + 7) // 8)
    body = bytearray((7).to_bytes(6, "little") + b"\0\0" + bytes([len(columns)]) + present)
    if kind == t.UPDATE_ROWS_V1:
        body += present  # the after image's
    for _ in range(data.draw(st.integers(1, 4))):
        before = data.draw(_image(columns, {}))
        body += before
        if kind == t.UPDATE_ROWS_V1:
            same = data.draw(st.booleans())
            keep = _key_bytes(before, columns, key) if same else {}
            body += data.draw(_image(columns, keep))
    return bytes(body)


KEYS = {"int": (0,), "composite": (1, 0), "text": (1,), "none": ()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), keyed=st.sampled_from(sorted(KEYS)), kind=st.sampled_from((23, 24, 25)))
def test_compiled_events_equal_the_python_and_reference_paths(
    data: st.DataObject, keyed: str, kind: int
) -> None:
    key = KEYS[keyed]
    decoder = _decoder(COLUMNS, key)
    assert decoder._program is not None, decoder.python_why
    body = _body(data, COLUMNS, key, kind)
    compiled = decoder.events(kind, body)
    pos = decoder._rows(kind, body)[1]
    assert compiled == decoder.python_events(kind, body, pos)
    assert compiled == list(decoder.reference_events(kind, body))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    index=st.sampled_from(range(len(COLUMNS))),
    composite=st.booleans(),
    kind=st.sampled_from((23, 24, 25)),
)
def test_a_key_of_every_column_kind_gives_the_python_and_reference_events(
    data: st.DataObject, index: int, composite: bool, kind: int
) -> None:
    """Every column form as a (NOT NULL) primary key: uint64, SET, TIME(n) with negative and
    >24 h values, BIT, FLOAT, DECIMAL(65), dates (a zero date's key is null), bytes as base64,
    UUID, INET6, one-byte charsets, a JSON key (read by its Python decoder)."""
    keyed = dataclasses.replace(COLUMNS[index], nullable=False)
    columns = (
        keyed,
        _col("zz", t.T_LONG, False),
        _col("zv", t.T_VARCHAR, collation=UTF8, length=9),
    )
    key = (0, 1) if composite else (0,)
    decoder = _decoder(columns, key)
    assert decoder._program is not None, decoder.python_why
    body = _body(data, columns, key, kind)
    compiled = decoder.events(kind, body)
    assert compiled == decoder.python_events(kind, body, decoder._rows(kind, body)[1])
    assert compiled == list(decoder.reference_events(kind, body))


def test_every_column_kind_takes_the_compiled_path() -> None:
    """No column form sends its table to the Python transcoder; only a multi-byte charset
    other than UTF-8 and a JSON key are read by their Python decoder inside the C loop."""
    decoder = _decoder(COLUMNS, (0,))
    assert decoder._program is not None and decoder.python_why == ""
    assert decoder.python_columns == ["u16"]
    wide = tuple(_col(f"c{n}", t.T_LONG, n == 0) for n in range(300))  # past 64 columns
    assert _decoder(wide, (0,))._program is not None


def test_an_undefined_byte_of_a_one_byte_charset_is_a_decode_error_naming_the_column() -> None:
    from sluice.errors import DecodeError

    columns = (COLUMNS[0], _col("cy", t.T_BLOB, collation=CP1251, length=2))
    decoder = _decoder(columns, (0,))
    body = (7).to_bytes(6, "little") + b"\0\0\x02\x03" + b"\0" + b"\1\0\0\0" + b"\2\0a\x98"
    with pytest.raises(DecodeError, match=r"column 'cy'"):
        decoder.events(t.WRITE_ROWS_V1, body)


def test_each_one_byte_charset_maps_bytes_as_its_codec_decodes_strings() -> None:
    raw = bytes(range(256))
    for codec in fastrows.ONE_BYTE_CODECS:
        table = fastrows.charset_map(codec)
        errors = "sluice-latin1" if codec == "cp1252" else "strict"
        ok = bytes(b for b in raw if table[b] is not None)
        assert b"".join(table[b] or b"" for b in ok) == ok.decode(codec, errors).encode(), codec
        for b in raw:
            if table[b] is None:
                with pytest.raises(UnicodeDecodeError):
                    bytes([b]).decode(codec, errors)


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


def test_sluice_pure_python_forces_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
    decoder = _decoder(COLUMNS, (0,))
    assert decoder._program is None and decoder.python_why == "SLUICE_PURE_PYTHON is set"


def test_the_extension_is_built() -> None:
    """`pip install -e .` compiles it; under CI a missing build is a failure, not a fallback."""
    if os.environ.get("CI") != "true" and fastrows.unavailable():
        pytest.skip(fastrows.unavailable())
    assert fastrows.unavailable() == ""
