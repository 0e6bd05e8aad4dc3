"""A PostgreSQL relation as capture knows it: its schema version's codec, the converters of
its columns' text forms, and the generated transcoder; and its columns read from the
catalog (``sluice schema generate``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from zlib import crc32

from sluice.capture.postgres import pgoutput
from sluice.capture.postgres.compiled import program
from sluice.capture.postgres.runs import RunTranscoder
from sluice.capture.postgres.setup import (
    base_types,
    not_null,
    primary_key,
    quoted_table,
    type_names,
)
from sluice.capture.postgres.transcode import Slow, build_row_transcoder
from sluice.capture.postgres.types import column_kind
from sluice.core import wire
from sluice.errors import DecodeError
from sluice.schemas import Column, RowCodec
from sluice.schemas.columns import UNCHANGED_TOAST


class PgTable:
    """A relation as the last Relation message described it: its codec and converters."""

    def __init__(self, source: str, codec: RowCodec, converters: list[Any]) -> None:
        self.source = source
        self.codec = codec
        self.converters = converters
        self.name = source.encode()
        self.version = codec.schema.version
        self._encode = codec.encode
        self._key = codec.key_text
        schema = codec.schema
        self._row = build_row_transcoder(schema.columns, schema.primary_key, converters)
        self.runs = RunTranscoder.build(schema, converters)  # None: rows only
        # The compiled twin of both where it reads every column (compiled.py); why not, if not
        choice = program(schema, converters)
        self.compiled, self.python_why = choice.program, choice.why
        # the compiled transcoder handed back the last run it was given (pending.bulk_events):
        # a value it does not read exactly; capture counts those runs
        self.compiled_refused = False

    def fast(self, tag: int, data: bytes) -> list[bytes]:
        """The wire events of an Insert/Update/Delete message, by the generated transcoder
        (raises ``Slow`` where the slow path must decide)."""
        row = self._row
        if tag == 73:  # I: relid, 'N', new tuple
            after, key, _ = row(data, 6)
            return [self._frame(OP_C, b"\x00\x02" + after, key)]
        if tag == 68:  # D: relid, 'K'/'O', old tuple
            old, key, _ = row(data, 6)
            return [self._frame(OP_D, b"\x02" + old + b"\x00", key)]
        pos: int = 5
        before: bytes | None = None
        old_key: str | None = None
        if data[5] in (75, 79):  # 'K' or 'O': the old key or row
            before, old_key, pos = row(data, 6)
        if data[pos] != 78:  # 'N'
            raise Slow
        after, key, _ = row(data, pos + 1)
        if before is None:
            return [self._frame(OP_U, b"\x00\x02" + after, key)]
        if old_key != key:  # a primary key change: delete the old key, insert the new one
            return [
                self._frame(OP_D, b"\x02" + before + b"\x00", old_key),
                self._frame(OP_C, b"\x00\x02" + after, key),
            ]
        return [self._frame(OP_U, b"".join((b"\x02", before, b"\x02", after)), key)]

    def row_events(self, payload: bytes) -> list[bytes]:
        """The wire events of a change message by the row path: the generated transcoder,
        or where it defers the values and the schema's encoder (which decide, and name a bad
        column: ``DecodeError``)."""
        try:
            return self.fast(payload[0], payload)
        except (Slow, ValueError, IndexError, OverflowError, UnicodeDecodeError):
            parsed = pgoutput.parse(payload)
            assert isinstance(parsed, pgoutput.Change)
            return self.change_events(parsed)

    def change_events(self, change: pgoutput.Change) -> list[bytes]:
        """The wire events of a parsed change, from its values (the reference path)."""
        old = None if change.old is None else self.values(change.old, "old row")
        new = None if change.new is None else self.values(change.new, "new row")
        if change.op == "I":
            return [self.event(OP_C, None, new)]
        if change.op == "D":
            return [self.event(OP_D, old, None)]
        assert new is not None
        if old is not None and change.whole_old and UNCHANGED_TOAST in new:
            # The server leaves out a TOASTed value the update did not change, even when the
            # old row (REPLICA IDENTITY FULL) carries it: that value it is.
            new = [o if n == UNCHANGED_TOAST else n for o, n in zip(old, new, strict=True)]
        if old is not None and self._key(old) != self._key(new):
            return [self.event(OP_D, old, None), self.event(OP_C, None, new)]
        return [self.event(OP_U, old, new)]

    def truncate_event(self) -> bytes:
        size = _EVENT_FIXED + len(self.name)
        return b"".join((_EVENT_HEADER(size, 0, OP_T, len(self.name), self.version), self.name))

    def _frame(self, op: int, payload: bytes, key: str | None) -> bytes:
        hashed = crc32(key.encode()) if key is not None else wire.KEYLESS_HASH
        size = _EVENT_FIXED + len(self.name) + len(payload)
        return b"".join(
            (_EVENT_HEADER(size, hashed, op, len(self.name), self.version), self.name, payload)
        )

    def values(self, raw: pgoutput.Tuple, what: str) -> list[Any]:
        if pgoutput.UNCHANGED not in raw:
            try:
                return [
                    None if v is None else c(v) for c, v in zip(self.converters, raw, strict=True)
                ]
            except (ValueError, OverflowError):
                pass  # find and name the column below
        return self._slow_values(raw, what)

    def _slow_values(self, raw: pgoutput.Tuple, what: str) -> list[Any]:
        out: list[Any] = []
        for col, convert, value in zip(
            self.codec.schema.columns, self.converters, raw, strict=True
        ):
            if value is None:
                out.append(None)
            elif value is pgoutput.UNCHANGED:
                if col.kind not in ("string", "json"):
                    raise DecodeError(
                        f"{self.source}.{col.name}: the server did not send this unchanged "
                        f"TOASTed value ({what}); set REPLICA IDENTITY FULL on the table",
                        source=self.source,
                    )
                out.append(UNCHANGED_TOAST)
            else:
                try:
                    out.append(convert(value))
                except (ValueError, OverflowError) as exc:
                    raise DecodeError(
                        f"cannot decode column {col.name!r} ({col.source_type}) of "
                        f"{self.source}: {str(value)[:40]!r} ({exc})",
                        source=self.source,
                    ) from None
        return out

    def event(self, op: int, before: list[Any] | None, after: list[Any] | None) -> bytes:
        payload = self._encode(before, after)
        key = self._key(after if after is not None else before or [])
        hashed = crc32(key.encode()) if key is not None else wire.KEYLESS_HASH
        size = _EVENT_FIXED + len(self.name) + len(payload)
        head = _EVENT_HEADER(size, hashed, op, len(self.name), self.version)
        return b"".join((head, self.name, payload))


_EVENT_HEADER = wire.EVENT_HEADER.pack
_EVENT_FIXED = wire.EVENT_HEADER_SIZE
OP_C, OP_U, OP_D, OP_T = ord("c"), ord("u"), ord("d"), ord("t")
CHANGE_TAGS = frozenset(b"IUD")


def table_columns(conn: Any, namespace: str, table: str) -> list[Column]:
    """The columns as capture sees them (``declared_column``), from the catalog."""
    return catalog_facts(conn, namespace, table).described()[0]


@dataclass(frozen=True, slots=True)
class CatalogFacts:
    """What describing a table asks the catalog: its columns (name, type OID, typmod), their
    base types (domains resolved) and those types' names, its key, and ``declared_column``'s
    NOT NULL columns and constant defaults."""

    columns: tuple[tuple[str, int, int], ...]
    types: list[tuple[int, int]]
    names: list[str]
    key: tuple[str, ...]
    declared: tuple[set[str], dict[str, str]]

    def described(self) -> tuple[list[Column], list[Any]]:
        """The columns as capture sees them (``declared_column``), and their text converters."""
        columns, converters = [], []
        for (name, _, _), text, (oid, _) in zip(self.columns, self.names, self.types, strict=True):
            kind, convert = column_kind(oid)
            columns.append(declared_column(name, kind, text, name in self.key, *self.declared))
            converters.append(convert)
        return columns, converters


def catalog_facts(
    conn: Any, namespace: str, table: str, columns: tuple[tuple[str, int, int], ...] | None = None
) -> CatalogFacts:
    """The facts of a table; its ``columns`` as the catalog has them unless given (a Relation
    message's)."""
    if columns is None:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT attname, atttypid, atttypmod FROM pg_attribute WHERE attrelid = "
                "to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                (quoted_table(namespace, table),),
            )
            columns = tuple((str(n), int(oid), int(mod)) for n, oid, mod in cur.fetchall())
    types = base_types(conn, [(oid, typmod) for _name, oid, typmod in columns])
    required = not_null(conn, namespace, table)
    defaults = column_defaults(conn, namespace, table)
    key = primary_key(conn, namespace, table)
    return CatalogFacts(columns, types, type_names(conn, types), key, (required, defaults))


