"""Binlog row image -> Avro ``Row`` bytes, generated once per table map (capture's hot path).

Most columns never become Python values: integers go from one ``struct`` unpack of a
fixed-width run to a zigzag varint, UTF-8 text and blobs are copied with a new length prefix,
DOUBLE is copied as is (both formats are little-endian IEEE), DECIMAL goes from MySQL's
digit groups to an unscaled integer, and dates come from a small cache keyed by the packed
date. Only primary-key columns produce values (for the key bytes). Columns without a fast
form decode to canonical values and go through the schema's column encoder, so both paths
give the same bytes; ``TableDecoder.reference_events`` is the slow path the tests compare to.

The generated functions are ``row(data, pos) -> (avro_row, key_bytes, pos)`` and, for
write-rows events, ``inserts(data, pos, end) -> wire events`` (the loop and the framing in
one function). A row without NULLs (the common case) takes a variant without NULL checks.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from zlib import crc32

from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.binlog.tablemap import BinlogColumn
from sluice.capture.mysql.binlog.values import ValueDecoder, days_since_epoch
from sluice.core import wire
from sluice.schemas.avro import key_formatter
from sluice.schemas.codegen import run_generated
from sluice.schemas.columns import Column
from sluice.schemas.encoder import (
    CONT14_VARINTS,
    SMALL_UNION_VARINTS,
    SMALL_VARINTS,
    column_encoder,
    varint,
)

_CONT14_UNION = [b"\x02" + b for b in CONT14_VARINTS]

Transcode = Callable[[bytes, int], tuple[bytes, "bytes | None", int]]

_FIXED = {t.T_TINY: "b", t.T_SHORT: "h", t.T_LONG: "i", t.T_LONGLONG: "q", t.T_YEAR: "B"}
FIXED_TYPES = frozenset(_FIXED)
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_TEXT_TYPES = (t.T_VARCHAR, t.T_VAR_STRING, t.T_STRING, *t.BLOB_TYPES)
_CACHE_LIMIT = 1 << 16


@dataclass(frozen=True, slots=True)
class ColumnPlan:
    """What the generator needs to know about one column."""

    binlog: BinlogColumn
    schema: Column
    codec: str | None
    decoder: ValueDecoder
    union: bool  # the Avro type is ["null", ...]: values carry a branch byte


def _date_cache() -> tuple[dict[int, bytes], Callable[[int], bytes]]:
    """Avro bytes (union branch included) of a packed DATE, cached: tables hold few dates."""
    cache: dict[int, bytes] = {}

    def miss(packed: int) -> bytes:
        days = days_since_epoch(packed >> 9, (packed >> 5) & 15, packed & 31)
        out = b"\x00" if days is None else b"\x02" + varint((days << 1) ^ (days >> 63))
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[packed] = out
        return out

    return cache, miss


def _day_micros_cache() -> tuple[dict[int, int | None], Callable[[int], int | None]]:
    """Microseconds at midnight of a DATETIME2's packed year-month-day, cached."""
    cache: dict[int, int | None] = {}

    def miss(ymd: int) -> int | None:
        ym = ymd >> 5
        days = days_since_epoch(ym // 13, ym % 13, ymd % 32)
        out = None if days is None else days * 86_400_000_000
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[ymd] = out
        return out

    return cache, miss


def copyable(p: ColumnPlan) -> bool:
    """Text stored as UTF-8 (copied without decoding) or variable-length bytes."""
    if p.schema.kind in ("uuid", "inet6"):
        return False
    if p.codec is None:  # BINARY(n) is zero-padded on decode: not a plain copy
        return p.binlog.type != t.T_STRING and p.schema.kind in ("bytes", "geometry")
    return p.codec == "utf-8" and p.schema.kind in ("string", "json")


def copy_width(col: BinlogColumn) -> int:
    """Bytes of a copyable column's length prefix."""
    return col.length if col.type in t.BLOB_TYPES else 1 if col.length < 256 else 2


class _Generator:
    """Builds the statements of each column. A column's Avro bytes go to one or two parts,
    written ``@0`` and ``@1`` in the snippets and renamed to the function's ``p<n>`` locals;
    the function joins all parts once at the end (no list appends)."""

    def __init__(self, plans: Sequence[ColumnPlan], key: Sequence[int]) -> None:
        self.plans = plans
        self.key = set(key)
        self.env: dict[str, Any] = {
            "_S": SMALL_VARINTS,
            "_SU": SMALL_UNION_VARINTS,
            "_C": CONT14_VARINTS,
            "_CU": _CONT14_UNION,
            "_V": varint,
        }

    # -- one column ---------------------------------------------------------------------
    def column(self, i: int) -> list[str]:
        """Statements reading column ``i`` at ``pos`` into its parts (and ``k<i>`` for keys)."""
        p = self.plans[i]
        col, kind = p.binlog, p.schema.kind
        in_key = i in self.key
        ct = col.type
        if ct in _FIXED and kind != "uint64":
            self.env[f"_s{i}"] = struct.Struct("<" + self._code(i))
            return [
                f"w{i} = _s{i}.unpack_from(data, pos)[0]; pos += {self._size(i)}",
                *self._long_from(i),
            ]
        if ct == t.T_INT24 and kind == "int":
            signed = not col.unsigned
            read = f"int.from_bytes(data[pos : pos + 3], 'little', signed={signed})"
            return [f"w{i} = {read}; pos += 3", *self._long_from(i)]
        if ct == t.T_DOUBLE and not in_key:  # a key needs its value: the fallback below
            return [f"@0 = {self._branch(p)}; @1 = data[pos : pos + 8]; pos += 8"]
        if ct in _TEXT_TYPES and copyable(p) and not (in_key and p.codec is None):
            return self._copy(i, p, in_key)
        if in_key:
            return self._fallback(i, p, in_key)
        if ct == t.T_NEWDECIMAL:
            return self._decimal(p)
        if ct in (t.T_DATE, t.T_NEWDATE):
            cache, miss = _date_cache()
            self.env[f"_dc{i}"], self.env[f"_dm{i}"] = cache, miss
            return [
                "d = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16; pos += 3",
                f"@0 = _dc{i}[d] if d in _dc{i} else _dm{i}(d)",
            ]
        if ct == t.T_DATETIME2:
            return self._datetime2(i, col.scale)
        if ct == t.T_TIMESTAMP2:
            return self._timestamp2(col.scale)
        if ct == t.T_ENUM:
            return self._enum(i, p)
        return self._fallback(i, p, in_key)

    @staticmethod
    def parts(lines: list[str]) -> int:
        """How many parts a snippet writes: ``@0``, and ``@1`` when it uses it."""
        return 2 if any("@1" in line for line in lines) else 1

    def _branch(self, p: ColumnPlan) -> str:
        return 'b"\\x02"' if p.union else 'b""'

    def _code(self, i: int) -> str:
        col = self.plans[i].binlog
        code = _FIXED[col.type]
        return code.upper() if col.unsigned else code

    def _size(self, i: int) -> int:
        return struct.calcsize("<" + self._code(i))

    def _long_from(self, i: int) -> list[str]:
        """Column ``i``'s integer, unpacked into ``w<i>``, as a zigzag varint."""
        p = self.plans[i]
        value = f"(w{i} + 1900 if w{i} else 0)" if p.binlog.type == t.T_YEAR else f"w{i}"
        zigzag = f"{value} << 1" if p.binlog.unsigned else f"({value} << 1) ^ ({value} >> 63)"
        lines = [f"z = {zigzag}", f"@0 = {self._varint('z', p.union)}"]
        if i in self.key:
            lines.append(f"k{i} = {value}")
        return lines

    @staticmethod
    def _varint(z: str, union: bool) -> str:
        """An expression for the LEB128 of ``z`` (>= 0), behind the union branch byte if
        ``union``: table lookups inline up to 28 bits, the general function above."""
        small, cont, prefix = ("_SU", "_CU", 'b"\\x02" + ') if union else ("_S", "_C", "")
        return (
            f"{small}[{z}] if {z} < 16384 else {cont}[{z} & 16383] + _S[{z} >> 14] "
            f"if {z} < 268435456 else {prefix}_V({z})"
        )

    def _copy(self, i: int, p: ColumnPlan, in_key: bool) -> list[str]:
        width = copy_width(p.binlog)
        if width == 1:  # at most 255 bytes: a one- or two-byte length from the table
            table = "_SU" if p.union else "_S"
            lines = [f"n = data[pos]; pos += 1; @0 = {table}[n << 1]"]
        else:
            read = (
                "data[pos] | data[pos + 1] << 8"
                if width == 2
                else f"int.from_bytes(data[pos : pos + {width}], 'little')"
            )
            lines = [
                f"n = {read}; pos += {width}; z = n << 1",
                f"@0 = {self._varint('z', p.union)}",
            ]
        lines.append("@1 = data[pos : pos + n]; pos += n")
        if in_key:
            lines.append(f"k{i} = @1.decode()")
        return lines

    def _decimal(self, p: ColumnPlan) -> list[str]:
        precision, scale = p.binlog.precision, p.binlog.scale
        intg0, intg0x = divmod(precision - scale, 9)
        frac0, frac0x = divmod(scale, 9)
        groups: list[tuple[int, int]] = []  # (bytes, digits), most significant first
        if intg0x:
            groups.append((_DIG2BYTES[intg0x], intg0x))
        groups += [(4, 9)] * (intg0 + frac0)
        if frac0x:
            groups.append((_DIG2BYTES[frac0x], frac0x))
        size = sum(b for b, _ in groups)
        top, full = 1 << (size * 8 - 1), (1 << size * 8) - 1
        # Each group is a big-endian number of its digits; its weight is 10^(digits after it).
        terms, shift, after = [], 0, 0
        for nbytes, ndigits in reversed(groups):
            mask = (1 << nbytes * 8) - 1
            part = f"(u >> {shift} & {mask})" if shift else f"(u & {mask})"
            terms.append(part + (f" * {10**after}" if after else ""))
            shift += nbytes * 8
            after += ndigits
        table = "_SU" if p.union else "_S"
        return [
            f"u = int.from_bytes(data[pos : pos + {size}], 'big'); pos += {size}",
            # A positive number has its top bit set; a negative one is stored inverted.
            f"if u & {top}: u ^= {top}; x = " + " + ".join(terms),
            f"else: u ^= {full ^ top}; x = -(" + " + ".join(terms) + ")",
            "@1 = x.to_bytes((x.bit_length() + 8) >> 3, 'big', signed=True)",
            f"@0 = {table}[len(@1) << 1]",
        ]

    def _datetime2(self, i: int, fsp: int) -> list[str]:
        cache, miss = _day_micros_cache()
        self.env[f"_tc{i}"], self.env[f"_tm{i}"] = cache, miss
        lines = ["u = int.from_bytes(data[pos : pos + 5], 'big') - 0x8000000000; pos += 5"]
        frac = ""
        nbytes = (fsp + 1) // 2
        if nbytes:
            mult = (10000, 100, 1)[nbytes - 1]
            lines.append(f"f = int.from_bytes(data[pos : pos + {nbytes}], 'big'); pos += {nbytes}")
            frac = f" + f * {mult}" if mult != 1 else " + f"
        return [
            *lines,
            "d = u >> 17",
            f"d = _tc{i}[d] if d in _tc{i} else _tm{i}(d)",
            'if d is None: @0 = b"\\x00"; @1 = b""',
            "else:",
            "    h = u & 0x1FFFF",
            f"    x = d + ((h >> 12) * 3600 + (h >> 6 & 63) * 60 + (h & 63)) * 1000000{frac}",
            "    z = (x << 1) ^ (x >> 63)",
            # Micros since 1970 take 43..56 bits from 1969-12-07 to the year 3111: four table
            # lookups. Nearer the epoch fewer bytes (the shortest LEB128, as every encoder).
            "    @0 = b'\\x02'; @1 = _C[z & 16383] + _C[z >> 14 & 16383] + _C[z >> 28 & 16383]"
            " + _S[z >> 42] if 4398046511104 <= z < 72057594037927936 else _V(z)",
        ]

    def _timestamp2(self, fsp: int) -> list[str]:
        nbytes = (fsp + 1) // 2
        lines = ["x = int.from_bytes(data[pos : pos + 4], 'big') * 1000000; pos += 4"]
        if nbytes:
            mult = (10000, 100, 1)[nbytes - 1]
            lines.append(
                f"x += int.from_bytes(data[pos : pos + {nbytes}], 'big') * {mult}; pos += {nbytes}"
            )
        # Zero is MySQL's zero timestamp: null. Others are positive: zigzag is a shift.
        return [*lines, '@0 = b"\\x02" + _V(x << 1) if x else b"\\x00"']

    def _enum(self, i: int, p: ColumnPlan) -> list[str]:
        members = [m.decode(p.codec or "utf-8") for m in p.binlog.members]
        encode = column_encoder(p.schema)
        branch = b"\x02" if p.union else b""
        table = {n + 1: branch + encode(m) for n, m in enumerate(members)}
        self.env[f"_en{i}"], self.env[f"_ee{i}"] = table, branch + encode("")
        size = p.binlog.length
        read = "data[pos]" if size == 1 else f"int.from_bytes(data[pos : pos + {size}], 'little')"
        return [f"@0 = _en{i}.get({read}, _ee{i}); pos += {size}"]

    def _fallback(self, i: int, p: ColumnPlan, in_key: bool) -> list[str]:
        self.env[f"_d{i}"], self.env[f"_e{i}"] = p.decoder, column_encoder(p.schema)
        lines = [f"x, pos = _d{i}(data, pos)"]
        if p.union:
            lines.append(f'@0 = b"\\x00" if x is None else b"\\x02" + _e{i}(x)')
        else:
            lines.append(f"@0 = _e{i}(x)")
        if in_key:
            lines.append(f"k{i} = x")
        return lines

    # -- the function -------------------------------------------------------------------
    def body(self, nullable: bool) -> tuple[list[str], list[str]]:
        """The statements of one variant and its parts in order. ``nullable``: check each
        nullable column's NULL bit; else runs of fixed-width integers share one unpack."""
        lines: list[str] = []
        names: list[str] = []
        i = 0
        while i < len(self.plans):
            run = [] if nullable else self._run_from(i)
            if len(run) > 1:
                fmt = "<" + "".join(self._code(j) for j in run)
                self.env[f"_r{i}"] = struct.Struct(fmt)
                unpacked = ", ".join(f"w{j}" for j in run)
                lines.append(
                    f"{unpacked} = _r{i}.unpack_from(data, pos); pos += {struct.calcsize(fmt)}"
                )
                for j in run:
                    lines += self._rename(self._long_from(j), names)
                i += len(run)
                continue
            label = repr(self.plans[i].schema.name).replace("@", "(at)")  # @0/@1 are parts
            snippet = [f"# column {i}: {label}", *self.column(i)]
            if nullable and self.plans[i].binlog.nullable:
                null = ['@0 = b"\\x00"'] + (['@1 = b""'] if self.parts(snippet) == 2 else [])
                lines += self._rename(
                    [f"if nulls >> {i} & 1: " + "; ".join(null), "else:"]
                    + [f"    {line}" for line in snippet],
                    names,
                )
            else:
                lines += self._rename(snippet, names)
            i += 1
        return lines, names

    def _run_from(self, i: int) -> list[int]:
        run = []
        while (
            i < len(self.plans)
            and self.plans[i].binlog.type in _FIXED
            and (self.plans[i].schema.kind != "uint64")
        ):
            run.append(i)
            i += 1
        return run

    def _rename(self, lines: list[str], names: list[str]) -> list[str]:
        """Give the snippet's ``@0``/``@1`` the next free part names."""
        count = self.parts(lines)
        first = len(names)
        names += [f"p{first + n}" for n in range(count)]
        return [line.replace("@0", f"p{first}").replace("@1", f"p{first + 1}") for line in lines]

    def key_expression(self, key: Sequence[int]) -> str:
        """The key's canonical JSON (sorted, compact) as UTF-8 bytes: what the relay hashes."""
        if not key:
            return "None"
        fmt, args = b"", []
        for n, i in enumerate(sorted(key, key=lambda i: self.plans[i].schema.name)):
            col = self.plans[i].schema
            name = json.dumps(col.name, ensure_ascii=False).encode().replace(b"%", b"%%")
            fmt += (b"," if n else b"{") + name + b":"
            if col.kind in ("int", "year", "bit"):
                fmt += b"%d"
                args.append(f"k{i}")
            else:
                self.env[f"_k{i}"] = key_formatter(col.kind)
                fmt += b"%s"
                args.append(f"_k{i}(k{i}).encode()")
        return f"{fmt + b'}'!r} % ({', '.join(args)},)"


@dataclass(frozen=True, slots=True)
class Transcoder:
    """``row(data, pos) -> (avro row, key bytes or None, pos)``; ``inserts(data, pos, end)``:
    the wire events of a write-rows event's rows, framing inlined (the hottest loop)."""

    row: Transcode
    inserts: Callable[[bytes, int, int], list[bytes]]


def build_transcoder(
    plans: Sequence[ColumnPlan], key: Sequence[int], source: bytes, version: int
) -> Transcoder:
    """The transcoder of one table map; ``key`` holds the primary key's column indexes,
    ``source`` and ``version`` go in every event header."""
    gen = _Generator(plans, key)
    count = len(plans)
    null_bytes, mask = (count + 7) // 8, (1 << count) - 1
    key_bytes = gen.key_expression(key)
    head = [
        # The server may set the unused high bits of the last byte; only real columns count.
        f"nulls = int.from_bytes(data[pos : pos + {null_bytes}], 'little') & {mask}",
        f"pos += {null_bytes}",
        "if not nulls:",
    ]
    variants = [gen.body(nullable) for nullable in (False, True)]

    def function(signature: str, prologue: list[str], indent: str, emit: list[str]) -> list[str]:
        lines = [signature, *prologue, *(indent + line for line in head)]
        for n, (body, names) in enumerate(variants):
            if n:
                lines.append(f"{indent}else:")
            lines += [f"{indent}    {line}" for line in body]
            joined = ", ".join(names) + ("," if len(names) == 1 else "")
            lines += [f"{indent}    {line.replace('PARTS', joined)}" for line in emit]
        return lines

    row = function(
        "def row(data, pos):", [], "    ", [f"return b''.join((PARTS)), {key_bytes}, pos"]
    )
    fixed = wire.EVENT_HEADER_SIZE + len(source) + 2
    gen.env.update(_pack=wire.EVENT_HEADER.pack, _crc=crc32, _SRC=source)
    inserts = function(
        "def inserts(data, pos, end):",
        ["    out = []", "    add = out.append", "    while pos < end:"],
        "        ",
        [
            "r = b''.join((PARTS))",
            f"k = {key_bytes}",
            "h = _crc(k) if k is not None else 0",  # KEYLESS_HASH
            f"add(b''.join((_pack({fixed} + len(r), h, {ord('c')}, {len(source)}, {version}), "
            "_SRC, b'\\0\\2', r)))",
        ],
    )
    run_generated([*row, *inserts, "    return out"], gen.env, f"transcoder of {source.decode()}")
    return Transcoder(gen.env["row"], gen.env["inserts"])
