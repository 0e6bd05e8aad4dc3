"""PostgreSQL for the query source (``query+postgresql://USER@HOST:PORT/DB``; tables are
``SCHEMA.TABLE``). Values are read in the server's text form and converted by log capture's
own converters (as seeding does), so a polled row encodes to the bytes a captured one has.
Position values come back as text and are bound with a cast to their column's type.

A page (``batch``) is read by ``COPY (SELECT ...) TO STDOUT`` in CSV: the same output
functions' text as a ``SELECT`` in text form, parsed into one Arrow string array per column
by Arrow's CSV reader (a null is an unquoted empty field, an empty text a quoted one), with
no Python object per value; its rows are made only if the row path needs them."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import psycopg2
import psycopg2.extensions
import pyarrow as pa
import pyarrow.csv as pv

from sluice.capture.postgres.runs import _parser
from sluice.capture.postgres.seed import (
    _column_oids,
    _ident,
    _raw_text,
    _table,
    _undecodable,
    no_select,
)
from sluice.capture.postgres.setup import connect, parse_pg_url, primary_key
from sluice.capture.postgres.tables import table_columns
from sluice.capture.postgres.types import column_kind
from sluice.capture.query.columns import converted
from sluice.capture.query.dialect import (
    ArrayRows,
    Batch,
    Inexact,
    Row,
    Select,
    Unconverted,
    own_extras,
)
from sluice.core.names import split_source
from sluice.errors import SourceConnectionError, SourceSetupError, first_line
from sluice.schemas import Column, TableSchema

log = logging.getLogger(__name__)


class PgDialect:
    name = "PostgreSQL"
    errors: tuple[type[BaseException], ...] = (psycopg2.Error,)
    transient: tuple[type[BaseException], ...] = (
        psycopg2.OperationalError,
        psycopg2.InterfaceError,
        SourceConnectionError,
    )

    def __init__(self, url: str) -> None:
        self.url = parse_pg_url(url)
        self.conn: Any = None
        self._types: dict[str, dict[str, tuple[int, str]]] = {}
        # pages read with a plain fetch instead of COPY (a database not in UTF8, a page
        # too big for one Arrow text column): counted, each reason said once
        self._fetched: dict[str, int] = {}

    def connect(self) -> None:
        self.conn = connect(self.url)
        self.conn.autocommit = True

    def close(self) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.close()
        self.conn = None

    def _db(self) -> Any:
        if self.conn is None or self.conn.closed:
            self.connect()
        return self.conn

    def ping(self) -> None:
        with self._db().cursor() as cur:
            cur.execute("SELECT 1")

    def describe(self, source: str) -> TableSchema:
        namespace, table = split_source(source)
        conn = self._db()
        try:
            columns = table_columns(conn, namespace, table)
            if not columns:
                raise SourceSetupError(
                    f"unknown table {source!r} in database {self.url.dbname}", source=source
                )
            key = primary_key(conn, namespace, table)
            oids = _column_oids(conn, source)
            with conn.cursor() as cur:
                cur.execute(f"SELECT 1 FROM {_table(source)} LIMIT 0")
        except psycopg2.errors.InsufficientPrivilege:
            raise no_select(source, self.url.user) from None
        _raw_text(conn, [oid for oid, _name in oids.values()])
        self._types[source] = oids
        return TableSchema(source, 1, tuple(columns), key)

    def quote(self, name: str) -> str:
        return _ident(name)

    def table_ref(self, source: str) -> str:
        return _table(source)

    def placeholder(self, schema: TableSchema, column: str | None) -> str:
        if column is None:
            return "%s"
        type_name = self._types[schema.source][column][1]
        return f"%s::{type_name.replace('%', '%%')}"

    def before_now(self, schema: TableSchema, column: str, delay_s: float) -> tuple[str, Any]:
        return "(clock_timestamp() - %s::interval)", f"{delay_s:.6f} seconds"

    def rows(self, select: Select) -> Iterator[tuple[Row, Sequence[Any]]]:
        convert = _row_path(select.schema, self._converters(select.schema))
        with self._db().cursor() as cur:
            self._execute(cur, select)
            while batch := cur.fetchmany(1000):
                yield from map(convert, batch)

    def report(self) -> dict[str, Any]:
        """Pages read with a plain fetch instead of ``COPY`` (slower), for ``/stats``."""
        return {
            "fetched_pages": sum(self._fetched.values()),
            "fetched_pages_why": sorted(self._fetched) or None,
        }

    def _fetch_instead(self, why: str) -> None:
        if why not in self._fetched:
            log.warning("PostgreSQL pages are read with a plain fetch (slower): %s", why)
        self._fetched[why] = self._fetched.get(why, 0) + 1

    def batch(self, select: Select) -> Batch:
        schema = select.schema
        converters = self._converters(schema)
        readers = [_column_reader(c, f) for c, f in zip(schema.columns, converters, strict=True)]
        extra, extra_at = own_extras(select, _ident, lambda c: c.kind in _SAME_TEXT)
        select = replace(select, extra=extra)
        conn = self._db()
        arrays: list[pa.Array] | None = None
        raw: Sequence[Sequence[Any]]
        with conn.cursor() as cur:
            if conn.encoding == "UTF8":
                query = cur.mogrify(self._sql(select), select.args).decode()
                out = io.BytesIO()
                cur.copy_expert(f"COPY ({query}) TO STDOUT WITH (FORMAT csv)", out)
                try:
                    arrays = _csv_columns(out.getvalue(), len(schema.columns) + len(extra))
                except (pa.ArrowInvalid, pa.ArrowCapacityError) as exc:  # over 2 GiB of text
                    self._fetch_instead(f"a page Arrow cannot hold as text ({first_line(exc)})")
            else:
                self._fetch_instead(
                    f"the connection's encoding is {conn.encoding}, not UTF8 (COPY's text "
                    "would need converting)"
                )
            if arrays is None:
                cur.execute(self._sql(select), select.args)
                raw = cur.fetchall()
            else:
                raw = ArrayRows(arrays)
        return Batch(
            raw,
            len(schema.columns),
            _row_path(schema, converters, extra_at),
            lambda i, values: readers[i](values),
            arrays,
            extra_at,
        )

    def _converters(self, schema: TableSchema) -> list[Callable[[str], Any]]:
        oids = self._types[schema.source]
        return [column_kind(oids[c.name][0])[1] for c in schema.columns]

    def _execute(self, cur: Any, select: Select) -> None:
        cur.execute(self._sql(select), select.args)

    def _sql(self, select: Select) -> str:
        schema = select.schema
        cols = ", ".join(_ident(c.name) for c in schema.columns)
        extra = "".join(f", ({e})::text AS _sluice_x{i}" for i, e in enumerate(select.extra))
        sql = f"SELECT {cols}{extra} FROM {_table(schema.source)} WHERE {select.where}"
        return sql + select.tail()


# Kinds whose ``(column)::text`` is the column's own text (the type's output function, no
# cast of its own as bool, bpchar or inet have): an extra that is such a column is read once.
_SAME_TEXT = frozenset({"int", "date", "datetime", "timestamp"})

_CSV_PARSE = pv.ParseOptions(
    delimiter=",", quote_char='"', double_quote=True, escape_char=False,
    newlines_in_values=True, ignore_empty_lines=False,
)  # fmt: skip


def _csv_columns(data: bytes, width: int) -> list[pa.Array]:
    """``COPY ... (FORMAT csv)`` output -> each column's texts (None for null)."""
    names = [f"c{i}" for i in range(width)]
    if not data:
        return [pa.array([], pa.string()) for _ in names]
    table = pv.read_csv(
        io.BytesIO(data),
        read_options=pv.ReadOptions(column_names=names, use_threads=False),
        parse_options=_CSV_PARSE,
        convert_options=pv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()),
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )
    return [table.column(i).combine_chunks() for i in range(width)]


