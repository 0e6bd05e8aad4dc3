"""The query source's page path on real servers: the same events and positions as the row
path, for tables whose every column it takes, in every mode (``capture/query/pages.py``)."""

from __future__ import annotations

import logging
import random
import sqlite3
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from sluice.capture.query import poll
from sluice.capture.query.options import parse_options
from sluice.capture.query.pages import PageEncoder
from sluice.capture.query.poll import TablePoller
from sluice.capture.query.url import dialect_of, parse_query_url
from sluice.relay import RelayConfig
from sluice.schemas import SchemaRegistry
from sluice.testing import PrivateMariaDB, RelayThread
from sluice.testing.postgres import PrivatePostgres
from tests.integration.support import get_json, wait_for

ROWS = 700  # several pages of PAGE_ROWS
PAGE_ROWS = 250
DDL = {
    "postgresql": "CREATE TABLE t (id bigint PRIMARY KEY, i int, s varchar(40), tx text, "
    "d numeric(10,2), d4 numeric(18,4), f double precision, dt date, ts timestamp(6) NOT NULL, "
    "tz timestamptz, b boolean, bt bytea, u uuid, deleted boolean NOT NULL DEFAULT false)",
    "mariadb": "CREATE TABLE t (id BIGINT PRIMARY KEY, i INT, s VARCHAR(40), tx TEXT, "
    "d DECIMAL(10,2), d4 DECIMAL(18,4), f DOUBLE, dt DATE, ts DATETIME(6) NOT NULL, "
    "tz TIMESTAMP(6) NULL, b BOOLEAN, bt VARBINARY(20), u UUID, deleted BOOLEAN NOT NULL "
    "DEFAULT 0, KEY (ts, id))",
    "sqlite": "CREATE TABLE t (id INTEGER PRIMARY KEY, i INT, s VARCHAR(40), tx TEXT, "
    "d DECIMAL(10,2), d4 DECIMAL(18,4), f DOUBLE, dt DATE, ts TIMESTAMP NOT NULL, "
    "tz DATETIME, b BOOLEAN, bt BLOB, u TEXT, deleted BOOLEAN NOT NULL DEFAULT 0)",
}
MODES = [
    {"mode": "incrementing", "incrementing_column": "id"},
    {"mode": "timestamp+incrementing", "timestamp_column": "ts", "incrementing_column": "id"},
    {"mode": "timestamp", "timestamp_column": "ts"},
    {"mode": "bulk"},
    {"mode": "incrementing", "incrementing_column": "id", "soft_delete_column": "deleted"},
]


def _row(i: int, rnd: random.Random) -> tuple[Any, ...]:
    """Values with nulls, signs, fractions and edges; timestamps shared by runs of rows."""
    maybe = lambda v: None if rnd.random() < 0.1 else v  # noqa: E731
    second = 1_700_000_000 + i // 7  # runs of rows sharing a timestamp
    micros = rnd.choice([0, 500_000, 123_456, 999_999])
    stamp = f"2023-11-14 {second % 86400 // 3600:02d}:{second % 3600 // 60:02d}:"
    stamp += f"{second % 60:02d}" + (f".{micros:06d}" if micros else "")
    return (
        i,
        maybe(rnd.choice([0, -1, 2**31 - 1, -(2**31), rnd.randint(-1000, 1000)])),
        maybe(rnd.choice(["", "plain", 'quote " and \\ back', "é ü 日本", "x" * 40])),
        maybe("line\nbreak\ttab " * rnd.randint(0, 3)),
        maybe(rnd.choice(["0.00", "-0.01", "12345678.99", "-99999999.99", "3.10"])),
        maybe(rnd.choice(["0.0000", "99999999999999.9999", "-1.5000", "0.0001"])),
        maybe(rnd.choice([0.0, -0.5, 1e300, -2.5e-300, 3.141592653589793, 0.1])),
        maybe(rnd.choice(["2024-02-29", "1970-01-01", "9999-12-31", "1000-01-01"])),
        stamp,
        maybe(rnd.choice(["2024-01-02 03:04:05", "1999-12-31 23:59:59.999999"])),
        maybe(rnd.choice([True, False])),
        maybe(bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 20)))),
        maybe(
            rnd.choice(
                ["123e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000"]
            )
        ),
        i % 5 == 0,
    )


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def source(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    mariadb: PrivateMariaDB,
    postgres: PrivatePostgres,
) -> Iterator[tuple[str, str]]:
    """(a query source URL, the table's source name) of a filled table."""
    rnd = random.Random(29)
    rows = [_row(i, rnd) for i in range(1, ROWS + 1)]
    marks = ", ".join(["%s"] * len(rows[0]))
    if request.param == "sqlite":
        path = tmp_path / "app.db"
        db = sqlite3.connect(path)
        db.execute(DDL["sqlite"])
        db.executemany(f"INSERT INTO t VALUES ({marks.replace('%s', '?')})", rows)
        db.commit()
        db.close()
        yield f"query+sqlite:///{path}", "main.t"
    elif request.param == "postgresql":
        database = request.getfixturevalue("pg_database")
        conn = postgres.connect(database)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(DDL["postgresql"])
            cur.executemany(f"INSERT INTO t VALUES ({marks})", rows)
        conn.close()
        yield "query+" + postgres.source_url(database), "public.t"
    else:
        database = request.getfixturevalue("database")
        conn = mariadb.connect(database)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute(DDL["mariadb"])
            cur.executemany(f"INSERT INTO t VALUES ({marks})", rows)
        conn.commit()
        conn.close()
        yield "query+" + mariadb.url, f"{database}.t"


