"""TABLE_MAP events with their optional metadata (binlog_row_metadata=FULL)."""

from __future__ import annotations

from dataclasses import dataclass

from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.binlog.reader import Reader
from sluice.core.names import source_name
from sluice.errors import DecodeError


@dataclass(frozen=True, slots=True)
class BinlogColumn:
    """One column as the binlog describes it; ``type`` is the real type (ENUM/SET resolved)."""

    name: str
    type: int
    nullable: bool
    unsigned: bool = False
    collation: int | None = None
    members: tuple[bytes, ...] = ()
    length: int = 0  # strings: max bytes; blobs: length-prefix bytes; enum/set: packed bytes
    precision: int = 0
    scale: int = 0  # decimals: scale; temporals: fsp
    bits: int = 0


@dataclass(frozen=True, slots=True)
class TableMap:
    table_id: int
    schema: str
    table: str
    columns: tuple[BinlogColumn, ...]
    primary_key: tuple[int, ...]
    signature: bytes  # the event body after the table id: equal signature, equal decoder

    @property
    def source(self) -> str:
        return source_name(self.schema, self.table)


@dataclass(slots=True)
class _Draft:
    type: int
    nullable: bool
    length: int = 0
    precision: int = 0
    scale: int = 0
    bits: int = 0
    name: str = ""
    unsigned: bool = False
    collation: int | None = None
    members: tuple[bytes, ...] = ()


def _read_meta(r: Reader, col_type: int) -> _Draft:
    draft = _Draft(col_type, False)
    if col_type in (t.T_FLOAT, t.T_DOUBLE):
        draft.length = r.u8()
    elif col_type in (t.T_VARCHAR, t.T_VAR_STRING):
        draft.length = r.uint(2)
    elif col_type == t.T_BIT:
        draft.bits = r.u8()
        draft.bits += r.u8() * 8
    elif col_type == t.T_NEWDECIMAL:
        draft.precision = r.u8()
        draft.scale = r.u8()
    elif col_type in t.BLOB_TYPES or col_type in (t.T_GEOMETRY, t.T_JSON):
        draft.length = r.u8()
    elif col_type in (t.T_STRING, t.T_ENUM, t.T_SET):
        byte0, byte1 = r.u8(), r.u8()
        if (byte0 & 0x30) != 0x30:  # CHAR longer than 255 bytes hides length bits here
            draft.length = byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
            draft.type = byte0 | 0x30
        else:
            draft.type = byte0
            draft.length = byte1
    elif col_type in (t.T_TIMESTAMP2, t.T_DATETIME2, t.T_TIME2):
        draft.scale = r.u8()
    return draft


def _is_numeric(col_type: int) -> bool:
    return col_type in t.NUMERIC_TYPES or col_type == t.T_YEAR


def _is_character(col_type: int) -> bool:
    return col_type in (t.T_STRING, t.T_VAR_STRING, t.T_VARCHAR, t.T_GEOMETRY) or (
        col_type in t.BLOB_TYPES
    )


def _bits(data: bytes, count: int) -> list[bool]:
    """MSB-first bitmap (optional metadata)."""
    return [bool(data[i // 8] & (0x80 >> (i % 8))) for i in range(count)]


def _charsets(value: Reader, default_form: bool, count: int) -> list[int]:
    if not default_form:
        return [value.lenenc() for _ in range(count)]
    default = value.lenenc()
    out = [default] * count
    while value.remaining:
        index, collation = value.lenenc(), value.lenenc()
        if index < count:
            out[index] = collation
    return out


def _apply_metadata(r: Reader, drafts: list[_Draft]) -> tuple[int, ...]:
    numeric = [d for d in drafts if _is_numeric(d.type)]
    character = [d for d in drafts if _is_character(d.type)]
    enum_set = [d for d in drafts if d.type in (t.T_ENUM, t.T_SET)]
    primary_key: list[int] = []
    while r.remaining:
        kind = r.u8()
        value = Reader(r.take(r.lenenc()))
        if kind == t.META_SIGNEDNESS:
            for draft, flag in zip(numeric, _bits(value.data, len(numeric)), strict=True):
                draft.unsigned = flag
        elif kind in (t.META_DEFAULT_CHARSET, t.META_COLUMN_CHARSET):
            charsets = _charsets(value, kind == t.META_DEFAULT_CHARSET, len(character))
            for draft, collation in zip(character, charsets, strict=True):
                draft.collation = collation
        elif kind in (t.META_ENUM_AND_SET_DEFAULT_CHARSET, t.META_ENUM_AND_SET_COLUMN_CHARSET):
            charsets = _charsets(value, kind == t.META_ENUM_AND_SET_DEFAULT_CHARSET, len(enum_set))
            for draft, collation in zip(enum_set, charsets, strict=True):
                draft.collation = collation
        elif kind == t.META_COLUMN_NAME:
            for draft in drafts:
                draft.name = value.lenenc_bytes().decode("utf-8")
        elif kind in (t.META_SET_STR_VALUE, t.META_ENUM_STR_VALUE):
            wanted = t.T_SET if kind == t.META_SET_STR_VALUE else t.T_ENUM
            for draft in (d for d in drafts if d.type == wanted):
                draft.members = tuple(value.lenenc_bytes() for _ in range(value.lenenc()))
        elif kind == t.META_SIMPLE_PRIMARY_KEY:
            while value.remaining:
                primary_key.append(value.lenenc())
        elif kind == t.META_PRIMARY_KEY_WITH_PREFIX:
            while value.remaining:
                primary_key.append(value.lenenc())
                value.lenenc()  # prefix length: the key is still the whole column value
    return tuple(primary_key)


def parse_table_map(body: bytes) -> TableMap:
    r = Reader(body)
    table_id = r.uint(6)
    signature = body[6:]
    r.take(2)  # flags
    schema = r.take(r.u8()).decode("utf-8")
    r.take(1)
    table = r.take(r.u8()).decode("utf-8")
    r.take(1)
    count = r.lenenc()
    types = r.take(count)
    meta = Reader(r.take(r.lenenc()))
    drafts = [_read_meta(meta, col_type) for col_type in types]
    for draft, nullable in zip(drafts, _lsb_bits(r.take((count + 7) // 8), count), strict=True):
        draft.nullable = nullable
    primary_key = _apply_metadata(r, drafts)
    if any(not d.name for d in drafts):
        raise DecodeError(
            f"table map for {schema}.{table} has no column names: set binlog_row_metadata=FULL"
        )
    columns = tuple(
        BinlogColumn(
            d.name,
            d.type,
            d.nullable,
            d.unsigned,
            d.collation,
            d.members,
            d.length,
            d.precision,
            d.scale,
            d.bits,
        )
        for d in drafts
    )
    return TableMap(table_id, schema, table, columns, primary_key, signature)


def _lsb_bits(data: bytes, count: int) -> list[bool]:
    """LSB-first bitmap (null bitmaps, column-present bitmaps)."""
    return [bool(data[i >> 3] & (1 << (i & 7))) for i in range(count)]
