"""The compiled transcoder (``_rows.c``) of a table map, where every column has a form it reads.

``_rows.Program`` is the C twin of ``transcode.build_transcoder``'s generated functions: it
takes a whole rows event and returns its wire events, byte for byte what the Python path
returns (``tests/unit/test_fastrows.py`` compares them on every type). The Python path stays
the reference and the fallback:

- a table with a column form the C code does not read (FLOAT, BIT, SET, TIME, JSON, DECIMAL
  wider than 38 digits, a key column other than an integer or UTF-8 text...) keeps the
  Python path; ``program`` says why, and capture counts such tables in ``/stats``;
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
from sluice.schemas.compiled import Choice, load, pure_python_forced
from sluice.schemas.encoder import column_encoder

_rows, _MISSING = load("sluice.capture.mysql._rows", "the compiled transcoder")

# Column forms, as _rows.c numbers them.
_INT, _INT24, _YEAR, _DOUBLE, _COPY, _DECIMAL, _DATE, _DATETIME2, _TIMESTAMP2, _ENUM = range(1, 11)
_SIZES = {t.T_TINY: 1, t.T_SHORT: 2, t.T_LONG: 4, t.T_LONGLONG: 8}
_TEXT = (t.T_VARCHAR, t.T_VAR_STRING, t.T_STRING, *t.BLOB_TYPES)
WRITE, UPDATE, DELETE = 0, 1, 2


class Unsupported(Exception):
    """A column form the compiled transcoder does not read; the message says which."""


def unavailable() -> str:
    """Why no table can take the compiled path ('' when it can)."""
    return _MISSING or pure_python_forced()


def program(plans: Sequence[ColumnPlan], key: Sequence[int], source: bytes, version: int) -> Choice:
    """The compiled transcoder of one table map (``key``: the primary key's column indexes)."""
    why = unavailable()
    if why:
        return Choice(None, why)
    if len(plans) > 64:
        return Choice(None, f"{len(plans)} columns (the compiled path reads up to 64)")
    slots = {i: n for n, i in enumerate(key)}
    try:
        columns = tuple(_column(p, slots.get(i, -1)) for i, p in enumerate(plans))
        parts = _key_parts(plans, key)
    except Unsupported as exc:
        return Choice(None, str(exc))
    assert _rows is not None
    try:
        return Choice(_rows.Program(columns, parts, source, version), "")
    except (ValueError, TypeError) as exc:  # a column description it does not take
        return Choice(None, f"the compiled transcoder refused the table: {exc}")


ColumnForm = tuple[int, int, int, int, int, int, int, int, Any]


def _column(p: ColumnPlan, slot: int) -> ColumnForm:
    """``(form, width, signed, union, nullable, key slot, precision/fsp, scale, members)``,
    chosen as ``transcode._Generator.column`` chooses its snippet."""
    col, kind, ct = p.binlog, p.schema.kind, p.binlog.type
    signed, union, in_key = int(not col.unsigned), int(p.union), slot >= 0
    base = (int(col.nullable), slot)

    def form(op: int, width: int = 0, a: int = 0, b: int = 0, members: Any = None) -> ColumnForm:
        return (op, width, signed, union, *base, a, b, members)

    if ct in FIXED_TYPES and kind != "uint64":
        return form(_YEAR) if ct == t.T_YEAR else form(_INT, _SIZES[ct])
    if ct == t.T_INT24 and kind == "int":
        return form(_INT24)
    if ct == t.T_DOUBLE and not in_key:
        return form(_DOUBLE)
    if ct in _TEXT and copyable(p) and not (in_key and p.codec is None):
        if in_key and kind != "string":
            raise Unsupported(f"key column {col.name!r} of kind {kind}")
        return form(_COPY, copy_width(col))
    if in_key:
        raise Unsupported(f"key column {col.name!r} of kind {kind}")
    if ct == t.T_NEWDECIMAL and col.precision <= 38:
        return form(_DECIMAL, 0, col.precision, col.scale)
    if ct in (t.T_DATE, t.T_NEWDATE):
        return form(_DATE)
    if ct in (t.T_DATETIME2, t.T_TIMESTAMP2):
        return form(_DATETIME2 if ct == t.T_DATETIME2 else _TIMESTAMP2, 0, col.scale)
    if ct == t.T_ENUM and col.length in (1, 2):
        encode = column_encoder(p.schema)
        branch = b"\x02" if p.union else b""
        names = [m.decode(p.codec or "utf-8") for m in col.members]
        members = (tuple(branch + encode(m) for m in names), branch + encode(""))
        return form(_ENUM, col.length, members=members)
    raise Unsupported(f"column {col.name!r} ({p.schema.source_type})")


KeyPart = tuple[int, bytes, bool]  # column, JSON prefix, text


def _key_parts(plans: Sequence[ColumnPlan], key: Sequence[int]) -> tuple[KeyPart, ...]:
    """The key's JSON prefixes in ``transcode``'s order (sorted by name): ``{"a":``, ``,"b":``."""
    parts = []
    for n, i in enumerate(sorted(key, key=lambda i: plans[i].schema.name)):
        name = json.dumps(plans[i].schema.name, ensure_ascii=False).encode()
        parts.append((i, (b"," if n else b"{") + name + b":", plans[i].schema.kind == "string"))
    return tuple(parts)
