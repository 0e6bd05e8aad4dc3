"""The fast path of PostgreSQL capture: a function generated per relation that reads a
pgoutput TupleData straight into the schema's Avro row bytes and the key's canonical text,
without a list of Python values per row (the slow path, ``_Table.values`` + the schema's
encoder, is the reference it must equal byte for byte; the tests compare both).

Integers and texts are written inline; other kinds convert their text once, through a
bounded cache of their encoded bytes (tables repeat dates and timestamps). An unchanged
TOASTed value, or a null where the schema has no null, raises ``Slow``: the caller then takes
the slow path, which knows what to do and how to name a bad column.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from typing import Any

from sluice.capture.postgres.types import same_text
from sluice.schemas import Column
from sluice.schemas.avro import key_formatter
from sluice.schemas.codegen import run_generated
from sluice.schemas.encoder import SMALL_UNION_VARINTS, SMALL_VARINTS, column_encoder, varint

_CACHE_LIMIT = 65_536
_TEXT_KINDS = ("string", "json", "uuid", "enum", "inet6")
_CACHED = ("date", "datetime", "timestamp", "time")  # few distinct values per table
RowTranscode = Callable[[bytes, int], tuple[bytes, str | None, int]]


class Slow(Exception):
    """This tuple needs the slow path."""


def _cached(encode: Callable[[Any], bytes], convert: Callable[[str], Any], union: bool) -> Any:
    """``bytes text -> Avro bytes (with the union's branch)``, cached; None values are null."""
    cache: dict[bytes, bytes] = {}

    def miss(raw: bytes) -> bytes:
        value = convert(raw.decode())
        if value is None:
            if not union:
                raise Slow
            out = b"\x00"
        else:
            out = (b"\x02" if union else b"") + encode(value)
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[raw] = out
        return out

    return cache, miss


def build_row_transcoder(
    columns: Sequence[Column], key: Sequence[str], converters: Sequence[Callable[[str], Any]]
) -> RowTranscode:
    """``row(data, pos) -> (Avro row bytes, canonical key text or None, pos after)``."""
    env: dict[str, Any] = {
        "_S": SMALL_VARINTS,
        "_SU": SMALL_UNION_VARINTS,
        "_V": varint,
        "_Slow": Slow,
        "_U": struct.Struct(">I").unpack_from,
    }
    lines = ["def row(data, pos):", "    pos += 2  # the column count: the relation's"]
    index = {c.name: i for i, c in enumerate(columns)}
    for i, col in enumerate(columns):
        lines += _column(i, col, converters[i], col.name in key, env)
    parts = ", ".join(f"p{i}" for i in range(len(columns))) + ("," if len(columns) == 1 else "")
    lines.append(f"    return b''.join(({parts})), {_key_expr(columns, key, index, env)}, pos")
    run_generated(lines, env, "pgoutput transcoder")
    row: RowTranscode = env["row"]
    return row


def _column(
    i: int, col: Column, convert: Callable[[str], Any], in_key: bool, env: dict[str, Any]
) -> list[str]:
    union = isinstance(col.avro_type(), list)
    null = [f'    p{i} = b"\\x00"'] if union else ["    raise _Slow"]
    body = _value(i, col, convert, union, in_key, env)
    return [
        f"    # column {i}: {col.name!r}",
        "    c = data[pos]",
        "    if c == 116:",
        "        n = _U(data, pos + 1)[0]; pos += 5",
        "        r = data[pos : pos + n]; pos += n",
        *(f"        {line}" for line in body),
        "    elif c == 110:",
        "        pos += 1",
        *(f"    {line}" for line in null),
        *([f"        k{i} = None"] if in_key else []),
        "    else:",
        "        raise _Slow",
    ]


def _value(
    i: int,
    col: Column,
    convert: Callable[[str], Any],
    union: bool,
    in_key: bool,
    env: dict[str, Any],
) -> list[str]:
    small, prefix = ("_SU", 'b"\\x02" + ') if union else ("_S", "")
    kind = col.kind
    if kind == "int":
        lines = [
            "x = int(r); z = (x << 1) ^ (x >> 63)",
            f"p{i} = {small}[z] if z < 16384 else {prefix}_V(z)",
        ]
        return lines + ([f"k{i} = x"] if in_key else [])
    if (
        kind in _TEXT_KINDS and convert is same_text
    ):  # UTF-8 bytes as they came, behind their length
        lines = ["m = n << 1", f"p{i} = {prefix}(_S[m] if m < 16384 else _V(m)) + r"]
        return lines + ([f"k{i} = r.decode()"] if in_key else [])
    if kind == "bool":  # a long: 1 (b"\\x02") or 0
        yes, no = (b"\x02\x02", b"\x02\x00") if union else (b"\x02", b"\x00")
        lines = [f"p{i} = {yes!r} if r == b't' else {no!r}"]
        return lines + ([f"k{i} = r == b't'"] if in_key else [])
    if kind == "double":  # float() reads the text's bytes as they are
        env["_D"] = struct.Struct("<d").pack
        return [f"x = float(r); p{i} = {prefix}_D(x)"] + ([f"k{i} = x"] if in_key else [])
    env[f"_v{i}"], env[f"_e{i}"] = convert, column_encoder(col)
    if kind in _CACHED:
        cache, miss = _cached(column_encoder(col), convert, union)
        env[f"_c{i}"], env[f"_m{i}"] = cache, miss
        lines = [f"p{i} = _c{i}.get(r) or _m{i}(r)"]
        return lines + ([f"k{i} = _v{i}(r.decode())"] if in_key else [])
    null = 'b"\\x00"' if union else "_no_null()"
    env["_no_null"] = _no_null
    lines = [f"x = _v{i}(r.decode())", f"p{i} = {null} if x is None else {prefix}_e{i}(x)"]
    return lines + ([f"k{i} = x"] if in_key else [])


def _no_null() -> bytes:
    raise Slow


def _key_expr(
    columns: Sequence[Column], key: Sequence[str], index: dict[str, int], env: dict[str, Any]
) -> str:
    """The key's canonical JSON (sorted, compact), as ``RowCodec.key_text`` makes it."""
    if not key:
        return "None"
    pieces = []
    for n, name in enumerate(sorted(key)):
        i = index[name]
        env[f"_f{i}"] = key_formatter(columns[i].kind)
        prefix = ("{" if n == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":"
        pieces.append(f"{prefix!r} + _f{i}(k{i})")
    return " + ".join(pieces) + " + '}'"
