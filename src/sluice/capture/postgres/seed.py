"""Seeding a PostgreSQL database: one exported snapshot that every chunk imports.

The driver creates a *temporary* logical replication slot with ``EXPORT_SNAPSHOT`` and keeps
its connection open while Spark's tasks run. Each chunk runs ``SET TRANSACTION SNAPSHOT`` on
it, so every chunk sees the database exactly as of the slot's consistent point: the
transactions whose commit record ends at or before that LSN, and none after. Capture's SCN is
a commit's end LSN, so every chunk is stamped with the consistent point and the fold's
"newest by SCN" is exact. No locks; the slot disappears with the driver's connection.

Values are read in the server's text form (the same output functions and session settings
pgoutput uses) through capture's own converters, so a seeded row encodes to the bytes a
captured insert of that row has.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import psycopg2.extensions

from sluice.capture.postgres.setup import (
    PgUrl,
    base_types,
    connect,
    primary_key,
    quoted_table,
)
from sluice.capture.postgres.tables import table_columns
from sluice.capture.postgres.types import column_kind
from sluice.capture.seeding import (
    ChunkRead,
    JdbcChunks,
    KeyRange,
    driver_errors,
    keyless,
    seek_ranges,
)
from sluice.core.names import split_source
from sluice.errors import DecodeError, SourceError, SourceSetupError, first_line
from sluice.schemas import TableSchema

log = logging.getLogger(__name__)
_ITERSIZE = 5000


def _ident(name: str) -> str:
    """A quoted identifier for a query run with arguments (``%`` doubled for psycopg2)."""
    return '"' + name.replace('"', '""').replace("%", "%%") + '"'


def _table(source: str) -> str:
    schema, table = split_source(source)
    return f"{_ident(schema)}.{_ident(table)}"


def _lsn(text: str) -> int:
    high, low = text.split("/")
    return int(high, 16) << 32 | int(low, 16)


def _raw_text(conn: Any, oids: Sequence[int]) -> None:
    """Make ``conn`` return every value of these types as the server's text form (psycopg2
    would parse some of them: bytea, arrays, dates...)."""
    raw = psycopg2.extensions.new_type(tuple(set(oids)), "SLUICE_TEXT", lambda v, _c: v)
    psycopg2.extensions.register_type(raw, conn)


def _column_oids(conn: Any, source: str) -> dict[str, tuple[int, str]]:
    """name -> (type oid, domains resolved to their base; type name without modifier, to cast
    key bounds back)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT attname, atttypid, format_type(atttypid, NULL) FROM pg_attribute "
            "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
            (quoted_table(*split_source(source)),),
        )
        rows = cur.fetchall()
    bases = base_types(conn, [(int(oid), -1) for _n, oid, _t in rows])
    return {str(n): (base, str(t)) for (n, _oid, t), (base, _mod) in zip(rows, bases, strict=True)}


def _after(columns: Sequence[str], types: Sequence[str], strict: bool) -> str:
    """``(a, b) > (%s::ta, %s::tb)`` (or ``<=``): a row comparison the primary key's index
    serves, in the key's own order (collation included)."""
    names = ", ".join(_ident(c) for c in columns)
    bounds = ", ".join(f"%s::{t.replace('%', '%%')}" for t in types)
    return f"({names}) {'>' if strict else '<='} ({bounds})"


def range_condition(
    key: Sequence[str], types: Sequence[str], bounds: KeyRange
) -> tuple[str, list[Any]]:
    clauses, args = [], []
    if bounds.lower is not None:
        clauses.append(_after(key, types, strict=True))
        args += list(bounds.lower)
    if bounds.upper is not None:
        clauses.append(_after(key, types, strict=False))
        args += list(bounds.upper)
    return " AND ".join(clauses) or "TRUE", args


