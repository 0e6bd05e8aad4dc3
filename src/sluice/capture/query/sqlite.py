"""SQLite (stdlib ``sqlite3``) for the query source: ``query+sqlite:///relative/app.db`` or
``query+sqlite:////absolute/app.db``; tables are ``main.TABLE``.

SQLite types are affinities, so a column's kind comes from its declared type (SQLite's own
rules, refined: ``DATETIME``/``TIMESTAMP`` are timestamps, ``DATE`` dates, ``BOOLEAN``
booleans, ``DECIMAL(p,s)`` decimals). A stored value that does not fit its column's declared
type is a ``DecodeError`` naming the table and column, never a guess. Timestamps are text as
``CURRENT_TIMESTAMP`` writes them (UTC, ``YYYY-MM-DD HH:MM:SS[.fff]``, ``T`` allowed) or unix
epoch numbers in an ``INTEGER``/``REAL`` column.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from sluice.capture.query.dialect import (
    ArrayRows,
    Batch,
    Row,
    Select,
    Unconverted,
    own_extras,
)
from sluice.capture.query.sqlite_columns import column_reader
from sluice.capture.query.sqlite_pages import PageReader
from sluice.core.names import split_source
from sluice.errors import DecodeError, SourceSetupError
from sluice.schemas import Column, TableSchema
from sluice.schemas.codegen import run_generated
from sluice.schemas.decoder import EXACT

_EPOCH = dt.datetime(1970, 1, 1)
_DECIMAL = re.compile(r"\(\s*([0-9]+)\s*(?:,\s*([0-9]+)\s*)?\)")


_STAMPS: dict[str, int] = {}


def _micros(value: Any) -> int:
    if type(value) is str:
        cached = _STAMPS.get(value)
        if cached is None:
            cached = _parse_micros(value)
            if len(_STAMPS) >= 1 << 16:
                _STAMPS.clear()
            _STAMPS[value] = cached
        return cached
    return _parse_micros(value)


def _parse_micros(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("a boolean")
    if isinstance(value, (int, float)):
        return round(value * 1_000_000)  # unix epoch seconds
    if not isinstance(value, str):
        raise ValueError("not a timestamp")
    stamp = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(dt.UTC).replace(tzinfo=None)
    delta = stamp - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _days(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError("not a date")
    return (dt.date.fromisoformat(value.strip()[:10]) - _EPOCH.date()).days


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"not an integer ({type(value).__name__})")


def _float(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ValueError(f"not a number ({type(value).__name__})")


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"not text ({type(value).__name__})")


def _blob(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise ValueError(f"not a blob ({type(value).__name__})")


def _bool(value: Any) -> bool:
    if value in (0, 1):
        return bool(value)
    raise ValueError("not 0 or 1")


def _decimal(scale: int) -> Callable[[Any], Decimal]:
    step = Decimal(1).scaleb(-scale)

    def convert(value: Any) -> Decimal:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError("not a number")
        number = Decimal(str(value))
        exact = number.quantize(step, context=EXACT)
        if exact != number:
            raise ValueError(f"has more than {scale} decimals")
        return exact

    return convert


def column_of(name: str, declared: str, notnull: bool) -> tuple[Column, Callable[[Any], Any]]:
    """A column's kind from its declared type, and the converter of its stored values."""
    upper = declared.upper()
    nullable = not notnull
    if "DATETIME" in upper or "TIMESTAMP" in upper:
        return Column(name, "datetime", nullable, declared), _micros
    if "DATE" in upper:
        return Column(name, "date", nullable, declared), _days
    if "BOOL" in upper:
        return Column(name, "bool", nullable, declared), _bool
    if "INT" in upper:
        return Column(name, "int", nullable, declared), _int
    if "DECIMAL" in upper or "NUMERIC" in upper:
        match = _DECIMAL.search(upper)
        if match:
            precision, scale = int(match.group(1)), int(match.group(2) or 0)
            return Column(name, "decimal", nullable, declared, precision, scale), _decimal(scale)
        return Column(name, "double", nullable, declared), _float
    if any(t in upper for t in ("REAL", "FLOA", "DOUB")):
        return Column(name, "double", nullable, declared), _float
    if "JSON" in upper:
        return Column(name, "json", nullable, declared), _text
    if "BLOB" in upper or not upper:
        return Column(name, "bytes", nullable, declared or "BLOB"), _blob
    return Column(name, "string", nullable, declared), _text  # CHAR, CLOB, TEXT and the rest


log = logging.getLogger(__name__)