def _row_path(
    schema: TableSchema,
    converters: list[Callable[[str], Any]],
    extra_at: tuple[int, ...] | None = None,
) -> Callable[[Sequence[Any]], tuple[Row, Sequence[Any]]]:
    """One row of texts -> ``(canonical row or Unconverted, raw extra values)`` (the extra
    values where ``extra_at`` says, else after the row's)."""
    width = len(schema.columns)

    def convert(raw: Sequence[Any]) -> tuple[Row, Sequence[Any]]:
        values = raw[:width]
        row: Row
        try:
            row = [None if v is None else c(v) for c, v in zip(converters, values, strict=True)]
        except (ValueError, OverflowError):
            row = Unconverted(_undecodable(schema, converters, values))
        return row, raw[width:] if extra_at is None else tuple(raw[i] for i in extra_at)

    return convert


def _column_reader(
    column: Column, convert: Callable[[str], Any]
) -> Callable[[Sequence[Any]], pa.Array]:
    """A column's texts -> Arrow array: by log capture's bulk path where it takes the kind
    (``postgres/runs.py``: Arrow's casts, exact for the server's text forms; a text they
    refuse raises ``Inexact``), else by the row path's converter."""
    parse = _parser(column.kind, convert)
    if parse is None:
        return lambda values: converted(column, convert, _listed(values))

    def read(values: Sequence[Any]) -> pa.Array:
        try:
            return parse(values if isinstance(values, pa.Array) else pa.array(values, pa.string()))
        except pa.ArrowInvalid as exc:
            raise Inexact(str(exc)) from None

    return read


def _listed(values: Sequence[Any]) -> Sequence[Any]:
    return values.to_pylist() if isinstance(values, pa.Array) else values
