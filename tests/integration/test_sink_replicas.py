"""``sluice sink`` into database replicas (SQLite, PostgreSQL, MariaDB), on real servers: the
sink SIGKILLed twice in a workload with every kind of change ends with tables equal to the
source's (exactly once: the checkpoint commits with each window), cross-engine both ways, a
target that is away for a while loses nothing, and bad targets get one line."""

from __future__ import annotations

import base64
import itertools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.relay import RelayConfig
from sluice.testing import PrivateMariaDB, key_text, table_rows
from sluice.testing.postgres import PrivatePostgres
from sluice.testing.relays import RelayThread
from sluice.testing.truth import pg_table_rows
from tests.integration.sink_support import (
    SOURCE_TABLES,
    SinkProcess,
    newest_window,
    relay_events,
    run_with_kills,
    workload,
)
from tests.integration.support import (
    create_database,
    http_status,
    relay_config,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)

OUTAGE_S = float(os.environ.get("SLUICE_TEST_OUTAGE_S", "30"))
_names = itertools.count(1)


def _sqlite_rows(path: Path, table: str, key: list[str]) -> dict[str, dict[str, Any]]:
    conn = sqlite3.connect(path)
    try:
        cur = conn.execute(f'SELECT * FROM "{table}"')
        names = [d[0] for d in cur.description]
        out = {}
        for raw in cur.fetchall():
            row = {
                n: base64.b64encode(v).decode() if isinstance(v, bytes) else v
                for n, v in zip(names, raw, strict=True)
            }
            out[key_text({k: row[k] for k in key})] = row
        return out
    finally:
        conn.close()


class Replica:
    """A target database of one kind: its URL and its tables' rows as JSON values."""

    def __init__(self, kind: str, tmp: Path, mariadb: PrivateMariaDB, postgres: PrivatePostgres):
        self.kind, self.tmp, self.mariadb, self.postgres = kind, tmp, mariadb, postgres
        self.name = f"replica_{kind}_{next(_names)}"
        if kind == "sqlite":
            self.url = f"sqlite:///{tmp / 'replica.db'}"  # an absolute path: four slashes
        elif kind == "postgresql":
            admin = postgres.connect()
            admin.autocommit = True
            with admin.cursor() as cur:
                cur.execute(f"CREATE DATABASE {self.name}")
            admin.close()
            self.url = f"postgresql://postgres@127.0.0.1:{postgres.port}/{self.name}"
        else:
            create_database(mariadb, self.name).close()
            self.url = f"mariadb://root@127.0.0.1:{mariadb.port}/{self.name}"

    def rows(self, table: str, key: list[str]) -> dict[str, dict[str, Any]]:
        if self.kind == "sqlite":
            return _sqlite_rows(self.tmp / "replica.db", table, key)
        if self.kind == "postgresql":
            conn = self.postgres.connect(self.name)
            try:
                rows = pg_table_rows(conn, f"public.{table}")
            finally:
                conn.close()
        else:
            conn = self.mariadb.connect(self.name)
            try:
                rows = table_rows(conn, f"{self.name}.{table}")
            finally:
                conn.close()
        return rows

    def audit(self) -> list[tuple[Any, ...]]:
        """The keyless table's rows, sorted (duplicates kept)."""
        sql = "SELECT msg, n FROM audit"
        if self.kind == "sqlite":
            conn: Any = sqlite3.connect(self.tmp / "replica.db")
        elif self.kind == "postgresql":
            conn = self.postgres.connect(self.name)
        else:
            conn = self.mariadb.connect(self.name)
        try:
            cur = conn.cursor()
            cur.execute(sql)
            return sorted(tuple(r) for r in cur.fetchall())
        finally:
            conn.close()


def _source_rows(conn: pymysql.Connection[Any], db: str, table: str) -> dict[str, Any]:
    conn.commit()
    return table_rows(conn, f"{db}.{table}")


def assert_same_tables(conn: pymysql.Connection[Any], db: str, replica: Replica) -> None:
    for table, key in (("orders", ["id"]), ("items", ["order_id", "line"])):
        truth, mine = _source_rows(conn, db, table), replica.rows(table, key)
        missing, extra = sorted(set(truth) - set(mine)), sorted(set(mine) - set(truth))
        assert not missing and not extra, f"{table}: missing {missing[:30]}, extra {extra[:10]}"
        for k, row in truth.items():
            assert mine[k] == row, f"{table} {k}: replica {mine[k]} != source {row}"
    with conn.cursor() as cur:
        cur.execute(f"SELECT msg, n FROM {db}.audit")
        truth_audit = sorted(tuple(r) for r in cur.fetchall())
    assert replica.audit() == truth_audit and truth_audit


