"""Reading a MySQL/MariaDB table's current rows for seeding: primary-key chunks, each read in
its own consistent snapshot and stamped with the SCN that snapshot is consistent at.

No locks: each chunk is ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` then
``SHOW STATUS LIKE 'binlog_snapshot_%'``, which MariaDB keeps fixed for the transaction and
which is exactly the binlog position of the last commit the snapshot sees (facts/binlog.md).
Values come out canonical (what capture decodes from the binlog), so the schema's own encoder
gives the same Avro bytes the relay gives for that row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pymysql
import pymysql.cursors

from sluice.capture.mysql.binlog.protocol import ConnectParams
from sluice.capture.mysql.binlog.values import days_since_epoch
from sluice.capture.mysql.bulk import jdbc_chunks
from sluice.capture.mysql.describe import describe_table
from sluice.capture.mysql.metadata import end_scn
from sluice.capture.mysql.ranges import q, range_condition, table_ref
from sluice.capture.mysql.scn import scn_of_log
from sluice.capture.seeding import (
    ChunkRead,
    JdbcChunks,
    KeyRange,
    driver_errors,
    even_ranges,
    guarded,
    keyless,
    seek_ranges,
)
from sluice.core.names import split_source
from sluice.errors import SourceError, SourceSetupError
from sluice.schemas import Column, TableSchema
from sluice.schemas.codegen import run_generated
from sluice.schemas.columns import shortest_float32

log = logging.getLogger(__name__)

# Key kinds whose SQL order equals the order of `>`/`<=` on the values a SELECT returns; other
# kinds (ENUM sorts by index but compares as text, FLOAT comes back rounded) are read whole.
RANGE_KINDS = frozenset(
    {"int", "uint64", "decimal", "string", "bytes", "date", "datetime", "timestamp", "time"}
    | {"year", "uuid", "inet6"}
)
_TRANSACTIONAL = {"INNODB", "ROCKSDB", "TOKUDB", "ARIA"}  # Aria only when TRANSACTIONAL=1


def describe_for_seed(conn: pymysql.Connection[Any], source: str) -> TableSchema:
    """The table's schema, refusing what cannot be seeded exactly (no key, no snapshot)."""
    schema = describe_table(conn, source)
    if not schema.primary_key:
        raise keyless(source)
    db, table = split_source(source)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (db, table),
        )
        row = cur.fetchone()
    engine = str(row[0] if row else "")
    if engine.upper() not in _TRANSACTIONAL:
        raise SourceSetupError(
            f"table {source} uses the {engine or 'unknown'} engine, which has no consistent "
            f"snapshots: seeding it could give rows of different moments; convert it "
            f"(ALTER TABLE {source} ENGINE=InnoDB) or leave it out",
            source=source,
        )
    return schema


def check_condition(conn: pymysql.Connection[Any], source: str, where: str) -> None:
    """Refuse a ``--where`` the server cannot evaluate on ``source``, before any chunk runs."""
    with conn.cursor() as cur:
        try:
            condition = where.replace("%", "%%")
            cur.execute(f"SELECT 1 FROM {table_ref(source)} WHERE ({condition}) LIMIT 0", ())
        except (pymysql.err.ProgrammingError, pymysql.err.OperationalError) as exc:
            raise SourceSetupError(
                f"--where is not a condition on {source}: {exc.args[-1]}", source=source
            ) from None


def can_split(schema: TableSchema) -> bool:
    kinds = {c.name: c.kind for c in schema.columns}
    return all(kinds[name] in RANGE_KINDS for name in schema.primary_key)


