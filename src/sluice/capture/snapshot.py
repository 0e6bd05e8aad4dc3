"""Reading a MySQL/MariaDB table's current rows for seeding: primary-key chunks, each read in
its own consistent snapshot and stamped with the SCN that snapshot is consistent at.

No locks: each chunk is ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` then
``SHOW STATUS LIKE 'binlog_snapshot_%'``, which MariaDB keeps fixed for the transaction and
which is exactly the binlog position of the last commit the snapshot sees (facts/binlog.md).
Values come out canonical (what capture decodes from the binlog), so the schema's own encoder
gives the same Avro bytes the relay gives for that row.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pymysql
import pymysql.cursors

from sluice.capture.binlog.protocol import ConnectParams
from sluice.capture.binlog.values import days_since_epoch, shortest_float32
from sluice.capture.describe import describe_table
from sluice.core.scn import scn_of_log
from sluice.errors import SourceError, SourceSetupError
from sluice.schemas import Column, TableSchema

log = logging.getLogger(__name__)

# Key kinds whose SQL order equals the order of `>`/`<=` on the values a SELECT returns; other
# kinds (ENUM sorts by index but compares as text, FLOAT comes back rounded) are read whole.
RANGE_KINDS = frozenset(
    {"int", "uint64", "decimal", "string", "bytes", "date", "datetime", "timestamp", "time"}
    | {"year", "uuid", "inet6"}
)
_EPOCH = dt.datetime(1970, 1, 1)
_TRANSACTIONAL = {"INNODB", "ROCKSDB", "TOKUDB", "ARIA"}  # Aria only when TRANSACTIONAL=1


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Rows with ``lower < key <= upper`` in the table's key order (None: unbounded)."""

    lower: tuple[Any, ...] | None
    upper: tuple[Any, ...] | None


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_ref(source: str) -> str:
    schema, _, table = source.partition(".")
    return f"{q(schema)}.{q(table)}"


def describe_for_seed(conn: pymysql.Connection[Any], source: str) -> TableSchema:
    """The table's schema, refusing what cannot be seeded exactly (no key, no snapshot)."""
    schema = describe_table(conn, source)
    if not schema.primary_key:
        raise SourceSetupError(
            f"table {source} has no primary key: seeding keeps one row per key, so it cannot "
            f"seed a keyless table; add one (ALTER TABLE {source} ADD PRIMARY KEY (...)) "
            "or leave the table out",
            source=source,
        )
    db, _, table = source.partition(".")
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


def can_split(schema: TableSchema) -> bool:
    kinds = {c.name: c.kind for c in schema.columns}
    return all(kinds[name] in RANGE_KINDS for name in schema.primary_key)


def _after(columns: Sequence[str], strict: bool) -> str:
    """``(a,b,c) > (%s,%s,%s)`` (or ``<=``) spelled out so the optimizer uses a range scan."""
    parts = []
    for i, name in enumerate(columns):
        last = i == len(columns) - 1
        op = (">" if strict else "<=") if last else (">" if strict else "<")
        eqs = [f"{q(c)} = %s" for c in columns[:i]]
        parts.append("(" + " AND ".join([*eqs, f"{q(name)} {op} %s"]) + ")")
    return "(" + " OR ".join(parts) + ")"


def _bound_args(values: tuple[Any, ...]) -> list[Any]:
    args: list[Any] = []
    for i in range(len(values)):
        args += [*values[:i], values[i]]
    return args


def range_condition(key: Sequence[str], bounds: KeyRange) -> tuple[str, list[Any]]:
    """The WHERE clause (and its bound arguments) of a key range."""
    clauses, args = [], []
    if bounds.lower is not None:
        clauses.append(_after(key, strict=True))
        args += _bound_args(bounds.lower)
    if bounds.upper is not None:
        clauses.append(_after(key, strict=False))
        args += _bound_args(bounds.upper)
    return " AND ".join(clauses) or "TRUE", args


