"""The compiled SQLite page reader gives exactly the values sqlite3 gives: every storage class,
NULLs, columns mixing classes, edge values, bound parameters of each type; and a page it
cannot read exactly is read through sqlite3, counted and said once."""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluice.capture.query import sqlite_pages
from sluice.capture.query.dialect import ArrayRows, Select
from sluice.capture.query.sqlite import SqliteDialect
from sluice.capture.query.sqlite_pages import PageReader

_VALUES = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**53 + 1]),
    st.floats(allow_nan=False),  # SQLite stores NaN as NULL
    st.sampled_from([-0.0, math.inf, -math.inf, 5e-324]),
    st.text(),
    st.sampled_from(["", "\x00", "a\x00b", "é😀"]),
    st.binary(),
)


def _same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    """Equal values of equal types (0.0 and -0.0 told apart)."""
    return [[(type(v), repr(v)) for v in r] for r in a] == [
        [(type(v), repr(v)) for v in r] for r in b
    ]


def _database(folder: str, rows: list[tuple[Any, ...]]) -> str:
    path = str(Path(folder) / "t.db")
    db = sqlite3.connect(path)
    # no declared type: no affinity, every value is stored as it was given
    db.execute("CREATE TABLE t (a, b, c)")
    with db:
        db.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    db.close()
    return path


def _uri(path: str) -> str:
    return "file:" + Path(path).resolve().as_posix() + "?mode=ro"