def plan_ranges(
    conn: pymysql.Connection[Any], schema: TableSchema, chunk_rows: int
) -> list[KeyRange]:
    """Cut the table into key ranges of about ``chunk_rows`` rows each: by arithmetic for a
    densely filled integer key, else with ``ORDER BY key LIMIT`` seeks on the primary key
    (composite and non-integer keys, sparse integers)."""
    if not can_split(schema):
        return [KeyRange(None, None)]
    key = schema.primary_key
    cols = ", ".join(q(c) for c in key)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        even = _even_ranges(cur, schema, chunk_rows)
        if even is not None:
            return even

        def next_upper(after: KeyRange) -> tuple[Any, ...] | None:
            where, args = range_condition(key, after)
            cur.execute(
                f"SELECT {cols} FROM {table_ref(schema.source)} WHERE {where} "
                f"ORDER BY {cols} LIMIT 1 OFFSET {chunk_rows - 1}",
                args,
            )
            row = cur.fetchone()
            return None if row is None else tuple(row)

        return seek_ranges(next_upper)


def _even_ranges(cur: Any, schema: TableSchema, chunk_rows: int) -> list[KeyRange] | None:
    """Ranges by arithmetic on MIN/MAX and InnoDB's row estimate (``seeding.even_ranges``):
    a seek walks the clustered index, i.e. the whole table, ~0.4 s per 1M rows."""
    kinds = {c.name: c.kind for c in schema.columns}
    if len(schema.primary_key) != 1 or kinds[schema.primary_key[0]] != "int":
        return None
    name = schema.primary_key[0]
    db, table = split_source(schema.source)
    # args=(): names are quoted with ``%`` doubled for PyMySQL's formatting, which only
    # runs when there are args
    cur.execute(f"SELECT MIN({q(name)}), MAX({q(name)}) FROM {table_ref(schema.source)}", ())
    lowest, highest = cur.fetchone()
    cur.execute(
        "SELECT TABLE_ROWS FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (db, table),
    )
    found = cur.fetchone()
    if lowest is None or found is None or found[0] is None:
        return None
    return even_ranges(int(lowest), int(highest), int(found[0]), chunk_rows)


# -- canonical values from the text protocol's row packets ------------------------------------
# A generated parser per schema reads each row packet (length-encoded column texts) straight
# into the canonical values capture decodes from the binlog: no PyMySQL row objects, no
# per-column converter calls for ints and strings. The seed-vs-capture differential test
# checks every type.
_NULL = 0xFB
# b"YYYY-MM-DD" -> days since the epoch (None for zero dates), filled as dates are met
_EPOCH_DAYS: dict[bytes, int | None] = {}


def _days(raw: bytes) -> int | None:
    days: int | None = _EPOCH_DAYS.get(raw, -1)
    if days == -1:
        days = days_since_epoch(int(raw[0:4]), int(raw[5:7]), int(raw[8:10]))
        if len(_EPOCH_DAYS) < 100_000:
            _EPOCH_DAYS[raw] = days
    return days


def _micros(raw: bytes) -> int | None:
    """``YYYY-MM-DD HH:MM:SS[.ffffff]`` (DATETIME, and TIMESTAMP in a UTC session)."""
    days = _days(raw[:10])
    if days is None:
        return None  # a zero date, or a zero in a date part
    seconds = int(raw[11:13]) * 3600 + int(raw[14:16]) * 60 + int(raw[17:19])
    frac = raw[20:]
    micros = int(frac.ljust(6, b"0")) if frac else 0
    return (days * 86400 + seconds) * 1_000_000 + micros


def _time(raw: bytes) -> int:
    """``[-]HHH:MM:SS[.ffffff]``."""
    sign = -1 if raw[:1] == b"-" else 1
    body = raw[1:] if sign < 0 else raw
    clock, _, frac = body.partition(b".")
    hours, minutes, seconds = clock.split(b":")
    total = (int(hours) * 3600 + int(minutes) * 60 + int(seconds)) * 1_000_000
    return sign * (total + (int(frac.ljust(6, b"0")) if frac else 0))


def _set(raw: bytes) -> list[str]:
    return raw.decode().split(",") if raw else []


def _bit(raw: bytes) -> int:
    return int.from_bytes(raw, "big")


