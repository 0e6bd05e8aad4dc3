"""MySQL/MariaDB for the query source (``query+mysql://USER@HOST:PORT``; tables are
``DB.TABLE``): no binlog, no replication rights, just ``SELECT``. Rows are read from the text
protocol's packets by seeding's generated parser, so a polled row has the canonical values
(and bytes) a captured one has; position values come back as text."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import pymysql
import pymysql.cursors

from sluice.capture.mysql.describe import describe_table
from sluice.capture.mysql.ranges import q, table_ref
from sluice.capture.mysql.seed import (
    _CONVERT,
    _select_expr,
    execute_select,
    row_parser,
)
from sluice.capture.mysql.url import parse_source_url
from sluice.capture.query.columns import canonical
from sluice.capture.query.dialect import Batch, Row, Select, Unconverted
from sluice.errors import DecodeError, SourceConnectionError
from sluice.schemas import Column, TableSchema


class MySQLDialect:
    name = "MySQL"
    errors: tuple[type[BaseException], ...] = (pymysql.err.MySQLError,)
    transient: tuple[type[BaseException], ...] = (
        pymysql.err.OperationalError,
        pymysql.err.InterfaceError,
        SourceConnectionError,
    )

    def __init__(self, url: str) -> None:
        self.url = parse_source_url(url)
        self.conn: pymysql.Connection[Any] | None = None

    def connect(self) -> None:
        self.conn = self.url.params().connect(autocommit=True)
        with self.conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(pymysql.err.Error):
                self.conn.close()
            self.conn = None

    def _db(self) -> pymysql.Connection[Any]:
        if self.conn is None:
            self.connect()
        assert self.conn is not None
        return self.conn

    def ping(self) -> None:
        with self._db().cursor() as cur:
            cur.execute("SELECT 1")

    def describe(self, source: str) -> TableSchema:
        conn = self._db()
        schema = describe_table(conn, source)
        with conn.cursor() as cur:
            execute_select(cur, f"SELECT 1 FROM {table_ref(source)} LIMIT 0", (), source)
        return schema

    def quote(self, name: str) -> str:
        return q(name)

    def table_ref(self, source: str) -> str:
        return table_ref(source)

    def placeholder(self, schema: TableSchema, column: str | None) -> str:
        return "%s"

    def before_now(self, schema: TableSchema, column: str, delay_s: float) -> tuple[str, Any]:
        return "(NOW(6) - INTERVAL %s MICROSECOND)", int(delay_s * 1_000_000)

    def rows(self, select: Select) -> Iterator[tuple[Row, Sequence[Any]]]:
        width = len(select.schema.columns)
        for values in self._parsed(select):
            if isinstance(values, bytes):
                yield _unconverted(select.schema, values, width)
            else:
                yield values[:width], values[width:]

    def report(self) -> dict[str, Any]:
        return {}

    def batch(self, select: Select) -> Batch:
        """The parser's rows are canonical already: a column is its values as they are."""
        schema = select.schema
        raw = list(self._parsed(select))
        width = len(schema.columns)

        def convert(values: Sequence[Any]) -> tuple[Row, Sequence[Any]]:
            if isinstance(values, bytes):
                return _unconverted(schema, values, width)
            return list(values[:width]), values[width:]

        whole = not any(isinstance(values, bytes) for values in raw)
        return Batch(
            raw,
            width,
            convert,
            (lambda i, values: canonical(schema.columns[i], values)) if whole else None,
        )

    def _parsed(self, select: Select) -> Iterator[list[Any] | bytes]:
        """Each row packet parsed (the schema's columns, then the extra values as text), or
        the packet's bytes where the parser refused it."""
        schema = select.schema
        extras = [Column(f"_x{i}", "string", True, "text") for i in range(len(select.extra))]
        parse = row_parser((*schema.columns, *extras))
        exprs = ", ".join(_select_expr(c) for c in schema.columns)
        extra = "".join(f", CAST({e} AS CHAR) AS _sluice_x{i}" for i, e in enumerate(select.extra))
        sql = f"SELECT {exprs}{extra} FROM {table_ref(schema.source)} WHERE {select.where}"
        conn = self._db()
        cur = conn.cursor(pymysql.cursors.SSCursor)
        execute_select(cur, sql + select.tail(), select.args, schema.source)
        result = cur._result  # unbuffered: the row packets are still unread
        try:
            while True:
                packet = conn._read_packet()
                if result._check_packet_is_eof(packet):
                    result.unbuffered_active = False
                    result.connection = None
                    break
                try:
                    yield parse(packet._data)
                except (ValueError, ArithmeticError, IndexError):
                    yield bytes(packet._data)
        finally:
            cur.close()


def _unconverted(schema: TableSchema, data: bytes, width: int) -> tuple[Row, list[Any]]:
    """A row packet the parser refused: why (the first column that does not convert) and
    its position values (text, as the parser gives them)."""
    raw = _fields(data)
    error = DecodeError(f"cannot decode a row of {schema.source}", source=schema.source)
    for col, value in zip(schema.columns, raw, strict=False):
        convert = _CONVERT.get(col.kind)
        try:
            if value is not None and convert is not None:
                convert(value)
            elif value is not None and col.kind not in ("bytes", "geometry"):
                value.decode()
        except (ValueError, ArithmeticError) as exc:
            error = DecodeError(
                f"cannot decode column {col.name!r} ({col.source_type}) of {schema.source}: "
                f"{(value or b'')[:40].decode(errors='replace')!r} ({exc})",
                source=schema.source,
            )
            break
    return Unconverted(error), [None if v is None else v.decode() for v in raw[width:]]


def _fields(data: bytes) -> list[bytes | None]:
    """A text-protocol row packet's values as bytes (None for NULL)."""
    out: list[bytes | None] = []
    p = 0
    while p < len(data):
        n = data[p]
        if n == 0xFB:
            out.append(None)
            p += 1
            continue
        if n < 251:
            p += 1
        elif n == 0xFC:
            n, p = int.from_bytes(data[p + 1 : p + 3], "little"), p + 3
        elif n == 0xFD:
            n, p = int.from_bytes(data[p + 1 : p + 4], "little"), p + 4
        else:
            n, p = int.from_bytes(data[p + 1 : p + 9], "little"), p + 9
        out.append(data[p : p + n])
        p += n
    return out