@pytest.fixture
def shop(mariadb: PrivateMariaDB) -> Iterator[tuple[str, pymysql.Connection[Any]]]:
    name = f"shop_{next(_names)}"
    conn = create_database(mariadb, name, *SOURCE_TABLES)
    yield name, conn
    conn.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mariadb"])
def test_a_replica_equals_the_source_after_two_sigkills(
    kind: str,
    mariadb: PrivateMariaDB,
    postgres: PrivatePostgres,
    shop: tuple[str, pymysql.Connection[Any]],
    tmp_path: Path,
) -> None:
    db, conn = shop
    replica = Replica(kind, tmp_path, mariadb, postgres)
    sources = [f"{db}.orders", f"{db}.items", f"{db}.audit"]
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = SinkProcess(
            ["--to", replica.url, "--relay", relay.url, "--name", "replica"],
            tmp_path / "sink.log",
        )
        try:
            run_with_kills(conn, sink, 300)
            stats = sink.wait_scn(newest_window(relay.url, conn))
            assert stats["delivery"] == "exactly-once" and stats["target_up"]
            assert_same_tables(conn, db, replica)
        finally:
            sink.stop()
    log = (tmp_path / "sink.log").read_text()
    assert "ADD COLUMN" in log  # the ALTER reached the replica as a new column
    assert "windows go in bulk" in log  # the columnar path ran too (in one of the processes)