_CONVERT: dict[str, Callable[[bytes], Any]] = {
    "int": int,
    "year": int,
    "uint64": lambda raw: Decimal(int(raw)),
    "float": lambda raw: shortest_float32(float(raw)),
    "double": float,
    "decimal": lambda raw: Decimal(raw.decode()),
    "set": _set,
    "date": _days,
    "datetime": _micros,
    "timestamp": _micros,
    "time": _time,
    "bit": _bit,
}
_TEXT_KINDS = frozenset({"string", "enum", "json", "uuid", "inet6"})


def _select_expr(col: Column) -> str:
    name = q(col.name)
    if col.kind == "float":
        return f"CAST({name} AS DOUBLE)"  # a FLOAT's text is rounded to 6 digits
    if col.kind == "set":
        return f"CAST({name} AS CHAR)"  # the members, in definition order
    if col.kind == "uint64" and col.source_type.startswith("bit"):
        return f"CAST({name} AS UNSIGNED)"  # BIT(64) as its number
    return name


_PARSERS: dict[tuple[Column, ...], Callable[[bytes], list[Any]]] = {}


def row_parser(columns: Sequence[Column]) -> Callable[[bytes], list[Any]]:
    """A function from a text-protocol row packet to the row's canonical values (generated
    once per column list: a query source asks for one every page)."""
    key = tuple(columns)
    parse = _PARSERS.get(key)
    if parse is None:
        if len(_PARSERS) > 256:
            _PARSERS.clear()
        parse = _PARSERS[key] = _row_parser(key)
    return parse


def _row_parser(columns: Sequence[Column]) -> Callable[[bytes], list[Any]]:
    env: dict[str, Any] = {"NULL": _NULL}
    lines = ["def parse(d):", "    p = 0", "    out = []", "    a = out.append"]
    for i, col in enumerate(columns):
        if col.kind in _TEXT_KINDS:
            value = "d[p:e].decode()"
        elif col.kind in ("bytes", "geometry"):
            value = "d[p:e]"
        else:
            env[f"c{i}"] = _CONVERT[col.kind]
            value = f"c{i}(d[p:e])"
        lines += [
            "    n = d[p]",
            "    if n == NULL:",
            "        a(None); p += 1",
            "    else:",
            "        if n < 251: p += 1",
            "        elif n == 0xFC: n = d[p + 1] | d[p + 2] << 8; p += 3",
            "        elif n == 0xFD: n = int.from_bytes(d[p + 1:p + 4], 'little'); p += 4",
            "        else: n = int.from_bytes(d[p + 1:p + 9], 'little'); p += 9",
            "        e = p + n",
            f"        a({value}); p = e",
        ]
    lines.append("    return out")
    run_generated(lines, env, "seed row parser")
    parse: Callable[[bytes], list[Any]] = env["parse"]
    return parse


# -- reading one chunk -----------------------------------------------------------------------
def open_snapshot(conn: pymysql.Connection[Any]) -> int:
    """Start a consistent snapshot on ``conn``; returns the SCN it is consistent at."""
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {str(k).lower(): v for k, v in cur.fetchall()}
    file_name = status.get("binlog_snapshot_file")
    position = status.get("binlog_snapshot_position")
    if not file_name or position is None:
        raise SourceSetupError(
            "the server gives no binlog_snapshot_file/position (MySQL has none, or the binary "
            "log is off): seeding needs MariaDB with --log-bin"
        )
    return scn_of_log(str(file_name), int(position))