@dataclass(frozen=True, slots=True)
class PgChunkReader:
    """Reads chunks in the driver's exported snapshot (a ``ChunkReader``)."""

    url: PgUrl = field(repr=False)
    snapshot: str
    scn: int

    def read(self, schema: TableSchema, bounds: KeyRange, where: str | None) -> ChunkRead:
        conn = connect(self.url)
        try:
            cur, converters = self._open(conn, schema, bounds, where)
        except BaseException:
            conn.close()
            raise
        return ChunkRead(self.scn, self._rows(conn, cur, schema, converters))

    def _open(
        self, conn: Any, schema: TableSchema, bounds: KeyRange, where: str | None
    ) -> tuple[Any, list[Any]]:
        """The open cursor of the chunk's SELECT, and the columns' converters."""
        source = schema.source
        try:
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur.execute("SET TRANSACTION SNAPSHOT %s", (self.snapshot,))
            oids = _column_oids(conn, source)
            _raw_text(conn, [oid for oid, _ in oids.values()])
            types = [oids[c][1] for c in schema.primary_key]
            condition, args = range_condition(schema.primary_key, types, bounds)
            if where:
                condition = f"{condition} AND ({where.replace('%', '%%')})"
            cols = ", ".join(_ident(c.name) for c in schema.columns)
            cur = conn.cursor(name="sluice_seed_chunk")
            cur.itersize = _ITERSIZE
            cur.execute(f"SELECT {cols} FROM {_table(source)} WHERE {condition}", args)
            return cur, [column_kind(oids[c.name][0])[1] for c in schema.columns]
        except psycopg2.errors.InsufficientPrivilege:
            raise no_select(source, self.url.user) from None
        except psycopg2.Error as exc:
            text = first_line(exc)
            if "snapshot" in text:
                text += " (the seed driver that exported it has ended: run the seed again)"
            raise SourceError(f"reading {source} failed: {text}", source=source) from None

    def _rows(
        self, conn: Any, cur: Any, schema: TableSchema, converters: list[Any]
    ) -> Iterator[list[Any]]:
        source = schema.source
        try:
            for raw in cur:
                try:
                    yield [
                        None if v is None else c(v) for c, v in zip(converters, raw, strict=True)
                    ]
                except (ValueError, OverflowError):
                    raise _undecodable(schema, converters, raw) from None
            conn.commit()
        except psycopg2.Error as exc:
            raise SourceError(f"reading {source} failed: {first_line(exc)}") from None
        finally:
            conn.close()


def no_select(source: str, user: str) -> SourceSetupError:
    """The user lacks SELECT on ``source``: the GRANT that fixes it."""
    return SourceSetupError(
        f"the user may not read {source}: GRANT SELECT ON {source} TO {user}", source=source
    )


def _undecodable(schema: TableSchema, converters: list[Any], raw: Sequence[Any]) -> DecodeError:
    for col, convert, value in zip(schema.columns, converters, raw, strict=True):
        try:
            if value is not None:
                convert(value)
        except (ValueError, OverflowError) as exc:
            return DecodeError(
                f"cannot decode column {col.name!r} ({col.source_type}) of {schema.source}: "
                f"{str(value)[:40]!r} ({exc})",
                source=schema.source,
            )
    return DecodeError(f"cannot decode a row of {schema.source}", source=schema.source)