@pytest.fixture(autouse=True)
def _compiled() -> None:
    if os.environ.get("CI") != "true" and sqlite_pages.unavailable():
        pytest.skip(sqlite_pages.unavailable())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(st.tuples(_VALUES, _VALUES, _VALUES), max_size=30),
    bound=st.one_of(st.none(), st.integers(-5, 5), st.floats(-5, 5), st.text(max_size=3)),
)
def test_a_page_holds_exactly_what_sqlite3_gives(rows: list[tuple[Any, ...]], bound: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = _database(folder, rows)
        sql = "SELECT a, b, c, ? AS x FROM t WHERE rowid > ? ORDER BY rowid"
        reader = PageReader(_uri(path), 5.0)
        try:
            columns = reader.read(sql, (bound, 0))
        finally:
            reader.close()
        db = sqlite3.connect(path)
        expected = db.execute(sql, (bound, 0)).fetchall()
        db.close()
    assert not isinstance(columns, str)
    assert len(ArrayRows(columns)) == len(expected)
    assert _same(list(ArrayRows(columns)), expected)
    if expected:
        assert _same([ArrayRows(columns)[-1]], [expected[-1]])  # the last row alone


def test_one_storage_class_per_column_gives_arrow_arrays(tmp_path: Path) -> None:
    path = _database(str(tmp_path), [(1, 1.5, "x"), (None, None, None), (3, 2.5, "é")])
    reader = PageReader(_uri(path), 5.0)
    columns = reader.read("SELECT a, b, c, NULL FROM t", ())
    reader.close()
    assert not isinstance(columns, str)
    assert [str(c.type) for c in columns] == ["int64", "double", "string", "null"]  # type: ignore[union-attr]
    assert columns[0].null_count == 1  # type: ignore[union-attr]


def test_leading_and_inner_nulls_of_every_class(tmp_path: Path) -> None:
    rows = [(None, None, None), (1, 1.5, "x"), (None, None, None), (2, 2.5, "yz")]
    rows += [(None, None, b""), (None, None, b"ab")]
    path = _database(
        str(tmp_path), [(a, b, c if not isinstance(c, bytes) else None) for a, b, c in rows]
    )
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE u (b)")
        db.executemany("INSERT INTO u VALUES (?)", [(None,), (b"",), (None,), (b"\x00z",)])
    expected = db.execute("SELECT * FROM t").fetchall() + db.execute("SELECT * FROM u").fetchall()
    db.close()
    reader = PageReader(_uri(path), 5.0)
    t, u = reader.read("SELECT * FROM t", ()), reader.read("SELECT * FROM u", ())
    reader.close()
    assert not isinstance(t, str) and not isinstance(u, str)
    for column in [*t, *u]:
        column.validate(full=True)  # type: ignore[union-attr]
    assert _same([*ArrayRows(t), *ArrayRows(u)], expected)


# surrogates, overlongs, past U+10FFFF, cut sequences; and valid ones at each length
_EDGES = [b"\xed\xa0\x80", b"\xc0\x80", b"\xe0\x80\x80", b"\xf0\x80\x80\x80"]
_EDGES += [b"\xf4\x90\x80\x80", b"\xc3", b"\xe2\x82", b"\xc3\xa9", b"\xe2\x82\xac"]
_EDGES += [b"\xf0\x9f\x98\x80", b"\xed\x9f\xbf", b"\xf4\x8f\xbf\xbf", b"\x7f"]


@settings(max_examples=200, deadline=None)
@given(
    raw=st.lists(st.one_of(st.binary(max_size=6), st.sampled_from(_EDGES)), min_size=1, max_size=8)
)
def test_text_bytes_are_refused_exactly_where_sqlite3_refuses_them(raw: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "t.db")
        db = sqlite3.connect(path)
        with db:
            db.execute("CREATE TABLE t (s)")
            db.executemany("INSERT INTO t VALUES (CAST(? AS TEXT))", [(r,) for r in raw])
        try:
            expected: list[tuple[Any, ...]] | None = db.execute("SELECT s FROM t").fetchall()
        except sqlite3.OperationalError:  # "Could not decode to UTF-8"
            expected = None
        db.close()
        reader = PageReader(_uri(path), 5.0)
        columns = reader.read("SELECT s FROM t", ())
        reader.close()
    if expected is None:
        assert columns == "text that is not UTF-8"
    else:
        assert not isinstance(columns, str) and _same(list(ArrayRows(columns)), expected)


def test_text_that_is_not_utf8_is_read_through_sqlite3_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "t.db")
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, s TEXT)")
    with db:
        db.executemany("INSERT INTO t VALUES (?, ?)", [(n, f"v{n}") for n in range(40)])
        db.execute("INSERT INTO t VALUES (40, CAST(x'ff61' AS TEXT))")  # not UTF-8
    db.close()
    reader = PageReader(_uri(path), 5.0)
    assert reader.read("SELECT s FROM t", ()) == "text that is not UTF-8"
    reader.close()

    dialect = SqliteDialect(path)
    dialect.connect()
    schema = dialect.describe("main.t")
    select = Select(schema, (), "id < ?", (40,), '"id"', None)
    with caplog.at_level(logging.WARNING):
        good = dialect.batch(select)
        assert dialect.report()["sqlite3_pages"] == 0
        with pytest.raises(sqlite3.OperationalError):  # sqlite3's own error for such text
            dialect.batch(Select(schema, (), "1=1", (), '"id"', None))
        with pytest.raises(sqlite3.OperationalError):
            dialect.batch(Select(schema, (), "1=1", (), '"id"', None))
    report = dialect.report()
    dialect.close()
    assert len(good.raw) == 40 and good.arrays is not None  # read by the compiled reader
    assert report["page_reader"] == "compiled"
    assert report["sqlite3_pages"] == 2 and report["sqlite3_pages_why"] == [
        "text that is not UTF-8"
    ]
    said = [r for r in caplog.records if "read through sqlite3" in r.getMessage()]
    assert len(said) == 1 and "not UTF-8" in said[0].getMessage()


def test_sluice_pure_python_reads_every_page_through_sqlite3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
    path = _database(str(tmp_path), [(1, 2, 3)])
    dialect = SqliteDialect(path)
    dialect.connect()
    report = dialect.report()
    dialect.close()
    assert report["page_reader"] == "sqlite3"
    assert report["sqlite3_pages_why"] == ["SLUICE_PURE_PYTHON is set"]


def test_the_reader_is_built() -> None:
    """`pip install -e .` compiles it; under CI a missing build fails here, not silently."""
    assert sqlite_pages.unavailable() == ""
