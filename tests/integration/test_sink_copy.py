"""The replicas' bulk paths write exactly what the parameter paths write: PostgreSQL's COPY
(``sink/sql/copy.py``) against ``execute_values``, MariaDB's literals built by Arrow
(``sink/sql/literals.py``) against PyMySQL's ``executemany``. Random groups of rows, through
the real bulk decoder, applied both ways to a real server, then the two tables compared."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import numpy as np
import psycopg2.extras
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from sluice.core import wire
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.sink.columnar import Columnar, TablePart
from sluice.sink.sql.bulk import BulkKeyed, HeldColumns, bulk_steps
from sluice.sink.sql.connect import connect, parse_database_url
from sluice.sink.sql.copy import COPY_ROWS, copy_rows, copy_upsert
from sluice.sink.sql.engines import Engine, MariaDB, Postgres
from sluice.testing import PrivateMariaDB
from sluice.testing.postgres import PrivatePostgres

SCHEMA = TableSchema(
    "shop.t",
    1,
    (
        Column("id", "int", False, "int"),
        Column("region", "string", False, "varchar(8)"),
        Column("amount", "decimal", True, "decimal(19,6)", 19, 6),
        Column("at", "datetime", True, "datetime(6)"),
        Column("seen", "timestamp", True, "timestamp(6)"),
        Column("day", "date", True, "date"),
        Column("ok", "bool", True, "boolean"),
        Column("big", "uint64", True, "bigint unsigned"),
        Column("doc", "json", True, "json"),
        Column("note", "string", True, "text"),
    ),
    ("id", "region"),
)
CODEC = RowCodec(SCHEMA)
ENGINE = Postgres()
MICROS = st.integers(-62135596800 * 10**6, 253402300799 * 10**6 + 999999)  # years 1..9999
TEXT = st.text(st.characters(exclude_characters="\x00", codec="utf-8"), max_size=12)
KEYS = (st.integers(-(10**6), 10**6), st.sampled_from(["eu", "us", "", 'a,"b"', "x\ny"]))
# 18 digits: more than a double holds (the bulk decoder takes 64-bit unscaled values)
AMOUNT = st.one_of(st.none(), st.integers(-(10**18), 10**18).map(lambda v: Decimal(v).scaleb(-6)))
REST = (
    st.one_of(st.none(), st.integers(0, 1)),
    # wider ones are Undecodable for the bulk path: their windows go row by row
    st.one_of(st.none(), st.integers(0, 2**63 - 1).map(Decimal)),
    st.one_of(st.none(), st.recursive(st.none() | st.booleans() | st.integers() | TEXT,
                                      lambda inner: st.lists(inner, max_size=3), max_leaves=5)
              .map(lambda v: json.dumps(v, ensure_ascii=False))),
)  # fmt: skip
ROW = st.tuples(
    *KEYS, AMOUNT,
    st.one_of(st.none(), MICROS), st.one_of(st.none(), MICROS),
    st.one_of(st.none(), st.integers(-719162, 2932896)),
    *REST, st.one_of(st.none(), TEXT),
)  # fmt: skip


# a database round trip per example; no explain phase (its tracing is slow on Python 3.11)
BULK_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture
def conn(postgres: PrivatePostgres, pg_database: str) -> Iterator[Any]:
    connection = postgres.connect(pg_database)
    connection.autocommit = False  # as the sink's: each group one transaction
    with connection.cursor() as cur:  # not UTC: a timestamp read in the session's zone shows
        cur.execute("SET TIME ZONE 'Asia/Kolkata'")
    columns = ", ".join(
        f"{ENGINE.quote(c.name)} {ENGINE.column_type(c, 2)}" for c in SCHEMA.columns
    )
    with connection.cursor() as cur:
        for name in ("by_copy", "by_values"):
            cur.execute(f"CREATE TABLE {name} ({columns}, PRIMARY KEY (id, region))")
    connection.commit()
    yield connection
    connection.close()


def _step(rows: list[tuple[Any, ...]], engine: Engine = ENGINE) -> BulkKeyed:
    """The rows as one held window of inserts, through the bulk decoder."""
    raw = [
        wire.encode_event(wire.RawEvent(SCHEMA.source, "c", 1, 0, CODEC.encode(None, list(r))))
        for r in rows
    ]
    record = wire.encode_window(9, 8, 0, raw)
    starts = np.asarray(wire.event_spans(record).starts[0], dtype=np.int64)
    part = TablePart(SCHEMA.source, SCHEMA, SCHEMA, tuple(range(len(SCHEMA.columns))), "t", starts)
    held = HeldColumns()
    held.add(Columnar(record, (part,), len(rows), lambda: ()), {SCHEMA.source: "t"})
    (step,) = bulk_steps(held, engine, {})
    return step


@BULK_SETTINGS
@given(st.lists(ROW, min_size=1, max_size=12))
@example(  # the edges, whatever the draws: 18 digits, years 1 and 9999, text CSV must quote
    [
        (
            0,
            'a,"b"',
            Decimal("-123456789012.345678"),
            -62135596800 * 10**6,
            253402300799 * 10**6 + 999999,
            -719162,
            1,
            Decimal(2**63 - 1),
            '{"k": ["ü", null]}',
            ' x\r\n"y",',
        ),
        (1, "", None, None, None, 2932896, 0, Decimal(0), "null", ""),
    ]
)
def test_copy_writes_what_execute_values_writes(conn: Any, drawn: list[tuple[Any, ...]]) -> None:
    # the drawn rows over again up to a COPY-sized group, each with a key of its own
    cycle = itertools.islice(itertools.cycle(drawn), COPY_ROWS + len(drawn))
    rows = [(i, *row[1:]) for i, row in enumerate(cycle)]
    step = _step(rows)
    assert step.copy is not None and step.copy.rows == len(rows) and not step.upserts
    names = [c.name for c in SCHEMA.columns]
    with conn.cursor() as cur:
        cur.execute("TRUNCATE by_copy, by_values")
        copy_upsert(cur, ENGINE, "by_copy", names, SCHEMA.primary_key, step.copy)
        params = _params_of(rows)
        sql = ENGINE.upsert_sql("by_values", names, SCHEMA.primary_key)
        psycopg2.extras.execute_values(cur, sql, params, page_size=1000)
        shown = "SELECT t::text FROM {} t ORDER BY id, region"
        cur.execute(shown.format("by_copy"))
        copied = cur.fetchall()
        cur.execute(shown.format("by_values"))
        assert copied == cur.fetchall() and len(copied) == len(rows)
    conn.commit()


def _params_of(rows: list[tuple[Any, ...]], engine: Engine = ENGINE) -> list[tuple[object, ...]]:
    """The same rows through the parameter path (``bulk._params``), the bulk paths refused."""
    import sluice.sink.sql.copy as copy_module
    import sluice.sink.sql.literals as literals_module

    saved = copy_module.COPY_ROWS, literals_module.LITERAL_ROWS
    copy_module.COPY_ROWS = literals_module.LITERAL_ROWS = 10**9
    try:
        step = _step(rows, engine)
    finally:
        copy_module.COPY_ROWS, literals_module.LITERAL_ROWS = saved
    assert step.copy is None and step.values is None
    return step.upserts


def test_a_group_with_a_kind_copy_cannot_print_exactly_keeps_the_parameters() -> None:
    import pyarrow as pa

    many = COPY_ROWS + 1
    ints = pa.array(range(many), pa.int64())
    assert copy_rows(ENGINE, [Column("a", "int", True, "int")], [ints]) is not None
    floats = pa.array([0.1] * many, pa.float64())
    assert copy_rows(ENGINE, [Column("f", "double", True, "double")], [floats]) is None
    infinite = pa.array([2**63 - 1] * many, pa.int64())  # PostgreSQL's infinity
    assert copy_rows(ENGINE, [Column("t", "datetime", True, "timestamp")], [infinite]) is None
    few = pa.array(range(COPY_ROWS - 1), pa.int64())
    assert copy_rows(ENGINE, [Column("a", "int", True, "int")], [few]) is None


MARIADB = MariaDB()
# MariaDB's DATETIME range (both paths send the same text; outside it both are refused)
MARIA_MICROS = st.integers(-30610224000 * 10**6, 253402300799 * 10**6 + 999999)
MARIA_ROW = st.tuples(
    *KEYS, AMOUNT,
    st.one_of(st.none(), MARIA_MICROS), st.one_of(st.none(), MARIA_MICROS),
    st.one_of(st.none(), st.integers(-354285, 2932896)),
    *REST, st.one_of(st.none(), st.text(max_size=12)),  # NUL, \x1a: PyMySQL escapes them
)  # fmt: skip


@pytest.fixture
def maria(mariadb: PrivateMariaDB, database: str) -> Iterator[Any]:
    """A connection as the sink opens it (its session settings), to tables of its types."""
    url = parse_database_url(f"mariadb://root@127.0.0.1:{mariadb.port}/{database}")
    connection = connect(url, 30.0)
    columns = ", ".join(
        f"{MARIADB.quote(c.name)} {MARIADB.column_type(c, 2)}" for c in SCHEMA.columns
    )
    with connection.cursor() as cur:
        for name in ("by_literals", "by_params"):
            cur.execute(
                f"CREATE TABLE {name} ({columns}, PRIMARY KEY (id, region))" + MARIADB.table_options
            )
    connection.commit()
    yield connection
    connection.close()


@BULK_SETTINGS
@given(st.lists(MARIA_ROW, min_size=1, max_size=12))
@example(
    [
        (0, 'a,"b"', Decimal("-123456789012.345678"), -30610224000 * 10**6, 253402300799 * 10**6
         + 999999, -354285, 1, Decimal(2**63 - 1), '{"k": ["ü", null]}', "x\\'\0\x1a\r\n\"y"),
        (1, "", None, 0, 1, 2932896, 0, Decimal(0), "null", ""),
    ]
)  # fmt: skip
def test_literals_write_what_executemany_writes(maria: Any, drawn: list[tuple[Any, ...]]) -> None:
    cycle = itertools.islice(itertools.cycle(drawn), COPY_ROWS + len(drawn))
    rows = [(i, *row[1:]) for i, row in enumerate(cycle)]
    step = _step(rows, MARIADB)
    assert step.values is not None and step.values.rows == len(rows) and not step.upserts
    names = [c.name for c in SCHEMA.columns]
    with maria.cursor() as cur:
        cur.execute("DELETE FROM by_literals")
        cur.execute("DELETE FROM by_params")
        before, after = MARIADB.upsert_parts("by_literals", names, SCHEMA.primary_key)
        for chunk in step.values.chunks:
            cur.execute(before + chunk + after)
        params = _params_of(rows, MARIADB)
        cur.executemany(MARIADB.upsert_sql("by_params", names, SCHEMA.primary_key), params)
        shown = "SELECT * FROM {} ORDER BY id, region"
        cur.execute(shown.format("by_literals"))
        written = cur.fetchall()
        cur.execute(shown.format("by_params"))
        assert written == cur.fetchall() and len(written) == len(rows)
    maria.commit()