class PgSeeder:
    """The ``Seeder`` of a PostgreSQL database: a connection for checks and plans, and the
    replication connection that holds the exported snapshot until ``close()``."""

    def __init__(self, url: PgUrl) -> None:
        self.url = url
        self.conn = connect(url)
        self.conn.autocommit = True
        self._replication: Any = None

    def end_scn(self) -> int:
        with (
            driver_errors((psycopg2.Error,), "reading the server's WAL position"),
            self.conn.cursor() as cur,
        ):
            cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
            return int(cur.fetchone()[0])

    def table(self, source: str, where: str | None) -> TableSchema:
        namespace, table = split_source(source)
        with driver_errors((psycopg2.Error,), f"describing {source}"):
            columns = table_columns(self.conn, namespace, table)
        if not columns:
            raise SourceSetupError(
                f"unknown table {source!r} in database {self.url.dbname}", source=source
            )
        with driver_errors((psycopg2.Error,), f"describing {source}"):
            key = primary_key(self.conn, namespace, table)
        if not key:
            raise keyless(source)
        self._check_select(source, where)
        return TableSchema(source, 1, tuple(columns), key)

    def _check_select(self, source: str, where: str | None) -> None:
        condition = f"({where.replace('%', '%%')})" if where else "TRUE"
        try:
            with self.conn.cursor() as cur:
                cur.execute(f"SELECT 1 FROM {_table(source)} WHERE {condition} LIMIT 0", ())
        except psycopg2.errors.InsufficientPrivilege:
            raise no_select(source, self.url.user) from None
        except psycopg2.Error as exc:
            raise SourceSetupError(
                f"--where is not a condition on {source}: {first_line(exc)}", source=source
            ) from None

    def plan(self, schema: TableSchema, chunk_rows: int) -> list[KeyRange]:
        with driver_errors((psycopg2.Error,), f"planning the chunks of {schema.source}"):
            return self._plan(schema, chunk_rows)

    def _plan(self, schema: TableSchema, chunk_rows: int) -> list[KeyRange]:
        key = schema.primary_key
        oids = _column_oids(self.conn, schema.source)
        _raw_text(self.conn, [oids[c][0] for c in key])
        types = [oids[c][1] for c in key]
        cols = ", ".join(_ident(c) for c in key)
        with self.conn.cursor() as cur:

            def next_upper(after: KeyRange) -> tuple[Any, ...] | None:
                where, args = range_condition(key, types, after)
                cur.execute(
                    f"SELECT {cols} FROM {_table(schema.source)} WHERE {where} "
                    f"ORDER BY {cols} LIMIT 1 OFFSET %s",
                    [*args, chunk_rows - 1],
                )
                row = cur.fetchone()
                return None if row is None else tuple(row)

            return seek_ranges(next_upper)

    def snapshot(self) -> PgChunkReader:
        """Export the snapshot every chunk reads in, through a temporary replication slot."""
        with self.conn.cursor() as cur:
            cur.execute("SHOW wal_level")
            if cur.fetchone()[0] != "logical":
                raise SourceSetupError(
                    "wal_level is not logical: set wal_level = logical in postgresql.conf and "
                    "restart PostgreSQL (seeding exports its snapshot through a replication slot)"
                )
        try:
            self._replication = connect(self.url, replication="database")
        except SourceSetupError as exc:
            raise SourceSetupError(
                f"{exc}; seeding exports its snapshot through a temporary replication slot: "
                f"ALTER ROLE {self.url.user} REPLICATION"
            ) from None
        self._replication.autocommit = True
        slot = f"sluice_seed_{os.getpid()}_{os.urandom(4).hex()}"
        try:
            with self._replication.cursor() as cur:
                cur.execute(
                    f"CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput EXPORT_SNAPSHOT"
                )
                _name, point, snapshot, _plugin = cur.fetchone()
        except psycopg2.Error as exc:
            text = first_line(exc)
            hint = (
                "raise max_replication_slots in postgresql.conf (and restart), or drop an "
                "unused slot"
                if "replication slots" in text
                else f"ALTER ROLE {self.url.user} REPLICATION"
            )
            raise SourceSetupError(
                f"cannot export a snapshot to seed from: {text}; {hint}"
            ) from None
        log.info("seeding in snapshot %s, consistent at LSN %s", snapshot, point)
        return PgChunkReader(self.url, str(snapshot), _lsn(str(point)))

    def jdbc_chunks(
        self, schema: TableSchema, ranges: Sequence[KeyRange], where: str | None
    ) -> JdbcChunks | None:
        del schema, ranges, where
        return None  # chunks are read through Python (no JDBC path yet)

    def close(self) -> None:
        for conn in (self._replication, self.conn):
            if conn is not None and not conn.closed:
                conn.close()
        self._replication = None