def test_a_target_away_for_a_while_loses_nothing(
    mariadb: PrivateMariaDB, shop: tuple[str, pymysql.Connection[Any]], tmp_path: Path
) -> None:
    """SQLite held locked by another writer for OUTAGE_S seconds mid-workload: the sink
    shows the target down, retries, and ends equal to the source."""
    db, conn = shop
    replica = Replica("sqlite", tmp_path, mariadb, None)  # type: ignore[arg-type]
    sources = [f"{db}.orders", f"{db}.items", f"{db}.audit"]
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = SinkProcess(
            ["--to", replica.url, "--relay", relay.url, "--retry-max", "2"],
            tmp_path / "sink.log",
            SLUICE_SINK_TIMEOUT_S="1",  # SQLite's busy wait: the lock shows as down soon
        )
        sink.start()
        try:
            workload(conn, 40)
            sink.wait_scn(newest_window(relay.url, conn))
            blocker = sqlite3.connect(tmp_path / "replica.db", isolation_level=None)
            blocker.execute("BEGIN EXCLUSIVE")
            started = time.monotonic()
            more = threading.Thread(
                target=workload, args=(conn, 150, 11, None, 0.01, 100_000), daemon=True
            )
            more.start()
            wait_for(
                lambda: (s := sink.stats()) and not s["target_up"] and s["retries"] > 0,
                60,
                "the sink to show its target down",
            )
            health = wait_for(
                lambda: http_status(sink.url + "/healthz")[0] == 503, 10, "healthz 503"
            )
            assert health
            wait_for(lambda: time.monotonic() - started >= OUTAGE_S, OUTAGE_S + 5, "outage")
            blocker.execute("ROLLBACK")
            blocker.close()
            more.join(120)
            stats = sink.wait_scn(newest_window(relay.url, conn))
            assert stats["target_up"] and stats["retries"] > 0
            metrics = http_status(sink.url + "/metrics")[1].decode()
            assert "sluice_sink_retries_total" in metrics
            assert_same_tables(conn, db, replica)
        finally:
            sink.stop()
    log = (tmp_path / "sink.log").read_text()
    assert "unavailable" in log or "lost the windows it held" in log


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to", "ftp://x/y"], "unknown target scheme ftp://"),
        (["--to", "postgresql://127.0.0.1:5432"], "expected postgresql://USER"),
        (["--to", "sqlite://"], "expected sqlite:///relative/replica.db"),
        (["--to", "sqlite:///x.db", "--route", "{nope}"], "uses {nope}"),
        (["--to", "sqlite:///x.db", "--filter", "a ="], "filter"),
        (["--to", "sqlite:///x.db", "--exclude-column", "orders"], "must be DB.TABLE.COLUMN"),
        (["--to", "nats://127.0.0.1:4222/S"], "needs --checkpoint-dir"),
        (["--relay", "http://127.0.0.1:1"], "to"),
        # a bad relay URL is refused at once, never retried as an outage (issue 40)
        (["--relay", "ftp://nowhere", "--to", "sqlite:///x.db"], "bad relay URL"),
        (["--relay", "not a url", "--to", "sqlite:///x.db"], "bad relay URL"),
        (["--relay", "http://127.0.0.1:notaport", "--to", "sqlite:///x.db"], "bad relay URL"),
        (["--to", "sqlite:///x.db", "--bootstrap", "ftp://x"], "bad relay URL"),
    ],
)
def test_bad_targets_and_options_get_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path
) -> None:
    base = ["--relay", "http://127.0.0.1:1"] if "--relay" not in args else []
    result = run_sluice("sink", *base, *args, "--port", "0")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("sluice: error")]
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_a_wrong_postgresql_password_is_one_line_and_exit_2(
    postgres: PrivatePostgres, pg_database: str
) -> None:
    """A replica target that refuses the login is a mistake to fix, not an outage to wait out
    (it was retried forever, as a server that went away)."""
    import psycopg2

    user = "sluice_pw"
    hba = postgres.data / "pg_hba.conf"
    line = f"host all {user} 127.0.0.1/32 scram-sha-256\n"
    if line not in (text := hba.read_text()):
        hba.write_text(line + text)  # before the trust lines: this role needs its password
    conn = psycopg2.connect(postgres.dsn())
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"DROP ROLE IF EXISTS {user}")
        cur.execute(f"CREATE ROLE {user} LOGIN PASSWORD 'right'")
        cur.execute("SELECT pg_reload_conf()")
    conn.close()

    def refused() -> bool:
        try:
            psycopg2.connect(postgres.dsn(), user=user, password="wrong").close()
        except psycopg2.OperationalError as exc:
            return "password authentication failed" in str(exc)
        return False

    wait_for(refused, 30, "the server to ask for the role's password")
    url = f"postgresql://{user}:wrong-s3cret@127.0.0.1:{postgres.port}/{pg_database}"
    result = run_sluice(
        "sink", "--relay", "http://127.0.0.1:1", "--to", url, "--port", "0", timeout=60
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("sluice: error")]
    assert len(lines) == 1 and "refused the login" in lines[0], result.stderr
    assert "retrying" not in result.stderr and "wrong-s3cret" not in result.stderr


