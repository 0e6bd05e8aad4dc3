"""The conformance suite: one set of behaviours every source kind passes against its real
server (MariaDB through the binlog, PostgreSQL through logical replication), and a chained
relay (``sluice://``) reading a relay of either: the relay the test kills is the chained one.

Each kind is an adapter: how to make a table, run SQL, read the truth, and point a relay at it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice.capture.mysql.metadata import end_scn
from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayProcess, ReplicaConsumer
from sluice.testing.postgres import PrivatePostgres
from tests.integration.support import consume, get_json, wait_for


@dataclass
class Kind:
    name: str
    conn: Any
    url: str
    namespace: str  # MySQL database or PostgreSQL schema holding the tables
    end: Any  # conn -> the server's current end, as an SCN capture will reach
    chained: bool = False  # the relay under test reads a relay of the database (sluice://)
    upstream: RelayProcess | None = None

    def run(self, *statements: str) -> None:
        with self.conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)

    def source(self, table: str) -> str:
        return f"{self.namespace}.{table}"

    def truth(self, table: str) -> dict[str, dict[str, Any]]:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {table}")
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        key = json.dumps
        return {key({"id": r["id"]}, separators=(",", ":")): r for r in rows}


def _pg_end(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
        return int(cur.fetchone()[0])


@pytest.fixture(params=["mariadb", "postgresql", "chained-mariadb", "chained-postgresql"])
def kind(
    request: pytest.FixtureRequest, mariadb: PrivateMariaDB, postgres: PrivatePostgres
) -> Iterator[Kind]:
    name = request.param
    if name.endswith("mariadb"):
        database = request.getfixturevalue("database")
        conn = mariadb.connect(database)
        found = Kind(name, conn, mariadb.url, database, end_scn)
    else:
        database = request.getfixturevalue("pg_database")
        conn = postgres.connect(database)
        found = Kind(name, conn, postgres.source_url(database), "public", _pg_end)
    found.chained = name.startswith("chained")
    yield found
    if found.upstream is not None:
        found.upstream.kill()
    conn.close()


def _relay(kind: Kind, tables: list[str], data: Path, log: Path) -> RelayProcess:
    source = kind.url
    if kind.chained:
        if kind.upstream is None:  # started once; the test kills and restarts the chained one
            kind.upstream = _start(
                kind.url, kind, tables, data.parent / "up", log.parent / "up.log"
            )
        source = kind.upstream.url.replace("http://", "sluice://")
    return _start(source, kind, tables, data, log)


def _start(source: str, kind: Kind, tables: list[str], data: Path, log: Path) -> RelayProcess:
    args = ["--source", source, "--port", "0", "--data-dir", str(data)]
    for table in tables:
        args += ["--table", kind.source(table)]
    return RelayProcess(args, log).start()


def _caught_up(relay: RelayProcess, kind: Kind) -> None:
    target = kind.end(kind.conn)
    first = kind.upstream or relay
    wait_for(
        lambda: get_json(first.url + "/stats")["capture"]["last_scn"] >= target,
        60,
        f"{kind.name} capture to reach {target}",
    )
    if kind.upstream is not None:
        newest = get_json(kind.upstream.url + "/stats")["max_scn"]
        wait_for(
            lambda: get_json(relay.url + "/stats")["max_scn"] >= newest,
            60,
            f"the chained relay to reach {newest}",
        )


def test_changes_transactions_ddl_truncate_and_a_killed_relay(kind: Kind, tmp_path: Path) -> None:
    kind.run(
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE b (id INT PRIMARY KEY, v VARCHAR(20))",
    )
    a, b = kind.source("a"), kind.source("b")
    data, log = tmp_path / "relay", tmp_path / "relay.log"
    relay = _relay(kind, ["a", "b"], data, log)
    try:
        start = get_json(relay.url + "/stats")["min_scn"]
        kind.run(
            "INSERT INTO a VALUES (1, 'one'), (2, 'two'), (3, 'three')",
            "UPDATE a SET v = 'uno' WHERE id = 1",
            "DELETE FROM a WHERE id = 3",
            "UPDATE a SET id = 20 WHERE id = 2",  # a primary key change
            "BEGIN",
            "INSERT INTO a VALUES (4, 'four')",
            "INSERT INTO b VALUES (1, 'b')",
            "COMMIT",
            "BEGIN",
            "INSERT INTO a VALUES (5, 'rolled back')",
            "ROLLBACK",
            "ALTER TABLE a ADD COLUMN w INT",  # DDL mid-stream: a new schema version
            "INSERT INTO a VALUES (6, 'six', 60)",
        )
        _caught_up(relay, kind)
        first = RecordingConsumer()
        consume(relay.url, first, since_scn=start)
        relay.kill()  # SIGKILL, then more changes while it is down
        kind.run("UPDATE a SET w = 1 WHERE id = 1", "INSERT INTO b VALUES (2, 'while down')")
        relay = _relay(kind, ["a", "b"], data, log)
        kind.run(
            "DELETE FROM b WHERE id = 1",
            "INSERT INTO b VALUES (7, 'seven')",
            "TRUNCATE TABLE b",  # every row of b is gone: one t event
            "INSERT INTO b VALUES (3, 'after the truncate')",
        )
        _caught_up(relay, kind)
        replica = ReplicaConsumer()
        everything = RecordingConsumer()
        consume(relay.url, replica, since_scn=start)
        consume(relay.url, everything, since_scn=start)
        middle = first.windows[2].scn
        after = RecordingConsumer()
        consume(relay.url, after, since_scn=middle)
    finally:
        relay.kill()
    # The same windows before and after the kill: nothing repeated, nothing lost.
    assert [w.scn for w in everything.windows[: len(first.windows)]] == [
        w.scn for w in first.windows
    ]
    scns = [w.scn for w in everything.windows]
    assert scns == sorted(set(scns))
    assert [w.scn for w in after.windows] == [s for s in scns if s > middle]
    # Whole transactions; the rolled back one is absent.
    assert any({e.source for e in w.events} == {a, b} for w in everything.windows)
    assert all((e.key or {}).get("id") != 5 for e in everything.events)
    ops = [(e.op, (e.key or {}).get("id")) for e in everything.events if e.source == a][:6]
    assert ops == [("c", 1), ("c", 2), ("c", 3), ("u", 1), ("d", 3), ("d", 2)]
    (truncate,) = [e for e in everything.events if e.op == "t"]
    assert truncate.source == b and truncate.key is None and truncate.after is None
    versions = {e.schema_version for e in everything.events if e.source == a}
    assert len(versions) == 2
    for table, source in (("a", a), ("b", b)):
        truth = kind.truth(table)
        # A row untouched since ADD COLUMN keeps the image it was written with (DDL rewrites
        # no rows in the log): the new column is its default, here null.
        got = {
            k: {**dict.fromkeys(truth.get(k, {})), **row}
            for k, row in replica.snapshot(source).items()
        }
        assert got == truth
