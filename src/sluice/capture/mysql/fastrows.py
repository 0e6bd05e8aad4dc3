"""The compiled transcoder (``_rows.c``) of a table map: every column kind a table can have.

``_rows.Program`` is the C twin of ``transcode.build_transcoder``'s generated functions: it
takes a whole rows event and returns its wire events, byte for byte what the Python path
returns (``tests/unit/test_fastrows.py`` compares them on every type). The Python path stays
the reference and the fallback:

- every column form has a C reader, keys of every kind included (unsigned 64-bit integers,
  SET, TIME(n), BIT, FLOAT, DECIMAL up to 65 digits, BINARY(n), UUID, INET6, one-byte
  charsets such as latin1, the pre-5.6 temporal forms); the rare rest (a multi-byte charset
  other than UTF-8, a JSON key) is a CALL column, read by its Python decoder and encoder from
  the C loop, so its table still takes the compiled path;
- without the extension (a build without a compiler) every table keeps the Python path, and
  capture says so once with a WARNING;
- ``SLUICE_PURE_PYTHON=1`` forces the Python path (to compare, or to rule the C code out).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.transcode import FIXED_TYPES, ColumnPlan, copy_width, copyable
from sluice.schemas.avro import key_formatter
from sluice.schemas.compiled import Choice, load, pure_python_forced
from sluice.schemas.encoder import column_encoder, long

_rows, _MISSING = load("sluice.capture.mysql._rows", "the compiled transcoder")

# Column forms, as _rows.c numbers them.
(
    _INT,
    _INT24,
    _YEAR,
    _DOUBLE,
    _COPY,
    _DECIMAL,
    _DATE,
    _DATETIME2,
    _TIMESTAMP2,
    _ENUM,
    _UINT64,
    _BIT,
    _FLOAT,
    _TIME2,
    _SET,
    _PAD,
    _CHARMAP,
    _UUID,
    _INET6,
    _OLD_TIMESTAMP,
    _OLD_DATETIME,
    _OLD_TIME,
    _CALL,
) = range(1, 24)
_SIZES = {t.T_TINY: 1, t.T_SHORT: 2, t.T_LONG: 4, t.T_LONGLONG: 8}
_TEXT = (t.T_VARCHAR, t.T_VAR_STRING, t.T_STRING, *t.BLOB_TYPES)
_TEMPORAL = {
    t.T_DATE: _DATE,
    t.T_NEWDATE: _DATE,
    t.T_DATETIME2: _DATETIME2,
    t.T_TIMESTAMP2: _TIMESTAMP2,
    t.T_TIME2: _TIME2,
    t.T_TIMESTAMP: _OLD_TIMESTAMP,
    t.T_DATETIME: _OLD_DATETIME,
    t.T_TIME: _OLD_TIME,
}
# The charsets whose every byte is one character on its own (``metadata._CODECS``'s
# one-byte ones): read through a 256-entry table of UTF-8. MySQL's latin1 is cp1252 with
# the five bytes it leaves undefined mapped to U+0081.. (``values._mysql_latin1``).
ONE_BYTE_CODECS = frozenset(
    {
        "ascii",
        "cp1250",
        "cp1251",
        "cp1252",
        "cp1256",
        "cp1257",
        "cp850",
        "cp852",
        "cp866",
        "iso8859-2",
        "iso8859-7",
        "iso8859-8",
        "iso8859-9",
        "iso8859-13",
        "koi8-r",
        "koi8-u",
        "mac_latin2",
        "mac_roman",
        "tis-620",
    }
)
WRITE, UPDATE, DELETE = 0, 1, 2


def unavailable() -> str:
    """Why no table can take the compiled path ('' when it can)."""
    return _MISSING or pure_python_forced()


def program(plans: Sequence[ColumnPlan], key: Sequence[int], source: bytes, version: int) -> Choice:
    """The compiled transcoder of one table map (``key``: the primary key's column indexes)."""
    why = unavailable()
    if why:
        return Choice(None, why)
    if len(plans) > 4096:
        return Choice(None, f"{len(plans)} columns (the compiled path reads up to 4096)")
    slots = {i: n for n, i in enumerate(key)}
    columns = tuple(_column(p, slots.get(i, -1)) for i, p in enumerate(plans))
    assert _rows is not None
    try:
        return Choice(_rows.Program(columns, _key_parts(plans, key), source, version), "")
    except (ValueError, TypeError) as exc:  # a column description it does not take
        return Choice(None, f"the compiled transcoder refused the table: {exc}")


ColumnForm = tuple[int, int, int, int, int, int, int, int, Any]


def python_columns(plans: Sequence[ColumnPlan], key: Sequence[int]) -> list[str]:
    """The columns the compiled path reads through their Python decoder (CALL columns)."""
    slots = {i: n for n, i in enumerate(key)}
    return [
        p.schema.name for i, p in enumerate(plans) if _column(p, slots.get(i, -1))[0] == _CALL
    ]


def _form(
    p: ColumnPlan, slot: int, op: int, width: int = 0, a: int = 0, b: int = 0, extra: Any = None
) -> ColumnForm:
    """``(form, width, signed, union, nullable, key slot, a, b, extra)``: what ``_rows.c``'s
    ``parse_col`` takes (a and b: precision and scale, fsp, or a flag; extra: members, a
    charset's table, or the Python callables of a CALL column)."""
    col = p.binlog
    return (op, width, int(not col.unsigned), int(p.union), int(col.nullable), slot, a, b, extra)


def _column(p: ColumnPlan, slot: int) -> ColumnForm:
    """Column ``p``'s form (``slot``: its place in the key, or -1)."""
    col, kind, ct = p.binlog, p.schema.kind, p.binlog.type
    if ct in FIXED_TYPES or ct == t.T_INT24:
        if kind == "uint64":
            return _form(p, slot, _UINT64, 8)
        if ct in FIXED_TYPES:
            return _form(p, slot, _YEAR) if ct == t.T_YEAR else _form(p, slot, _INT, _SIZES[ct])
        return _form(p, slot, _INT24)
    if ct == t.T_DOUBLE:
        return _form(p, slot, _DOUBLE)
    if ct == t.T_FLOAT:
        return _form(p, slot, _FLOAT)
    if ct == t.T_BIT:
        nbytes = (col.bits + 7) // 8
        if kind == "uint64":
            return _form(p, slot, _UINT64, nbytes, 1)
        return _form(p, slot, _BIT, nbytes)
    if ct == t.T_NEWDECIMAL:
        return _form(p, slot, _DECIMAL, 0, col.precision, col.scale)
    if ct in _TEMPORAL:
        return _form(p, slot, _TEMPORAL[ct], 0, col.scale)
    if ct == t.T_ENUM:
        return _form(p, slot, _ENUM, col.length, extra=_enum_members(p))
    if ct == t.T_SET:
        return _form(p, slot, _SET, col.length, extra=_set_members(p))
    if ct in _TEXT or ct == t.T_GEOMETRY:
        return _string_form(p, slot)
    return _form(p, slot, _CALL, extra=_callables(p, slot))


def _string_form(p: ColumnPlan, slot: int) -> ColumnForm:
    col, kind = p.binlog, p.schema.kind
    width = col.length if col.type == t.T_GEOMETRY else copy_width(col)
    key_reformats = slot >= 0 and kind == "json"  # a JSON key is its parsed document's text
    if kind in ("uuid", "inet6"):
        return _form(p, slot, _UUID if kind == "uuid" else _INET6, width)
    if kind in ("bytes", "geometry") and p.codec is None:
        if col.type == t.T_STRING:  # BINARY(n): zero-padded to n
            return _form(p, slot, _PAD, width, col.length)
        return _form(p, slot, _COPY, width, 1)
    if copyable(p) and not key_reformats:
        return _form(p, slot, _COPY, width)
    if p.codec in ONE_BYTE_CODECS and not key_reformats:
        return _form(p, slot, _CHARMAP, width, extra=charset_map(p.codec))
    return _form(p, slot, _CALL, extra=_callables(p, slot))


def charset_map(codec: str) -> tuple[bytes | None, ...]:
    """Each byte's UTF-8 in a one-byte charset (None: a byte it does not map)."""
    errors = "sluice-latin1" if codec == "cp1252" else "strict"
    out: list[bytes | None] = []
    for byte in range(256):
        try:
            out.append(bytes([byte]).decode(codec, errors).encode())
        except UnicodeDecodeError:
            out.append(None)
    return tuple(out)


def _members(p: ColumnPlan) -> list[str]:
    return [m.decode(p.codec or "utf-8") for m in p.binlog.members]


def _enum_members(p: ColumnPlan) -> tuple[Any, ...]:
    """ENUM: each member's Avro bytes (union branch included), the bytes of '' (an index
    past the members), and both as key text."""
    encode = column_encoder(p.schema)
    branch = b"\x02" if p.union else b""
    names = _members(p)
    return (
        tuple(branch + encode(m) for m in names),
        branch + encode(""),
        tuple(json.dumps(m, ensure_ascii=False).encode() for m in names),
        b'""',
    )


def _set_members(p: ColumnPlan) -> tuple[Any, ...]:
    """SET: each member as an Avro string, and as JSON (key text)."""
    names = [m.encode() for m in _members(p)]
    return (
        tuple(long(len(m)) + m for m in names),
        tuple(json.dumps(m.decode(), ensure_ascii=False).encode() for m in names),
    )


def _callables(p: ColumnPlan, slot: int) -> tuple[Any, Any, Any]:
    """A CALL column's decoder, its schema's encoder, and its key formatter (keys only)."""
    formatter = key_formatter(p.schema.kind) if slot >= 0 else None
    return (p.decoder, column_encoder(p.schema), formatter)


KeyPart = tuple[int, bytes]  # column, JSON prefix


def _key_parts(plans: Sequence[ColumnPlan], key: Sequence[int]) -> tuple[KeyPart, ...]:
    """The key's JSON prefixes in ``transcode``'s order (sorted by name): ``{"a":``, ``,"b":``."""
    parts = []
    for n, i in enumerate(sorted(key, key=lambda i: plans[i].schema.name)):
        name = json.dumps(plans[i].schema.name, ensure_ascii=False).encode()
        parts.append((i, (b"," if n else b"{") + name + b":"))
    return tuple(parts)
