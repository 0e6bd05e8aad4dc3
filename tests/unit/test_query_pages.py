"""The query source's page path (``capture/query/pages.py``) gives exactly the row path's
pages: the same events byte for byte, the same positions, the same skipped rows, per dialect.

SQLite runs for real (a file per example, values of every storage class in every declared
type); PostgreSQL and MySQL run their dialect's own conversions over pages a stand-in hands
out (the server's text forms: COPY's CSV, the text protocol's row packets). The row path is the
reference: each poll runs twice, once with the page path off.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import tempfile
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.capture.postgres.types import column_kind
from sluice.capture.query import pages, poll, sqlite_columns
from sluice.capture.query.columns import canonical
from sluice.capture.query.dialect import ArrayRows, Batch, Row, Select
from sluice.capture.query.mysql import _row_path as mysql_row_path
from sluice.capture.query.mysql_pages import column_reader, split
from sluice.capture.query.options import TableOptions
from sluice.capture.query.poll import TablePoller
from sluice.capture.query.postgres import _column_reader, _csv_columns
from sluice.capture.query.postgres import _row_path as pg_row_path
from sluice.capture.query.sqlite import SqliteDialect
from sluice.schemas import Column, SchemaRegistry, TableSchema
from sluice.schemas.arrow_encoder import ARROW_KINDS, arrow_encodable
from tests.unit.test_mysql_pages import COLUMNS as MYSQL_COLUMNS
from tests.unit.test_mysql_pages import packet as mysql_packet
from tests.unit.test_mysql_pages import pages as mysql_pages
from tests.unit.test_pg_runs import COLUMNS as PG_COLUMNS

Polled = list[tuple[list[bytes], dict[str, Any], tuple[str, ...]]]


def _polls(poller: TablePoller, monkeypatch: pytest.MonkeyPatch, fast: bool) -> Polled:
    with monkeypatch.context() as m:
        m.setattr(pages, "MIN_ROWS", 1)
        if not fast:
            m.setattr(poll.PageEncoder, "build", classmethod(lambda *_: None))
        return [(p.events, p.position, p.skipped) for p in poller.poll()]


def _both(make: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Polled, Polled]:
    return _polls(make(), monkeypatch, True), _polls(make(), monkeypatch, False)


# -- SQLite ------------------------------------------------------------------------------------
_LONG = st.integers(-(1 << 63), (1 << 63) - 1)
_FLOAT = st.floats(allow_nan=False)
_STAMP = st.tuples(
    st.datetimes(dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31)),
    st.sampled_from([" ", "T"]),
    st.sampled_from(["seconds", "milliseconds", "microseconds"]),
).map(lambda t: t[0].isoformat(sep=t[1], timespec=t[2]))
_DIGITS = st.from_regex(
    r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,7})?\Z"
)
_ODD_STAMP = st.sampled_from(
    [
        " 2024-01-02 03:04:05",
        "2024-01-02 03:04:05Z",
        "2024-01-02T03:04:05+02:00",
        "0000-01-01 00:00:00",
    ]
)
_CENTS = st.decimals(-(10**8), 10**8, places=2).map(float)
# (declared type, values as a writer stores them, odd values stored in it now and then)
SQLITE: list[tuple[str, Any, Any]] = [
    ("INT", _LONG, st.one_of(_FLOAT, st.text(max_size=3))),
    ("REAL", _FLOAT, st.one_of(_LONG, st.just("x"))),
    ("TEXT", st.text(), st.one_of(_LONG, _FLOAT)),
    ("BLOB", st.binary(), st.text(max_size=4)),
    ("JSON", st.just('{"a": 1}'), st.just(2)),
    ("TIMESTAMP", _STAMP, st.one_of(_DIGITS, _ODD_STAMP, _LONG, _FLOAT)),
    ("DATE", st.dates().map(str), st.one_of(_DIGITS.map(lambda s: s[:10]), st.just("2024-1-2"))),
    (
        "DECIMAL(10,2)",
        st.one_of(_CENTS, st.integers(-(10**9), 10**9)),
        st.one_of(_FLOAT, st.integers(-(10**15), 10**15), st.just("1.5x"), _CENTS.map(str)),
    ),
    ("BOOLEAN", st.sampled_from([0, 1]), _LONG),
    ("INT", st.just(0), st.just(1)),  # "del", the soft-delete column
]
_SQLITE_NAMES = ["i", "f", "s", "b", "j", "ts", "d", "n", "flag", "del"]
_SQLITE_MODES = [
    TableOptions("incrementing", (), "id", page_rows=7),
    TableOptions("timestamp+incrementing", ("ts",), "id", page_rows=9),
    TableOptions("timestamp", ("ts",), "id", page_rows=5),
    TableOptions("bulk", page_rows=6),
    TableOptions("incrementing", (), "id", soft_delete_column="del", page_rows=50),
]


@st.composite
def sqlite_rows(draw: Any) -> list[tuple[Any, ...]]:
    """Rows of values as writers store them (or null), and now and then an odd one."""
    clean = st.tuples(*(st.one_of(st.none(), values) for _, values, _ in SQLITE))
    rows = [list(r) for r in draw(st.lists(clean, min_size=1, max_size=40))]
    for _ in range(draw(st.integers(0, 2))):
        row, column = draw(st.integers(0, len(rows) - 1)), draw(st.integers(0, len(SQLITE) - 1))
        rows[row][column] = draw(SQLITE[column][2])
    return [tuple(r) for r in rows]


def _sqlite_file(folder: str, key: str, rows: list[tuple[Any, ...]]) -> str:
    path = str(Path(folder) / "t.db")
    db = sqlite3.connect(path)
    columns = ", ".join(f'"{n}" {t}' for n, (t, _, _) in zip(_SQLITE_NAMES, SQLITE, strict=True))
    db.execute(f"CREATE TABLE t (id INTEGER NOT NULL, {columns}, PRIMARY KEY ({key}))")
    marks = ", ".join("?" * (len(SQLITE) + 1))
    with db:
        db.executemany(f"INSERT INTO t VALUES ({marks})", [(n, *r) for n, r in enumerate(rows)])
    db.close()
    return path


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=sqlite_rows(),
    mode=st.sampled_from(_SQLITE_MODES),
    key=st.sampled_from(["id", "s", "id, d"]),
    max_inc=st.one_of(st.none(), st.integers(-5, 50)),
)
def test_sqlite_pages_equal_the_row_path(
    rows: list[tuple[Any, ...]],
    mode: TableOptions,
    key: str,
    max_inc: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if key != "id":  # a key column may hold each value once
        index = 2 if key == "s" else 6
        seen: set[Any] = set()
        rows = [r for r in rows if not (r[index] in seen or seen.add(r[index]))]  # type: ignore[func-returns-value]
    with tempfile.TemporaryDirectory() as folder:
        path = _sqlite_file(folder, key, rows)
        position = {} if max_inc is None else {"max_inc": max_inc}

        def make() -> TablePoller:
            return TablePoller("main.t", mode, SqliteDialect(path), SchemaRegistry(), position)

        fast, slow = _both(make, monkeypatch)
    assert fast == slow


def test_a_plain_sqlite_page_takes_the_page_path(tmp_path: Path) -> None:
    """The kinds of a typical table all convert column-wise (no fallback to the row path)."""
    rows = [
        (7, 1.5, "x", b"\x00", "{}", "2024-01-02 03:04:05.123", "2024-01-02", 12.34, 1, 0),
        (None, None, None, None, None, "2024-01-02T03:04:05", None, 5, None, None),
    ] * 20
    dialect = SqliteDialect(_sqlite_file(str(tmp_path), "id", rows))
    schema = dialect.describe("main.t")
    select = Select(schema, ('"id"',), "1=1", (), '"id"', None)
    batch = dialect.batch(select)
    encoder = pages.PageEncoder(schema, TableOptions("incrementing", (), "id"), None)
    position: dict[str, Any] = {}
    events = encoder.events(batch, position)
    assert events is not None and len(events) == 40
    assert position == {"inc": 39, "max_inc": 39}


# -- stand-ins for a server: pages of raw rows through a dialect's own conversions -------------
class _Pages:
    """A dialect whose table is ``rows`` (raw values, then the incrementing value's text),
    read in pages by the incrementing value as the poll asks."""

    name = "stand-in"
    errors: tuple[type[BaseException], ...] = ()
    transient: tuple[type[BaseException], ...] = ()

    def __init__(
        self,
        schema: TableSchema,
        rows: list[list[Any]],
        convert: Any,
        column: Any,
        copy: bool = False,
        arrays: Any = None,
    ):
        self.schema, self.all, self.convert, self.column = schema, rows, convert, column
        self.copy = copy  # PostgreSQL's COPY: the page as CSV, read into Arrow columns
        self.arrays = arrays  # raw rows -> their columns as Arrow arrays (or None)

    def describe(self, source: str) -> TableSchema:
        return self.schema

    def quote(self, name: str) -> str:
        return name

    def placeholder(self, schema: TableSchema, column: str | None) -> str:
        return "?"

    def batch(self, select: Select) -> Batch:
        after = int(select.args[0]) if select.args else -1
        raw = [r for r in self.all if int(r[-1]) > after][: select.limit]
        width = len(self.schema.columns)
        if self.copy:
            arrays = _csv_columns(pg_csv(raw), width + 1)
            return Batch(ArrayRows(arrays), width, self.convert, self.column, arrays)
        arrays = None if self.arrays is None else self.arrays(raw)
        if arrays is not None:
            return Batch(ArrayRows(arrays), width, self.convert, self.column, arrays)
        return Batch(raw, width, self.convert, self.column)

    def rows(self, select: Select) -> Iterator[tuple[Row, Sequence[Any]]]:
        yield from self.batch(select).rows()


_PG_SCHEMA = TableSchema(
    "public.t",
    1,
    tuple(Column(n, column_kind(oid)[0], n != "id", "t") for n, oid, _ in PG_COLUMNS),
    ("id",),
)
_PG_CONVERTERS = [column_kind(oid)[1] for _, oid, _ in PG_COLUMNS]
_PG_TEXTS = [st.one_of(st.none(), values) if n != "id" else values for n, _, values in PG_COLUMNS]
_PG_ODD = st.sampled_from(["infinity", "-infinity", "0044-03-15 BC", "NaN"])


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(st.tuples(*_PG_TEXTS), min_size=1, max_size=40),
    odd=st.one_of(st.none(), st.tuples(st.integers(0, 39), st.integers(1, 11), _PG_ODD)),
    max_inc=st.one_of(st.none(), st.integers(-5, 50)),
    copy=st.booleans(),
)
def test_postgres_pages_equal_the_row_path(
    rows: list[tuple[Any, ...]],
    odd: tuple[int, int, str] | None,
    max_inc: int | None,
    copy: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = [[*r, str(n)] for n, r in enumerate(rows)]
    if odd is not None and odd[0] < len(table):
        table[odd[0]][odd[1]] = odd[2]
    readers = [
        _column_reader(c, f) for c, f in zip(_PG_SCHEMA.columns, _PG_CONVERTERS, strict=True)
    ]
    convert = pg_row_path(_PG_SCHEMA, _PG_CONVERTERS)
    options = TableOptions("incrementing", (), "id", page_rows=8)
    position = {} if max_inc is None else {"max_inc": max_inc}

    def make() -> TablePoller:
        dialect = _Pages(_PG_SCHEMA, table, convert, lambda i, v: readers[i](v), copy)
        return TablePoller("public.t", options, dialect, SchemaRegistry(), position)  # type: ignore[arg-type]

    fast, slow = _both(make, monkeypatch)
    assert fast == slow


def pg_csv(rows: Sequence[Sequence[str | None]]) -> bytes:
    """Rows as PostgreSQL's ``COPY ... (FORMAT csv)`` writes them (``CopyAttributeOutCSV``):
    a null as nothing; a text quoted (quotes doubled) when empty or holding a comma, a quote,
    CR or LF."""

    def field(value: str | None) -> str:
        if value is None:
            return ""
        if value == "" or any(c in value for c in ',"\r\n'):
            return '"' + value.replace('"', '""') + '"'
        return value

    return b"".join((",".join(map(field, row)) + "\n").encode() for row in rows)


_PG_TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))


@given(
    rows=st.integers(0, 3).flatmap(
        lambda width: st.lists(
            st.lists(
                st.one_of(st.none(), _PG_TEXT, st.sampled_from(['"', ",", "\r\n", " "])),
                min_size=width + 1,
                max_size=width + 1,
            ),
            max_size=12,
        )
    )
)
def test_copy_csv_reads_back_every_text_and_null(rows: list[list[str | None]]) -> None:
    width = len(rows[0]) if rows else 2
    arrays = _csv_columns(pg_csv(rows), width)
    assert [a.to_pylist() for a in arrays] == [list(c) for c in zip(*rows, strict=True)] or (
        not rows and all(len(a) == 0 for a in arrays)
    )
    lazy = ArrayRows(arrays)
    assert len(lazy) == len(rows)
    if rows:
        assert lazy[-1] == tuple(rows[-1]) and lazy[0] == tuple(rows[0])
    assert list(lazy) == [tuple(r) for r in rows]


# MySQL: raw rows are the text protocol's bytes, split into columns as a page is read (or
# left as rows, as a page ``split`` refuses), then the dialect's own readers and row path
_MYSQL_KEPT = [i for i, c in enumerate(MYSQL_COLUMNS) if c.kind in ARROW_KINDS]  # the rest: rows
_MYSQL_SCHEMA = TableSchema(
    "shop.t",
    1,
    (Column("id", "int", False, "bigint"), *(MYSQL_COLUMNS[i] for i in _MYSQL_KEPT)),
    ("id",),
)
_MYSQL_READERS = [column_reader(c) for c in _MYSQL_SCHEMA.columns]


def _mysql_arrays(raw: list[list[Any]]) -> list[pa.Array] | None:
    width = len(_MYSQL_SCHEMA.columns)
    arrays = split([mysql_packet(r[:width]) for r in raw], width)
    return None if arrays is None else [*arrays, pa.array([r[-1] for r in raw], pa.string())]


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=mysql_pages(),
    max_inc=st.one_of(st.none(), st.integers(-5, 50)),
    by_columns=st.booleans(),
)
def test_mysql_pages_equal_the_row_path(
    rows: list[list[bytes | None]],
    max_inc: int | None,
    by_columns: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert arrow_encodable(_MYSQL_SCHEMA)  # the page path takes the table
    table = [[str(n).encode(), *(r[i] for i in _MYSQL_KEPT), str(n)] for n, r in enumerate(rows)]
    options = TableOptions("incrementing", (), "id", page_rows=8)
    position = {} if max_inc is None else {"max_inc": max_inc}

    def make() -> TablePoller:
        dialect = _Pages(
            _MYSQL_SCHEMA,
            table,
            mysql_row_path(_MYSQL_SCHEMA),
            lambda i, v: _MYSQL_READERS[i](v),
            arrays=_mysql_arrays if by_columns else None,
        )
        return TablePoller("shop.t", options, dialect, SchemaRegistry(), position)  # type: ignore[arg-type]

    fast, slow = _both(make, monkeypatch)
    assert fast == slow


def test_a_decimal_past_64_bits_takes_the_row_path() -> None:
    column = Column("n", "decimal", True, "decimal(30,2)", 30, 2)
    with pytest.raises(ValueError, match="64 bits"):
        canonical(column, [Decimal("1e25"), None])
    assert canonical(column, [Decimal("-1.5"), None]).to_pylist() == [-150, None]


def test_page_columns_are_the_very_values_whatever_they_hold() -> None:
    for rows in (
        [(1, "a", b"x", None, 1.5), (2, "bc", b"", 7, -0.0)],
        [(1, [1, 2]), (2, [3, 4])],  # a value that is a sequence itself
        [(1, [1]), (2, [3, 4])],
        [([1, 2], (3, 4)), ([5, 6], (7, 8))],  # sequences all through: zip
    ):
        columns = pages._columns(rows)
        assert len(columns) == len(rows[0])
        for column, expected in zip(columns, zip(*rows, strict=True), strict=True):
            assert len(column) == len(expected)
            assert all(a is b for a, b in zip(column, expected, strict=True))


_NEAR_STAMP = st.tuples(
    st.one_of(_STAMP, _DIGITS, _ODD_STAMP, _DIGITS.map(lambda s: s[:10])),
    st.integers(0, 30),
    st.sampled_from(["0", "9", " ", "T", "-", ":", ".", "x", "é", "\n"]),
    st.booleans(),
).map(lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + 1 :] if t[3] else t[0])


@given(texts=st.lists(_NEAR_STAMP, min_size=1, max_size=12), same=st.booleans())
def test_fixed_length_stamps_are_checked_as_the_regex_checks(texts: list[str], same: bool) -> None:
    if same:  # one length, as a writer's texts usually are
        texts = [t for t in texts if len(t.encode()) == len(texts[0].encode())]
    arr = pa.array(texts, pa.string())
    for pattern in (sqlite_columns._STAMP, sqlite_columns._DATE):
        by_regex = (
            pc.all(pc.match_substring_regex(arr, pattern)).as_py() is not False
            and not pc.any(pc.starts_with(arr, "0000")).as_py()
        )
        assert sqlite_columns._shaped(arr, pattern) == by_regex
        fixed = sqlite_columns._fixed_shape(arr, sqlite_columns._SHAPES[pattern])
        assert fixed in (None, by_regex)
        if same:
            assert fixed is not None