class SqliteDialect:
    name = "sqlite"
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    transient: tuple[type[BaseException], ...] = (sqlite3.OperationalError,)

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None
        self._converters: dict[str, list[Callable[[Any], Any]]] = {}
        # Pages are read by the compiled reader (sqlite_pages.py) where it can; else, and
        # for a page it refuses, through sqlite3 (counted, each reason said once).
        self._pages: PageReader | None = None
        self._refusals: dict[str, int] = {}

    def connect(self) -> None:
        if not Path(self.path).is_file():
            raise SourceSetupError(
                f"no SQLite database at {self.path}: query+sqlite:///relative/path.db or "
                "query+sqlite:////absolute/path.db"
            )
        uri = "file:" + Path(self.path).resolve().as_posix() + "?mode=ro"
        try:
            self.conn = sqlite3.connect(
                uri, uri=True, isolation_level=None, timeout=5.0, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise SourceSetupError(f"cannot open {self.path}: {exc}") from None
        opened = PageReader.open(uri, 5.0)
        if isinstance(opened, str):
            self._refused(opened, 0)
        else:
            self._pages = opened

    def _refused(self, why: str, pages: int) -> None:
        if why not in self._refusals:
            log.warning("%s: pages are read through sqlite3 (slower): %s", self.path, why)
        self._refusals[why] = self._refusals.get(why, 0) + pages

    def report(self) -> dict[str, Any]:
        """The page reader and the pages read through sqlite3 instead, for ``/stats``."""
        return {
            "page_reader": "compiled" if self._pages is not None else "sqlite3",
            "sqlite3_pages": sum(self._refusals.values()),
            "sqlite3_pages_why": sorted(self._refusals) or None,
        }

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self._pages is not None:
            self._pages.close()
            self._pages = None

    def _db(self) -> sqlite3.Connection:
        if self.conn is None:
            self.connect()
        assert self.conn is not None
        return self.conn

    def ping(self) -> None:
        self._db().execute("SELECT 1").fetchone()

    def describe(self, source: str) -> TableSchema:
        schema_name, table = split_source(source)
        if schema_name != "main":
            raise SourceSetupError(
                f"SQLite tables are named main.TABLE, got {source!r}", source=source
            )
        rows = self._db().execute(f"PRAGMA main.table_info({self.quote(table)})").fetchall()
        if not rows:
            raise SourceSetupError(f"unknown table {source!r} in {self.path}", source=source)
        columns, converters = [], []
        for _cid, name, declared, notnull, _default, _pk in rows:
            column, convert = column_of(str(name), str(declared or ""), bool(notnull))
            columns.append(column)
            converters.append(convert)
        key = tuple(str(r[1]) for r in sorted((r for r in rows if r[5]), key=lambda r: r[5]))
        self._converters[source] = converters
        return TableSchema(source, 1, tuple(columns), key)

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def table_ref(self, source: str) -> str:
        _main, table = split_source(source)
        return f"main.{self.quote(table)}"

    def placeholder(self, schema: TableSchema, column: str | None) -> str:
        return "?"

    def before_now(self, schema: TableSchema, column: str, delay_s: float) -> tuple[str, Any]:
        """Now minus the delay, in the column's storage: epoch seconds for a numeric column,
        else text in the format its values use (``T`` or space)."""
        now = time.time() - delay_s
        declared = next(c.source_type.upper() for c in schema.columns if c.name == column)
        if any(t in declared for t in ("INT", "REAL", "FLOA", "DOUB")):
            return "?", now
        stamp = dt.datetime.fromtimestamp(now, dt.UTC).replace(tzinfo=None)
        sample = (
            self._db()
            .execute(
                f"SELECT {self.quote(column)} FROM {self.table_ref(schema.source)} "
                f"WHERE {self.quote(column)} IS NOT NULL LIMIT 1"
            )
            .fetchone()
        )
        sep = "T" if sample and isinstance(sample[0], str) and "T" in sample[0] else " "
        return "?", stamp.isoformat(sep=sep, timespec="microseconds")

    def rows(self, select: Select) -> Iterator[tuple[Row, Sequence[Any]]]:
        convert = _row_path(select.schema, self._converters_of(select.schema))
        cursor = self._execute(select)
        try:
            while batch := cursor.fetchmany(1000):
                yield from map(convert, batch)
        finally:
            cursor.close()

    def batch(self, select: Select) -> Batch:
        schema = select.schema
        converters = self._converters_of(schema)
        extra, extra_at = own_extras(select, self.quote, lambda _c: True)  # read a column once
        select = replace(select, extra=extra)
        columns = self._read(select)
        raw: Sequence[Sequence[Any]]
        if columns is None:
            cursor = self._execute(select)
            try:
                raw = cursor.fetchall()
            finally:
                cursor.close()
        else:
            raw = ArrayRows(columns)
        readers = _column_readers(schema, converters)
        return Batch(
            raw,
            len(schema.columns),
            _row_path(schema, converters, extra_at),
            lambda i, values: readers[i](values),
            columns,
            extra_at,
        )

    def _read(self, select: Select) -> list[Any] | None:
        """The page's columns by the compiled reader; None: read it through sqlite3."""
        self._db()  # (re)connects, and opens the reader with the connection
        if self._pages is None:
            return None
        columns = self._pages.read(self._sql(select), select.args)
        if isinstance(columns, str):
            self._refused(columns, 1)
            return None
        return columns

    def _execute(self, select: Select) -> sqlite3.Cursor:
        return self._db().execute(self._sql(select), select.args)

    def _sql(self, select: Select) -> str:
        schema = select.schema
        cols = ", ".join(self.quote(c.name) for c in schema.columns)
        extra = "".join(f", {e} AS _sluice_x{i}" for i, e in enumerate(select.extra))
        return (
            f"SELECT {cols}{extra} FROM {self.table_ref(schema.source)} "
            f"WHERE {select.where}{select.tail()}"
        )

    def _converters_of(self, schema: TableSchema) -> list[Callable[[Any], Any]]:
        return self._converters.get(schema.source) or self._describe_converters(schema)

    def _describe_converters(self, schema: TableSchema) -> list[Callable[[Any], Any]]:
        self.describe(schema.source)
        return self._converters[schema.source]


# Values SQLite already stores as the canonical type, per kind: passed through untouched.
_NATIVE = {"int": "int", "string": "str", "double": "float", "bytes": "bytes", "json": "str"}
_FAST: dict[tuple[Column, ...], Callable[[Sequence[Any]], list[Any]]] = {}


def _fast_converter(
    schema: TableSchema, converters: list[Callable[[Any], Any]]
) -> Callable[[Sequence[Any]], list[Any]]:
    """A function from a raw row to canonical values, generated per table version: a value
    already of its kind's type passes through, the rest goes through its converter (which
    raises for a value that does not fit)."""
    cached = _FAST.get(schema.columns)
    if cached is not None:
        return cached
    env: dict[str, Any] = {}
    items = []
    for i, col in enumerate(schema.columns):
        env[f"c{i}"] = converters[i]
        native = _NATIVE.get(col.kind)
        if native is None:
            items.append(f"None if r[{i}] is None else c{i}(r[{i}])")
        else:
            v = f"r[{i}]"
            items.append(f"None if {v} is None else ({v} if type({v}) is {native} else c{i}({v}))")
    run_generated(["def convert(r):", "    return [" + ", ".join(items) + "]"], env, "sqlite row")
    fast: Callable[[Sequence[Any]], list[Any]] = env["convert"]
    if len(_FAST) > 256:
        _FAST.clear()
    _FAST[schema.columns] = fast
    return fast


def _row_path(
    schema: TableSchema,
    converters: list[Callable[[Any], Any]],
    extra_at: tuple[int, ...] | None = None,
) -> Callable[[Sequence[Any]], tuple[Row, Sequence[Any]]]:
    """One raw row -> ``(canonical row or Unconverted, raw extra values)``: the reference
    (the extra values where ``extra_at`` says, else after the row's)."""
    width = len(schema.columns)
    fast = _fast_converter(schema, converters)

    def convert(raw: Sequence[Any]) -> tuple[Row, Sequence[Any]]:
        row: Row
        try:
            row = fast(raw)
        except (ValueError, OverflowError, ArithmeticError, TypeError):
            try:
                row = _convert(schema, converters, raw[:width])
            except DecodeError as exc:  # names the column
                row = Unconverted(exc)
        return row, raw[width:] if extra_at is None else tuple(raw[i] for i in extra_at)

    return convert


_READERS: dict[tuple[Column, ...], list[Callable[[Sequence[Any]], Any]]] = {}


def _column_readers(
    schema: TableSchema, converters: list[Callable[[Any], Any]]
) -> list[Callable[[Sequence[Any]], Any]]:
    """The page path's column readers of a table version (``sqlite_columns.py``)."""
    cached = _READERS.get(schema.columns)
    if cached is None:
        cached = [column_reader(c, f) for c, f in zip(schema.columns, converters, strict=True)]
        if len(_READERS) > 256:
            _READERS.clear()
        _READERS[schema.columns] = cached
    return cached


def _convert(
    schema: TableSchema, converters: list[Callable[[Any], Any]], raw: Sequence[Any]
) -> list[Any]:
    out: list[Any] = []
    for column, convert, value in zip(schema.columns, converters, raw, strict=True):
        if value is None:
            out.append(None)
            continue
        try:
            out.append(convert(value))
        except (ValueError, OverflowError, ArithmeticError) as exc:
            raise DecodeError(
                f"cannot decode column {column.name!r} ({column.source_type}) of "
                f"{schema.source}: {str(value)[:40]!r} ({exc})",
                source=schema.source,
            ) from None
    return out