def _poll(url: str, table: str, options: dict[str, Any], fast: bool, m: Any) -> list[Any]:
    if not fast:
        m.setattr(poll.PageEncoder, "build", classmethod(lambda *_: None))
    dialect = dialect_of(parse_query_url(url))
    dialect.connect()
    try:
        opts = parse_options(table, {**options, "page_rows": PAGE_ROWS})
        poller = TablePoller(table, opts, dialect, SchemaRegistry(None), None)
        polled: list[Any] = []
        for _ in range(50):  # polls until one finds nothing (timestamp mode stops at a cut)
            pages = [(p.events, p.position, p.skipped) for p in poller.poll()]
            if not any(events for events, _, _ in pages):
                break
            polled += pages
        return polled
    finally:
        dialect.close()


@pytest.mark.parametrize(
    "options", MODES, ids=lambda o: "+soft" if "soft_delete_column" in o else o["mode"]
)
def test_pages_equal_the_row_path_on_a_real_server(
    source: tuple[str, str], options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, table = source
    encoded = []
    real = PageEncoder.events

    def counting(self: PageEncoder, *args: Any, **kwargs: Any) -> Any:
        got = real(self, *args, **kwargs)
        encoded.append(got is not None)
        return got

    with monkeypatch.context() as m:
        m.setattr(PageEncoder, "events", counting)
        fast = _poll(url, table, options, True, m)
    with monkeypatch.context() as m:
        slow = _poll(url, table, options, False, m)
    assert sum(len(events) for events, _, _ in slow) >= ROWS * 4 // 5
    assert fast == slow
    if "soft_delete_column" not in options:  # soft deletes take the row path on purpose
        assert any(encoded), "no page took the page path"


def test_pages_the_row_path_takes_are_counted_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A fallback shows: pages the row path took (soft-deleted rows in them) are counted per
    table in /sources with why, summed in /metrics, and said once as a WARNING; a table the
    page path never takes is said once too."""
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute(DDL["sqlite"])
    rnd = random.Random(3)
    db.executemany(
        f"INSERT INTO t VALUES ({', '.join(['?'] * 14)})", [_row(i, rnd) for i in range(1, 401)]
    )
    db.execute("CREATE TABLE s (id INTEGER PRIMARY KEY, f DECIMAL(30,2))")  # 30 digits: rows
    db.executemany("INSERT INTO s VALUES (?, ?)", [(i, i) for i in range(1, 101)])
    db.commit()
    db.close()
    soft = {"mode": "incrementing", "incrementing_column": "id", "page_rows": PAGE_ROWS}
    config = RelayConfig(
        source=SecretStr(f"query+sqlite:///{path}"),
        tables=["main.t", "main.s"],
        data_dir=tmp_path / "relay",
        port=0,
        table_options={
            "main.t": {**soft, "soft_delete_column": "deleted"},
            "main.s": {"mode": "incrementing", "incrementing_column": "id"},
        },
    )
    with caplog.at_level(logging.WARNING, "sluice"), RelayThread(config) as relay:
        by = wait_for(
            lambda: (
                (b := {s["source"]: s for s in get_json(relay.url + "/sources")["sources"]})[
                    "main.t"
                ].get("inc")
                in (400, "400")
                and b.get("main.s", {}).get("inc") in (100, "100")
                and b
            ),
            60,
            "both tables polled",
        )
        metrics = urllib.request.urlopen(relay.url + "/metrics", timeout=30).read().decode()
    assert by["main.t"]["row_path_pages"] == 2 and by["main.t"]["page_path_pages"] == 0
    assert "soft-deleted rows" in by["main.t"]["row_path_why"]
    assert "sluice_relay_capture_source_row_path_pages 2" in metrics
    said = [r.getMessage() for r in caplog.records if "row path" in r.getMessage()]
    assert len([m for m in said if m.startswith("main.t: a page")]) == 1  # once per reason
    assert any("main.s takes the row path" in m and "'f'" in m for m in said)


def test_postgresql_pages_read_by_fetch_are_counted_and_said(
    postgres: PrivatePostgres, pg_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection not in UTF8 cannot take COPY's text as it is: its pages are read with a
    plain fetch (the same rows), counted in /stats (``fetched_pages``, for /metrics too) and
    said once."""
    from sluice.capture.query.dialect import Select
    from sluice.capture.query.postgres import PgDialect

    conn = postgres.connect(pg_database)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE enc (id bigint PRIMARY KEY, s text)")
        cur.execute("INSERT INTO enc SELECT i, 'é ' || i FROM generate_series(1, 50) i")
    conn.close()
    dialect = PgDialect(postgres.source_url(pg_database))
    dialect.connect()
    schema = dialect.describe("public.enc")
    select = Select(schema, ('"id"',), "true", (), '"id"', None)
    copied = list(dialect.batch(select).raw)
    assert dialect.report() == {"fetched_pages": 0, "fetched_pages_why": None}
    dialect.conn.set_client_encoding("LATIN1")
    with caplog.at_level(logging.WARNING, "sluice"):
        fetched = [list(dialect.batch(select).raw) for _ in range(2)]
    report = dialect.report()
    dialect.close()
    assert fetched[0] == fetched[1] and len(fetched[0]) == len(copied) == 50
    assert report["fetched_pages"] == 2 and "LATIN1" in report["fetched_pages_why"][0]
    said = [r for r in caplog.records if "plain fetch" in r.getMessage()]
    assert len(said) == 1


MYSQL_KINDS = (
    "CREATE TABLE k (id BIGINT PRIMARY KEY, i INT, u BIGINT UNSIGNED, y YEAR, f FLOAT, "
    "g DOUBLE, n DECIMAL(30,6), d DATE, dt DATETIME(3), ts TIMESTAMP(6) NULL, tm TIME(6), "
    "st SET('a','b'), bi BIT(5), e ENUM('x','y'), s VARCHAR(400), tx MEDIUMTEXT, "
    "bl LONGBLOB, js JSON)"
)
MYSQL_ROWS = [
    "(1, -5, 18446744073709551615, 2155, 1.5, -2.5e-300, -123456789012345678.123456, "
    "'2024-02-29', '1000-01-01 00:00:00.001', '2038-01-19 03:14:07.999999', '-838:59:59', "
    "'a,b', b'10101', 'y', REPEAT('é', 300), REPEAT('t', 70000), x'00ff', '{\"a\": [1]}')",
    "(2, NULL, 0, NULL, NULL, 0, 0, '0000-00-00', '0000-00-00 00:00:00', NULL, '00:00:01.5', "
    "'', b'0', NULL, '', '', '', 'null')",
    "(3, 2147483647, 1, 1901, -0, 1e308, 0.000001, '9999-12-31', '9999-12-31 23:59:59.999', "
    "'1970-01-01 00:00:01', '838:59:59.000000', 'b', NULL, 'x', 'plain', NULL, NULL, NULL)",
]


def test_mysql_pages_read_at_once_are_the_row_parsers_rows(
    mariadb: PrivateMariaDB, database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A page read off the wire at once and split into columns gives each row exactly as the
    generated row parser (seeding's) reads it, for every kind, nulls, zero dates and values
    with 2- and 3-byte lengths; a value of 16 MiB or more (an 8-byte length) is parsed row
    by row instead: the same rows, counted in /stats (``parsed_pages``) and said once."""
    from sluice.capture.query.dialect import Select
    from sluice.capture.query.mysql import MySQLDialect

    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates, as an old schema may hold
        cur.execute(MYSQL_KINDS)
        cur.execute("INSERT INTO k VALUES " + ", ".join(MYSQL_ROWS))
        cur.execute("SET GLOBAL max_allowed_packet = 67108864")  # for the 17 MiB row
    conn.commit()
    dialect = MySQLDialect(mariadb.url)
    try:
        dialect.connect()
        schema = dialect.describe(f"{database}.k")
        select = Select(schema, ("`id`",), "1=1", (), "`id`", None)
        batch = dialect.batch(select)
        assert batch.arrays is not None  # read as columns
        parsed = [(row, list(extra)) for row, extra in dialect.rows(select)]
        assert [(row, list(extra)) for row, extra in batch.rows()] == parsed
        assert [r[0][1:4] for r in parsed] == [[-5, 18446744073709551615, 2155], [None, 0, None],
                                               [2147483647, 1, 1901]]  # fmt: skip
        assert dialect.report()["parsed_pages"] == 0
        big = mariadb.connect(database)  # a session that takes the new max_allowed_packet
        with big.cursor() as cur:
            cur.execute("INSERT INTO k (id, bl) VALUES (4, REPEAT('b', 17 * 1024 * 1024))")
        big.commit()
        big.close()
        with caplog.at_level(logging.WARNING, "sluice"):
            pages = [dialect.batch(select) for _ in range(2)]
        assert all(p.arrays is None for p in pages)
        parsed = [(row, list(extra)) for row, extra in dialect.rows(select)]
        assert [(row, list(extra)) for row, extra in pages[0].rows()] == parsed
        assert len(parsed) == 4 and len(parsed[3][0][16]) == 17 * 1024 * 1024
        report = dialect.report()
        assert report["parsed_pages"] == 2 and "16 MiB" in report["parsed_pages_why"][0]
        said = [r for r in caplog.records if "parsed row by row" in r.getMessage()]
        assert len(said) == 1
    finally:
        dialect.close()
        conn.close()