def read_chunk(
    params: ConnectParams, schema: TableSchema, bounds: KeyRange, where: str | None = None
) -> ChunkRead:
    """Open a consistent snapshot and start reading one key range; the connection closes
    when ``rows`` is exhausted (or closed)."""
    conn = params.connect(cursorclass=pymysql.cursors.SSCursor, autocommit=False)
    try:
        scn = open_snapshot(conn)
        condition, args = range_condition(schema.primary_key, bounds)
        if where:
            condition = f"{condition} AND ({where.replace('%', '%%')})"
        exprs = ", ".join(_select_expr(c) for c in schema.columns)
        cur = conn.cursor()
        execute_select(
            cur,
            f"SELECT {exprs} FROM {table_ref(schema.source)} WHERE {condition}",
            args,
            schema.source,
        )
    except BaseException:
        conn.close()
        raise
    return ChunkRead(scn, _rows(conn, cur, row_parser(schema.columns)))


def execute_select(cur: Any, sql: str, args: Sequence[Any], source: str) -> None:
    """Run a SELECT on ``source``; the server's refusal is a sentence (no SELECT: the GRANT;
    a bad query: its message)."""
    try:
        cur.execute(sql, args)
    except pymysql.err.ProgrammingError as exc:
        raise SourceError(f"reading {source} failed: {exc.args[-1]}", source=source) from None
    except pymysql.err.OperationalError as exc:
        if exc.args and exc.args[0] in (1142, 1143):
            raise SourceSetupError(
                f"the user may not read {source}: GRANT SELECT ON {source} TO the user",
                source=source,
            ) from None
        raise


def _rows(
    conn: pymysql.Connection[Any], cur: Any, parse: Callable[[bytes], list[Any]]
) -> Iterator[list[Any]]:
    """Row packets of the unbuffered result, read past PyMySQL's row objects."""
    try:
        result = cur._result  # an SSCursor's unbuffered result: its rows are still unread
        read = conn._read_packet
        while True:
            packet = read()
            if result._check_packet_is_eof(packet):
                result.unbuffered_active = False
                result.connection = None
                break
            yield parse(packet._data)
        cur.close()
        conn.commit()
    finally:
        conn.close()


# -- the seeding seam ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class MySQLChunkReader:
    """Each chunk opens its own consistent snapshot (a ``ChunkReader``)."""

    params: ConnectParams = field(repr=False)

    def read(self, schema: TableSchema, bounds: KeyRange, where: str | None) -> ChunkRead:
        try:
            read = read_chunk(self.params, schema, bounds, where)
        except pymysql.err.MySQLError as exc:  # the server went away, a timeout, a kill
            raise SourceError(f"reading {schema.source} failed ({exc.args[-1]})") from None
        return ChunkRead(
            read.scn,
            guarded(
                read.rows,
                (pymysql.err.MySQLError,),
                lambda exc: f"reading {schema.source} failed ({exc.args[-1]})",
            ),
        )


_MYSQL_ERRORS = (pymysql.err.MySQLError,)


class MySQLSeeder:
    """The ``Seeder`` of a MariaDB server: one connection for checks and plans."""

    def __init__(self, params: ConnectParams) -> None:
        self.params = params
        self.conn = params.connect()

    def end_scn(self) -> int:
        with driver_errors(_MYSQL_ERRORS, "reading the binlog position"):
            return end_scn(self.conn)

    def table(self, source: str, where: str | None) -> TableSchema:
        with driver_errors(_MYSQL_ERRORS, f"describing {source}"):
            schema = describe_for_seed(self.conn, source)
            if where:
                check_condition(self.conn, source, where)
        return schema

    def plan(self, schema: TableSchema, chunk_rows: int) -> list[KeyRange]:
        with driver_errors(_MYSQL_ERRORS, f"planning the chunks of {schema.source}"):
            return plan_ranges(self.conn, schema, chunk_rows)

    def snapshot(self) -> MySQLChunkReader:
        open_snapshot(self.conn)  # fails early, with the fix, where snapshots give no SCN
        self.conn.rollback()
        return MySQLChunkReader(self.params)

    def jdbc_chunks(
        self, schema: TableSchema, ranges: Sequence[KeyRange], where: str | None
    ) -> JdbcChunks | None:
        return jdbc_chunks(self.params, schema, ranges, where)

    def close(self) -> None:
        self.conn.close()
