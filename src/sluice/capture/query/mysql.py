"""MySQL/MariaDB for the query source (``query+mysql://USER@HOST:PORT``; tables are
``DB.TABLE``): no binlog, no replication rights, just ``SELECT``. Rows are read from the text
protocol's packets by seeding's generated parser, so a polled row has the canonical values
(and bytes) a captured one has; position values come back as text."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pymysql
import pymysql.cursors

from sluice.capture.mysql.describe import describe_table
from sluice.capture.mysql.ranges import q, table_ref
from sluice.capture.mysql.seed import (
    _CONVERT,
    _TEXT_KINDS,
    _select_expr,
    execute_select,
    row_parser,
)
from sluice.capture.mysql.url import parse_source_url
from sluice.capture.query.dialect import ArrayRows, Batch, Row, Select, Unconverted
from sluice.capture.query.mysql_pages import (
    column_reader,
    fields,
    result_packets,
    split,
    text_array,
)
from sluice.errors import DecodeError, SourceConnectionError
from sluice.schemas import Column, TableSchema

log = logging.getLogger(__name__)


_Read = Callable[[Sequence[Any]], pa.Array]


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
        self._parsed_pages: dict[str, int] = {}  # why -> pages read row by row
        self._column_readers: dict[tuple[Column, ...], list[_Read]] = {}

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
        """Pages parsed row by row instead of split into columns (slower), for ``/stats``."""
        return {
            "parsed_pages": sum(self._parsed_pages.values()),
            "parsed_pages_why": sorted(self._parsed_pages) or None,
        }

    def batch(self, select: Select) -> Batch:
        """A page's raw rows are each column's text-protocol bytes (None for NULL), then the
        extra values' texts: as columns when ``mysql_pages.split`` lays the page out, else
        as rows by the row parser's field reader. Both take the same row path."""
        schema = select.schema
        width = len(schema.columns)
        sql, args = self._sql(select)
        conn = self._db()
        with conn.cursor(pymysql.cursors.SSCursor) as cur:
            execute_select(cur, sql, args, schema.source)
            packets = result_packets(conn)
        arrays = split(packets, width + len(select.extra))
        if arrays is None and packets:
            self._parsed_instead("a value of 16 MiB or more, or a row it cannot lay out")
        elif arrays is not None:
            try:
                arrays = [*arrays[:width], *map(text_array, arrays[width:])]
            except pa.ArrowInvalid:  # a position text that is not UTF-8: _raw_row says which
                arrays = None
        raw: Sequence[Sequence[Any]] = (
            [_raw_row(data, width, schema.source) for data in packets]
            if arrays is None
            else ArrayRows(arrays)
        )
        readers = self._readers(schema)
        return Batch(
            raw,
            width,
            _row_path(schema),
            lambda i, values: readers[i](values),
            arrays,
        )

    def _readers(self, schema: TableSchema) -> list[_Read]:
        key = tuple(schema.columns)
        readers = self._column_readers.get(key)
        if readers is None:
            if len(self._column_readers) > 64:
                self._column_readers.clear()
            readers = self._column_readers[key] = [column_reader(c) for c in schema.columns]
        return readers

    def _parsed_instead(self, why: str) -> None:
        if why not in self._parsed_pages:
            log.warning("MySQL pages are parsed row by row (slower): %s", why)
        self._parsed_pages[why] = self._parsed_pages.get(why, 0) + 1

    def _sql(self, select: Select) -> tuple[str, Sequence[Any]]:
        schema = select.schema
        exprs = ", ".join(_select_expr(c) for c in schema.columns)
        extra = "".join(f", CAST({e} AS CHAR) AS _sluice_x{i}" for i, e in enumerate(select.extra))
        sql = f"SELECT {exprs}{extra} FROM {table_ref(schema.source)} WHERE {select.where}"
        return sql + select.tail(), select.args

    def _parsed(self, select: Select) -> Iterator[list[Any] | bytes]:
        """Each row packet parsed (the schema's columns, then the extra values as text), or
        the packet's bytes where the parser refused it."""
        schema = select.schema
        extras = [Column(f"_x{i}", "string", True, "text") for i in range(len(select.extra))]
        parse = row_parser((*schema.columns, *extras))
        sql, args = self._sql(select)
        conn = self._db()
        cur = conn.cursor(pymysql.cursors.SSCursor)
        execute_select(cur, sql, args, schema.source)
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


def _raw_row(data: bytes, width: int, source: str) -> list[Any]:
    """A row packet as a page's raw row: the columns' bytes, then the extra values' texts
    (``DecodeError`` where one is not UTF-8: no position can be bound back from it)."""
    values: list[Any] = fields(data)
    try:
        values[width:] = [None if v is None else v.decode() for v in values[width:]]
    except UnicodeDecodeError as exc:
        raise DecodeError(
            f"a timestamp or incrementing value of {source} is not UTF-8 text ({exc}): "
            "use a column whose CAST AS CHAR is UTF-8 as the table's position",
            source=source,
        ) from None
    return values


def _row_path(schema: TableSchema) -> Callable[[Sequence[Any]], tuple[Row, Sequence[Any]]]:
    """A raw row -> ``(canonical row or Unconverted, raw extra values)``: the generated row
    parser's conversions, value by value."""
    width = len(schema.columns)
    converters = [_value_converter(c.kind) for c in schema.columns]

    def convert(raw: Sequence[Any]) -> tuple[Row, Sequence[Any]]:
        values = raw[:width]
        row: Row
        try:
            row = [None if v is None else f(v) for f, v in zip(converters, values, strict=True)]
        except (ValueError, ArithmeticError, IndexError):
            row = Unconverted(_undecodable(schema, values))
        return row, raw[width:]

    return convert


def _value_converter(kind: str) -> Callable[[bytes], Any]:
    if kind in _TEXT_KINDS:
        return bytes.decode
    if kind in ("bytes", "geometry"):
        return bytes
    return _CONVERT[kind]


def _unconverted(schema: TableSchema, data: bytes, width: int) -> tuple[Row, list[Any]]:
    """A row packet the parser refused: why (the first column that does not convert) and
    its position values (text, as the parser gives them)."""
    raw = fields(data)
    error = _undecodable(schema, raw[:width])
    return Unconverted(error), [None if v is None else v.decode() for v in raw[width:]]


def _undecodable(schema: TableSchema, raw: Sequence[bytes | None]) -> DecodeError:
    """Why a row's values do not convert: the first column that does not."""
    if len(raw) != len(schema.columns):
        return DecodeError(
            f"cannot decode a row of {schema.source}: {len(raw)} values for "
            f"{len(schema.columns)} columns",
            source=schema.source,
        )
    for col, value in zip(schema.columns, raw, strict=True):
        try:
            if value is not None:
                _value_converter(col.kind)(value)
        except (ValueError, ArithmeticError) as exc:
            return DecodeError(
                f"cannot decode column {col.name!r} ({col.source_type}) of {schema.source}: "
                f"{(value or b'')[:40].decode(errors='replace')!r} ({exc})",
                source=schema.source,
            )
    return DecodeError(f"cannot decode a row of {schema.source}", source=schema.source)