def plan_ranges(
    conn: pymysql.Connection[Any], schema: TableSchema, chunk_rows: int
) -> list[KeyRange]:
    """Cut the table into key ranges of about ``chunk_rows`` rows each, with ``ORDER BY key
    LIMIT`` seeks on the primary key (works for composite and non-integer keys)."""
    if not can_split(schema):
        return [KeyRange(None, None)]
    key = schema.primary_key
    cols = ", ".join(q(c) for c in key)
    ranges: list[KeyRange] = []
    lower: tuple[Any, ...] | None = None
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        while True:
            where, args = range_condition(key, KeyRange(lower, None))
            cur.execute(
                f"SELECT {cols} FROM {table_ref(schema.source)} WHERE {where} "
                f"ORDER BY {cols} LIMIT 1 OFFSET {chunk_rows - 1}",
                args,
            )
            row = cur.fetchone()
            if row is None:
                ranges.append(KeyRange(lower, None))
                return ranges
            upper = tuple(row)
            ranges.append(KeyRange(lower, upper))
            lower = upper


# -- canonical values from what a SELECT returns ---------------------------------------------
def _micros(value: Any) -> int | None:
    if not isinstance(value, dt.datetime):
        return None  # a zero date (or a zero in a date part) comes back as text
    days = days_since_epoch(value.year, value.month, value.day)
    if days is None:
        return None
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return (days * 86400 + seconds) * 1_000_000 + value.microsecond


def _timestamp_micros(value: Any) -> int | None:
    if not isinstance(value, dt.datetime):
        return None
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def _days(value: Any) -> int | None:
    if not isinstance(value, dt.date):
        return None
    return days_since_epoch(value.year, value.month, value.day)


def _time(value: dt.timedelta) -> int:
    return value // dt.timedelta(microseconds=1)


def _bit(value: bytes) -> int:
    return int.from_bytes(value, "big")


def _set(value: str) -> list[str]:
    return value.split(",") if value else []


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_CONVERT: dict[str, Callable[[Any], Any]] = {
    "uint64": lambda v: Decimal(_bit(v) if isinstance(v, bytes) else int(v)),
    "float": lambda v: shortest_float32(float(v)),
    "double": float,
    "decimal": Decimal,
    "set": _set,
    "date": _days,
    "datetime": _micros,
    "timestamp": _timestamp_micros,
    "time": _time,
    "bit": _bit,
    "json": _text,
    "uuid": _text,
    "inet6": _text,
}


def _select_expr(col: Column) -> str:
    name = q(col.name)
    if col.kind == "float":
        return f"CAST({name} AS DOUBLE)"  # a FLOAT's text is rounded to 6 digits
    if col.kind == "set":
        return f"CAST({name} AS CHAR)"  # members in definition order (PyMySQL makes a set)
    return name


def row_converter(columns: Sequence[Column]) -> Callable[[Sequence[Any]], list[Any]]:
    """SELECT values (PyMySQL's conversions) -> the canonical values capture decodes."""
    plan = [(i, _CONVERT.get(col.kind)) for i, col in enumerate(columns)]
    converting = [(i, f) for i, f in plan if f is not None]

    def convert(row: Sequence[Any]) -> list[Any]:
        values = list(row)
        for i, f in converting:
            value = values[i]
            if value is not None:
                values[i] = f(value)
        return values

    return convert


# -- reading one chunk -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ChunkRead:
    """An open chunk read: ``scn`` is known before the first row; iterate ``rows``."""

    scn: int
    rows: Iterator[list[Any]]


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
        _execute(
            cur,
            f"SELECT {exprs} FROM {table_ref(schema.source)} WHERE {condition}",
            args,
            schema.source,
        )
    except BaseException:
        conn.close()
        raise
    return ChunkRead(scn, _rows(conn, cur, row_converter(schema.columns)))


def _execute(cur: Any, sql: str, args: list[Any], source: str) -> None:
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
    conn: pymysql.Connection[Any], cur: Any, convert: Callable[[Sequence[Any]], list[Any]]
) -> Iterator[list[Any]]:
    try:
        while True:
            batch = cur.fetchmany(4096)
            if not batch:
                break
            for row in batch:
                yield convert(row)
        cur.close()
        conn.commit()
    finally:
        conn.close()