def _normal(value: Any) -> Any:
    """One spelling for values both engines hold alike (bool as 0/1, UTC times without Z,
    JSON documents parsed)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str) and value.endswith("Z") and "T" in value:
        return value[:-1]
    if isinstance(value, str) and value[:1] in "{[":
        return json.loads(value)
    return value


def test_postgresql_to_mariadb(
    postgres: PrivatePostgres, pg_database: str, mariadb: PrivateMariaDB, tmp_path: Path
) -> None:
    """Cross-engine the other way: PostgreSQL's types land in MariaDB's by the type map."""
    src = postgres.connect(pg_database)
    src.autocommit = True
    with src.cursor() as cur:
        cur.execute(
            "CREATE TABLE acct (id int PRIMARY KEY, name text NOT NULL, balance numeric(12,3), "
            "opened date, seen timestamptz, at timestamp(6), ok boolean, doc jsonb, raw bytea, "
            "tags text[])"
        )
    replica = Replica("mariadb", tmp_path, mariadb, postgres)
    relay_cfg = RelayConfig(
        source=postgres.source_url(pg_database, slot=f"acct_{pg_database}"), tables=["public.acct"],
        data_dir=tmp_path / "relay", port=0,
    )  # fmt: skip
    with RelayThread(relay_cfg) as relay, src.cursor() as cur:
        for i in range(1, 60):
            cur.execute(
                "INSERT INTO acct VALUES (%s, %s, %s, '2024-02-29', '2024-03-01 10:00:00.25+00',"
                " '1999-12-31 23:59:59.999999', %s, %s, %s, %s)",
                (i, f"n{i} ✓", f"{i}.125", i % 2 == 0, json.dumps({"i": i}), bytes([i]),
                 ["a", f"t{i}"]),
            )  # fmt: skip
        cur.execute("UPDATE acct SET balance = balance * 2, ok = NOT ok WHERE id < 20")
        cur.execute("UPDATE acct SET id = 1000 WHERE id = 5")
        cur.execute("DELETE FROM acct WHERE id = 7")
        cur.execute("ALTER TABLE acct ADD COLUMN note text")
        cur.execute("INSERT INTO acct (id, name, note) VALUES (2000, 'late', 'added')")
        sink = SinkProcess(["--to", replica.url, "--relay", relay.url], tmp_path / "sink.log")
        sink.start()
        try:
            wait_for(
                lambda: (s := sink.stats()) and s["events"] >= 63 and s["lag_scn"] == 0,
                120,
                "the sink to deliver every change",
            )
        finally:
            sink.stop()
    truth = pg_table_rows(src, "public.acct")
    mine = replica.rows("acct", ["id"])
    assert sorted(mine) == sorted(truth) and len(truth) == 59
    for key, row in truth.items():
        have = {k: _normal(v) for k, v in mine[key].items()}
        want = {k: _normal(v) for k, v in row.items()}
        assert have == want, key
    src.close()


def test_postgresql_infinities_reach_a_postgresql_replica_and_stop_a_mariadb_one(
    postgres: PrivatePostgres, pg_database: str, mariadb: PrivateMariaDB, tmp_path: Path
) -> None:
    """``infinity`` and ``-infinity`` dates and timestamps are copied as they are (the row path
    and the bulk path of a 100-row window alike); a MariaDB replica, which has no such value,
    stops with one line naming the fix instead of storing another value."""
    src = postgres.connect(pg_database)
    src.autocommit = True
    with src.cursor() as cur:
        cur.execute("CREATE TABLE span (id int PRIMARY KEY, d date, t timestamp, tz timestamptz)")
    relay_cfg = RelayConfig(
        source=postgres.source_url(pg_database, slot=f"span_{pg_database}"), tables=["public.span"],
        data_dir=tmp_path / "relay", port=0,
    )  # fmt: skip
    values = ["infinity", "-infinity", None, "2024-02-29 10:00:00.25"]
    with RelayThread(relay_cfg) as relay:
        with src.cursor() as cur:
            cur.execute("INSERT INTO span VALUES (1, 'infinity', '-infinity', 'infinity')")
            rows = [
                (i, values[i % 4], values[(i + 1) % 4], values[(i + 2) % 4]) for i in range(2, 102)
            ]
            cur.execute("BEGIN")
            cur.executemany("INSERT INTO span VALUES (%s, %s::date, %s, %s)", rows)
            cur.execute("COMMIT")
        wait_for(lambda: len(relay_events(relay.url, ["public.span"])) == 101, 60, "101 events")
        replica = Replica("postgresql", tmp_path, mariadb, postgres)
        ok = run_sluice(
            "sink", "--to", replica.url, "--relay", relay.url, "--port", "0", "--until-caught-up"
        )
        assert ok.returncode == 0, ok.stderr
        with src.cursor() as cur:  # windows of 200 finite rows: the bulk path's COPY (a new
            for first in (1000, 2000):  # sink's first window checks its tables row by row)
                cur.execute(
                    "INSERT INTO span SELECT i, DATE '2024-01-01' + i, TIMESTAMP '2024-01-01' + "
                    "i * INTERVAL '1.5 s', TIMESTAMPTZ '1999-12-31 23:00Z' - i * INTERVAL "
                    "'1 ms' FROM generate_series(%s, %s) AS i",
                    (first, first + 199),
                )
        wait_for(lambda: len(relay_events(relay.url, ["public.span"])) == 501, 60, "501 events")
        sink = SinkProcess(["--to", replica.url, "--relay", relay.url], tmp_path / "sink.log")
        sink.start()
        try:
            stats = wait_for(
                lambda: (s := sink.stats()) and s["events"] == 400 and s["lag_scn"] == 0 and s,
                120, "the sink to deliver the new window",
            )  # fmt: skip
        finally:
            sink.stop()
        assert stats["target_stats"]["copied_rows"] >= 200, stats["target_stats"]
        text = "SELECT id, d::text, t::text, tz::text FROM span ORDER BY id"
        with src.cursor() as cur:
            cur.execute(text)
            truth = cur.fetchall()
        dst = postgres.connect(replica.name)
        with dst.cursor() as cur:
            cur.execute(text)
            assert cur.fetchall() == truth and len(truth) == 501
        dst.close()
        other = Replica("mariadb", tmp_path / "m", mariadb, postgres)
        refused = run_sluice(
            "sink", "--to", other.url, "--relay", relay.url, "--port", "0", "--until-caught-up"
        )
        assert refused.returncode == 1, refused.stderr
        lines = [line for line in refused.stderr.splitlines() if line.startswith("sluice: error")]
        assert len(lines) == 1 and "infinity" in lines[0] and "--exclude-column" in lines[0]
    src.close()


def test_a_window_bigger_than_a_piece_is_one_replica_transaction(
    mariadb: PrivateMariaDB, tmp_path: Path
) -> None:
    """A 300,000-row transaction reaches the sink in pieces (the client never holds it
    whole) and the replica commits it once, with its checkpoint."""
    name = f"big_{next(_names)}"
    conn = create_database(mariadb, name, "t (id INT PRIMARY KEY, body VARCHAR(40))")
    replica = Replica("sqlite", tmp_path, mariadb, None)  # type: ignore[arg-type]
    with RelayThread(relay_config(mariadb, [f"{name}.t"], tmp_path / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t SELECT seq, CONCAT('row ', seq) FROM seq_1_to_300000")
        conn.commit()
        end = wait_relay_caught_up(relay.url, conn)
        sink = SinkProcess(["--to", replica.url, "--relay", relay.url], tmp_path / "sink.log")
        sink.start()
        try:
            stats = sink.wait_scn(end, timeout=300)
        finally:
            sink.stop()
    assert stats["windows"] == 1 and stats["events"] == 300_000
    db = sqlite3.connect(tmp_path / "replica.db")
    assert db.execute("SELECT count(*), max(body) FROM t").fetchone() == (300_000, "row 99999")
    db.close()
    conn.close()


@pytest.mark.parametrize("kind", ["postgresql", "mariadb"])
def test_a_database_target_that_goes_down_loses_nothing(
    kind: str,
    mariadb: PrivateMariaDB,
    shop: tuple[str, pymysql.Connection[Any]],
    tmp_path: Path,
) -> None:
    """The target server SIGKILLed mid-workload and back after OUTAGE_S seconds: the sink
    shows it down, retries with backoff, and ends equal to the source."""
    db, conn = shop
    # The test servers do not wait for their disk (PostgreSQL synchronous_commit=off, MariaDB
    # sync_binlog=0): a SIGKILL can take back commits they acknowledged, with the sink's
    # checkpoint row. The sink asks the target where it stands after a loss and reads again
    # from there.
    server: Any = (
        PrivatePostgres(tmp_path / "pg") if kind == "postgresql" else PrivateMariaDB(tmp_path / "t")
    )
    server.start()
    try:
        replica = Replica(
            kind, tmp_path, server if kind == "mariadb" else mariadb,
            server if kind == "postgresql" else None,  # type: ignore[arg-type]
        )  # fmt: skip
        sources = [f"{db}.orders", f"{db}.items", f"{db}.audit"]
        with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
            sink = SinkProcess(
                ["--to", replica.url, "--relay", relay.url, "--retry-max", "2"],
                tmp_path / "sink.log",
                SLUICE_SINK_TIMEOUT_S="2",
            )
            sink.start()
            try:
                workload(conn, 40)
                sink.wait_scn(newest_window(relay.url, conn))
                server.kill()
                started = time.monotonic()
                more = threading.Thread(
                    target=workload, args=(conn, 150, 11, None, 0.01, 100_000), daemon=True
                )
                more.start()
                wait_for(
                    lambda: (s := sink.stats()) and not s["target_up"] and s["retries"] > 0,
                    60,
                    "the sink to show its target down",
                )
                wait_for(lambda: time.monotonic() - started >= OUTAGE_S, OUTAGE_S + 5, "outage")
                assert not sink.stats()["target_up"]  # type: ignore[index]
                server.start()
                more.join(120)
                stats = sink.wait_scn(newest_window(relay.url, conn), timeout=180)
                assert stats["target_up"]
                assert_same_tables(conn, db, replica)
            finally:
                sink.stop()
    finally:
        server.stop()