def declared_column(
    name: str,
    kind: str,
    type_text: str,
    in_key: bool,
    required: set[str],
    defaults: dict[str, str],
) -> Column:
    """A column: only key columns never null (a before image may hold the key alone); what
    the table declares (NOT NULL, a constant default) kept beside, for Debezium's schemas."""
    nullable = name not in required or not in_key
    declared = name not in required
    default = None if type_text.endswith("[]") else defaults.get(name)
    return Column(
        name,
        kind,
        nullable,
        type_text,
        source_nullable=None if declared == nullable else declared,
        default=default,
    )


def column_defaults(conn: Any, namespace: str, table: str) -> dict[str, str]:
    """Each column's constant default, as its literal's text (``constant_default``)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN "
            "pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE "
            "d.adrelid = to_regclass(%s)",
            (quoted_table(namespace, table),),
        )
        rows = cur.fetchall()
    found = {str(name): constant_default(str(expression)) for name, expression in rows}
    return {name: text for name, text in found.items() if text is not None}


_CAST = r"(?:::[a-z_ ]+(?:\(\d+(?:,\d+)?\))?(?:\[\])?)*"
_QUOTED = re.compile(r"^'((?:[^']|'')*)'" + _CAST + "$")
_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?(?:e[+-]?\d+)?)" + _CAST + "$")


def constant_default(expression: str) -> str | None:
    """A default expression's literal (``'x'::character varying`` -> ``x``, ``(-7)`` ->
    ``-7``, ``true``), or None for anything computed (``nextval(...)``, ``now()``)."""
    text = expression.strip()
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    quoted = _QUOTED.match(text)
    if quoted is not None:
        return quoted.group(1).replace("''", "'")
    number = _NUMBER.match(text)
    if number is not None:
        return number.group(1)
    return text if text in ("true", "false") else None
