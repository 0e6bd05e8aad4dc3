"""The query source (issue 12): tables polled with SQL on SQLite, PostgreSQL and MariaDB.

The conformance behaviours its guarantees allow (inserts, updates, soft deletes, a rolled-back
transaction, DDL mid-stream, SIGKILL of the relay mid-workload, resume that neither repeats nor
skips), each mode, what the modes cannot see (hard deletes, updates of old rows in
``incrementing`` mode), bad settings as one line, and rows identical to log capture's.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice.capture import CapturedWindow
from sluice.capture.source import CaptureSettings, open_capture
from sluice.core import wire
from sluice.relay import RelayConfig
from sluice.schemas import SchemaRegistry
from sluice.testing import (
    PrivateMariaDB,
    RecordingConsumer,
    RelayProcess,
    RelayThread,
    ReplicaConsumer,
)
from sluice.testing.postgres import PrivatePostgres
from tests.integration.support import consume, get_json, http_status, run_sluice, wait_for


@dataclass
class QKind:
    """How to drive one database kind: SQL spelling, the relay's URL, the truth."""

    name: str
    conn: Any
    url: str
    namespace: str
    mark: str  # bound parameter
    now: str  # the database's now, with sub-second precision
    true: str
    ddl: str

    def run(self, sql: str, *args: Any) -> None:
        if self.name == "sqlite":
            self.conn.execute(sql.replace("%s", "?"), args)
            return
        with self.conn.cursor() as cur:
            cur.execute(sql, args or None)

    def source(self, table: str) -> str:
        return f"{self.namespace}.{table}"

    def truth(self) -> dict[int, str]:
        sql = f"SELECT id, v FROM t WHERE deleted = {'0' if self.name != 'postgresql' else 'false'}"
        if self.name == "sqlite":
            return {int(i): v for i, v in self.conn.execute(sql).fetchall()}
        with self.conn.cursor() as cur:
            cur.execute(sql)
            return {int(i): v for i, v in cur.fetchall()}


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def qkind(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    mariadb: PrivateMariaDB,
    postgres: PrivatePostgres,
) -> Iterator[QKind]:
    if request.param == "sqlite":
        path = tmp_path / "app.db"
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        yield QKind(
            "sqlite", conn, f"query+sqlite:///{path}", "main", "?",
            "strftime('%Y-%m-%d %H:%M:%f', 'now')", "1",
            "CREATE TABLE t (id INTEGER PRIMARY KEY, v VARCHAR(40), updated_at TIMESTAMP "
            "NOT NULL, deleted BOOLEAN NOT NULL DEFAULT 0)",
        )  # fmt: skip
    elif request.param == "postgresql":
        database = request.getfixturevalue("pg_database")
        conn = postgres.connect(database)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")  # naive timestamps are read as UTC
        yield QKind(
            "postgresql", conn, "query+" + postgres.source_url(database), "public", "%s",
            "clock_timestamp()", "true",
            "CREATE TABLE t (id bigint PRIMARY KEY, v varchar(40), updated_at timestamp(6) "
            "NOT NULL, deleted boolean NOT NULL DEFAULT false)",
        )  # fmt: skip
    else:
        database = request.getfixturevalue("database")
        conn = mariadb.connect(database)
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        yield QKind(
            "mariadb", conn, "query+" + mariadb.url, database, "%s", "NOW(6)", "1",
            "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(40), updated_at DATETIME(6) "
            "NOT NULL, deleted BOOLEAN NOT NULL DEFAULT 0)",
        )  # fmt: skip
    conn.close()


def _settings(path: Path, sections: dict[str, dict[str, Any]]) -> Path:
    lines = []
    for source, options in sections.items():
        lines.append(f'[tables."{source}"]')
        lines += [f"{k} = {json.dumps(v)}" for k, v in options.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _relay(k: QKind, data: Path, config: Path, log: Path) -> RelayProcess:
    return RelayProcess(
        ["--source", k.url, "--table", k.source("t"), "--port", "0", "--data-dir", str(data),
         "--config", str(config)],
        log,
    ).start()  # fmt: skip


def _replica(url: str, source: str) -> dict[int, Any]:
    replica = ReplicaConsumer()
    consume(url, replica, since_scn=0)
    return {
        json.loads(key)["id"]: row.get("v", row.get("n"))
        for key, row in replica.snapshot(source).items()
    }


def _insert(k: QKind, first: int, last: int, prefix: str = "v") -> None:
    for i in range(first, last + 1):
        k.run(f"INSERT INTO t (id, v, updated_at) VALUES (%s, %s, {k.now})", i, f"{prefix}{i}")


def test_polls_changes_soft_deletes_ddl_and_a_killed_relay_exactly(
    qkind: QKind, tmp_path: Path
) -> None:
    k = qkind
    k.run(k.ddl)
    _insert(k, 1, 40)
    source = k.source("t")
    config = _settings(
        tmp_path / "relay.toml",
        {
            source: {
                "mode": "timestamp+incrementing",
                "timestamp_column": "updated_at",
                "incrementing_column": "id",
                "soft_delete_column": "deleted",
                "poll_interval": "100ms",
                "delay": "300ms",
                "page_rows": 7,
            }
        },
    )
    data, log = tmp_path / "relay", tmp_path / "relay.log"
    relay = _relay(k, data, config, log)
    try:
        wait_for(lambda: _replica(relay.url, source) == k.truth(), 60, "the first poll")
        for i in range(1, 11):
            k.run(f"UPDATE t SET v = %s, updated_at = {k.now} WHERE id = %s", f"u{i}", i)
        k.run(f"UPDATE t SET deleted = {k.true}, updated_at = {k.now} WHERE id IN (11, 12)")
        if k.name == "sqlite":
            k.conn.execute("BEGIN")
        else:
            k.run("BEGIN")
        k.run(f"INSERT INTO t (id, v, updated_at) VALUES (999, 'rolled back', {k.now})")
        k.run("ROLLBACK") if k.name != "sqlite" else k.conn.execute("ROLLBACK")
        wait_for(lambda: _replica(relay.url, source) == k.truth(), 60, "the replica")
        relay.kill()  # SIGKILL, then changes while it is down
        _insert(k, 41, 60)
        for i in range(20, 26):
            k.run(f"UPDATE t SET v = %s, updated_at = {k.now} WHERE id = %s", f"w{i}", i)
        relay = _relay(k, data, config, log)
        _insert(k, 61, 70)
        k.run("ALTER TABLE t ADD COLUMN w INT")  # DDL mid-stream: a new schema version
        k.run(f"INSERT INTO t (id, v, updated_at, w) VALUES (71, 'v71', {k.now}, 7)")
        wait_for(lambda: _replica(relay.url, source) == k.truth(), 60, "the replica after kill")
        k.run("DELETE FROM t WHERE id = 30")  # a hard delete: invisible to queries
        _insert(k, 72, 72)
        wait_for(lambda: 72 in _replica(relay.url, source), 60, "the row after the delete")
        assert _replica(relay.url, source)[30] == "v30"
        everything = RecordingConsumer()
        consume(relay.url, everything, since_scn=0)
        middle = everything.windows[len(everything.windows) // 2].scn
        after = RecordingConsumer()
        consume(relay.url, after, since_scn=middle)
        sources = get_json(relay.url + "/sources")["sources"]
    finally:
        relay.kill()
    scns = [w.scn for w in everything.windows]
    assert scns == sorted(set(scns))
    assert [w.scn for w in after.windows] == [s for s in scns if s > middle]
    # Neither repeated nor skipped across the kill: each row version appears exactly once.
    versions = [(e.key["id"], (e.after or e.before or {})["updated_at"]) for e in everything.events]
    assert len(versions) == len(set(versions))
    ops: dict[int, list[str]] = {}
    for e in everything.events:
        ops.setdefault(e.key["id"], []).append(e.op)
    assert ops[1] == ["c", "u"] and ops[11] == ["c", "d"] and ops[41] == ["c"]
    assert ops[20] == ["c", "u"] and 999 not in ops
    assert len({e.schema_version for e in everything.events}) == 2
    (row,) = [e.after for e in everything.events if e.key["id"] == 71]
    assert row is not None and row["w"] == 7
    assert sources[0]["mode"] == "timestamp+incrementing" and sources[0]["inc"] in (72, "72")


def test_modes_and_what_each_cannot_see(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for table in ("inc", "ts", "bulk", "late"):
        db.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, v TEXT, at DATETIME NOT NULL)")
    stamp = "2024-05-01 10:00:00"
    for i in range(1, 6):
        db.execute("INSERT INTO inc VALUES (?, ?, ?)", (i, f"v{i}", stamp))
        db.execute("INSERT INTO bulk VALUES (?, ?, ?)", (i, f"v{i}", stamp))
    for i in range(1, 16):  # 10 rows at one timestamp, 5 at the next: pages of 3
        db.execute(
            "INSERT INTO ts VALUES (?, ?, ?)",
            (i, f"v{i}", stamp if i <= 10 else "2024-05-01 10:00:01"),
        )
    fast = {"poll_interval": 0.1}
    options: dict[str, dict[str, Any]] = {
        "main.inc": {"mode": "incrementing", "incrementing_column": "id", **fast},
        "main.ts": {"mode": "timestamp", "timestamp_column": "at", "page_rows": 3, **fast},
        "main.bulk": {"mode": "bulk", "poll_interval": 0.2},
        "main.late": {"mode": "timestamp", "timestamp_column": "at", "delay": "3s", **fast},
    }
    config = RelayConfig(
        source=f"query+sqlite:///{path}",
        tables=list(options),
        data_dir=tmp_path / "relay",
        port=0,
        table_options=options,
    )
    with RelayThread(config) as relay:
        url = relay.url

        def events() -> list[Any]:
            recorded = RecordingConsumer()
            consume(url, recorded, since_scn=0)
            return recorded.events

        wait_for(lambda: sum(e.source == "main.ts" for e in events()) == 15, 30, "ts rows")
        db.execute("UPDATE inc SET v = 'changed' WHERE id = 2")  # incrementing: unseen
        db.execute("INSERT INTO inc VALUES (6, 'v6', ?)", (stamp,))
        now = db.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')").fetchone()[0]
        db.execute("INSERT INTO late VALUES (1, 'late', ?)", (now,))
        db.execute("DELETE FROM bulk WHERE id = 5")
        wait_for(lambda: any(e.key == {"id": 6} for e in events()), 30, "id 6")
        first_late = [e for e in events() if e.source == "main.late"]
        wait_for(lambda: any(e.source == "main.late" for e in events()), 30, "the late row")
        got = events()
        stats = get_json(url + "/stats")
    by = {s: [e for e in got if e.source == s] for s in options}
    assert [e.op for e in by["main.inc"]] == ["c"] * 6
    assert [e.key["id"] for e in by["main.inc"]] == [1, 2, 3, 4, 5, 6]
    assert by["main.inc"][1].after["v"] == "v2"  # the update of an old row was not seen
    ids = [e.key["id"] for e in by["main.ts"]]
    assert sorted(ids) == list(range(1, 16))  # each once, though pages cut 10 equal stamps
    assert {e.op for e in by["main.ts"]} == {"u"}
    bulk = by["main.bulk"]
    assert {e.op for e in bulk} == {"r"} and len(bulk) >= 10  # every pass re-reads the table
    assert bulk[-1].key == {"id": 4}  # the pass after the delete ends before id 5
    assert first_late == []  # held back by delay = 3s while other tables polled
    assert stats["capture"]["windows"] > 0 and stats["capture"]["error"] is None
    db.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "timestamp", "timestamp_column": "nope"}, "has no column 'nope'"),
        ({"mode": "timestamp", "timestamp_column": "v"}, "is not a date or time type"),
        ({"mode": "incrementing", "incrementing_column": "v"}, "is not an integer column"),
        ({"mode": "timestamp+incrementing", "timestamp_column": "at"}, "needs incrementing_column"),
        ({"mode": "sometimes"}, "mode must be one of"),
        ({"mode": "bulk", "colour": "red"}, "unknown option(s) colour"),
        ({"mode": "bulk", "poll_interval": "soon"}, "must be a duration"),
    ],
)
def test_bad_settings_are_one_line_before_anything_starts(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, at DATETIME)")
    db.close()
    config = _settings(tmp_path / "relay.toml", {"main.t": options})
    result = run_sluice(
        "relay", "--source", f"query+sqlite:///{path}", "--table", "main.t", "--port", "0",
        "--data-dir", str(tmp_path / "r"), "--config", str(config), timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error:") and message in lines[0]


def test_bad_query_urls_and_stray_table_settings_are_one_line(
    tmp_path: Path, mariadb: PrivateMariaDB
) -> None:
    config = _settings(tmp_path / "relay.toml", {"x.t": {"mode": "bulk"}})
    bulk = _settings(tmp_path / "bulk.toml", {"main.t": {"mode": "bulk"}})
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a SQLite file" * 100)
    cases = [  # exit 2: a bad setting; 1: the source is not there, or not a database
        (["--source", f"query+sqlite:///{garbage}", "--table", "main.t", "--config", str(bulk)],
         "refused: file is not a database", 1),
        (["--source", f"query+sqlite:///{tmp_path}/missing.db", "--table", "main.t",
          "--config", str(bulk)], "no SQLite database", 1),
        (["--source", f"query+sqlite:///{tmp_path}/missing.db", "--table", "main.t"],
         "needs each table's mode", 2),
        (["--source", "query+sqlite://host/app.db", "--table", "main.t"], "three slashes", 2),
        (["--source", "query+oracle://u@h/x", "--table", "a.t"], "unknown source scheme", 2),
        (["--source", mariadb.url, "--table", "x.t", "--config", str(config)],
         "apply to query sources", 2),
    ]  # fmt: skip
    for n, (args, message, code) in enumerate(cases):
        result = run_sluice(
            "relay", *args, "--port", "0", "--data-dir", str(tmp_path / f"r{n}"), timeout=60
        )
        assert result.returncode == code, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


# -- identical to log capture ---------------------------------------------------------------
def _poll(url: str, source: str, count: int, page_rows: int) -> dict[str, wire.RawEvent]:
    """One bulk pass of the query source, in process: key text -> raw event."""
    registry, lock = SchemaRegistry(), threading.Lock()
    windows: list[CapturedWindow] = []

    def sink(window: CapturedWindow) -> None:
        with lock:
            windows.append(window)

    options = {source: {"mode": "bulk", "page_rows": page_rows, "poll_interval": "1h"}}
    capture = open_capture(url, CaptureSettings((source,), registry, sink, table_options=options))
    capture.check()
    capture.start(0)
    out: dict[str, wire.RawEvent] = {}

    def collected() -> int:
        with lock:
            for w in windows:
                record = wire.encode_window(w.scn, 0, w.ts_ms, w.events)
                for raw in wire.decode_events(record):
                    codec = registry.codec(raw.source, raw.schema_version)
                    key = codec.decode_text(raw.payload, True)[0]
                    assert key not in out, "a row in two pages"
                    out[key] = raw
            windows.clear()
        return len(out)

    try:
        wait_for(lambda: collected() >= count, 60, f"{count} polled rows")
    finally:
        capture.stop()
    return out


def _assert_identical(polled: dict[str, wire.RawEvent], captured: dict[str, wire.RawEvent]) -> None:
    assert set(polled) == set(captured)
    for key, raw in polled.items():
        assert raw.op == "r"
        assert raw.payload == captured[key].payload, key
        assert raw.key_hash == captured[key].key_hash, key


def test_postgres_rows_polled_are_byte_identical_to_captured_ones(
    postgres: PrivatePostgres, pg_database: str
) -> None:
    import random

    from tests.integration.test_pg_seed import TYPED, _capture_inserts, _typed_row

    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute(TYPED)
    conn.commit()
    conn.close()
    rng = random.Random(11)
    inserts = [f"INSERT INTO typed VALUES {_typed_row(rng, i)}" for i in range(200)]
    captured, _registry = _capture_inserts(postgres, pg_database, "public.typed", inserts, 200)
    url = "query+" + postgres.source_url(pg_database)
    _assert_identical(_poll(url, "public.typed", 200, 23), captured)


def test_mariadb_rows_polled_are_byte_identical_to_captured_ones(
    mariadb: PrivateMariaDB, database: str
) -> None:
    from tests.integration.test_seed_differential import captured_all_types

    source = f"{database}.alltypes"
    captured, _registry, _start = captured_all_types(mariadb, database, 13, 150)
    by_key = {key: raw for (_src, key), (raw, _event) in captured.items()}
    _assert_identical(_poll("query+" + mariadb.url, source, 150, 31), by_key)


def test_a_value_that_does_not_fit_its_declared_type_stops_only_its_table(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("CREATE TABLE good (id INTEGER PRIMARY KEY, n INT)")
    db.execute("CREATE TABLE bad (id INTEGER PRIMARY KEY, n INT, at DATETIME)")
    db.execute("INSERT INTO good VALUES (1, 10)")
    db.execute("INSERT INTO bad VALUES (1, 7, '2024-01-01 00:00:00')")
    db.execute("INSERT INTO bad VALUES (2, 'seven', '2024-01-01 00:00:00')")  # SQLite allows it
    options = {
        "main.good": {"mode": "incrementing", "incrementing_column": "id", "poll_interval": 0.1},
        "main.bad": {"mode": "incrementing", "incrementing_column": "id", "poll_interval": 0.1},
    }
    config = RelayConfig(
        source=f"query+sqlite:///{path}", tables=list(options), data_dir=tmp_path / "r",
        port=0, table_options=options,
    )  # fmt: skip
    with RelayThread(config) as relay:

        def stopped() -> Any:
            by = {s["source"]: s for s in get_json(relay.url + "/sources")["sources"]}
            return by["main.bad"]["stopped"]

        message = wait_for(stopped, 30, "main.bad to stop")
        db.execute("INSERT INTO good VALUES (2, 20)")
        wait_for(lambda: 2 in _replica(relay.url, "main.good"), 30, "main.good going on")
        assert http_status(relay.url + "/healthz")[0] == 503  # a stopped table shows
    assert "column 'n' (INT) of main.bad" in message and "'seven'" in message
    db.close()


@pytest.mark.parametrize("mode", ["timestamp", "timestamp+incrementing", "incrementing", "bulk"])
def test_on_decode_error_skip_skips_the_row_and_says_so(
    tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``on_decode_error = "skip"``: a row a poll cannot convert is left out, counted in
    ``skipped_events`` (/stats, /metrics) with an ERROR line saying why, and the poll goes on
    after it: its neighbours (the same timestamp, the same page) and later rows all arrive,
    and the row is not read again at the next poll (bulk reads it every pass: counted each
    time, said once)."""
    path = tmp_path / "app.db"
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("CREATE TABLE bad (id INTEGER PRIMARY KEY, n INT, at DATETIME)")
    same = "2024-01-01 00:00:00"
    for i, n in ((1, "1"), (2, "'seven'"), (3, "3"), (4, "4")):  # SQLite takes 'seven'
        db.execute(f"INSERT INTO bad VALUES ({i}, {n}, '{same}')")
    db.execute("INSERT INTO bad VALUES (5, 5, '2024-01-01 00:00:01')")
    table: dict[str, Any] = {"mode": mode, "poll_interval": 0.1, "page_rows": 2}
    if "timestamp" in mode:
        table["timestamp_column"] = "at"
    if "incrementing" in mode:
        table["incrementing_column"] = "id"
    config = RelayConfig(
        source=f"query+sqlite:///{path}", tables=["main.bad"], data_dir=tmp_path / "r",
        port=0, table_options={"main.bad": table}, on_decode_error="skip",
    )  # fmt: skip
    with caplog.at_level("ERROR"), RelayThread(config) as relay:
        wait_for(lambda: set(_replica(relay.url, "main.bad")) == {1, 3, 4, 5}, 30, "1, 3-5")
        db.execute("INSERT INTO bad VALUES (6, 6, '2024-01-01 00:00:02')")
        wait_for(lambda: 6 in _replica(relay.url, "main.bad"), 30, "row 6")
        replica = _replica(relay.url, "main.bad")
        capture = get_json(relay.url + "/stats")["capture"]
        metrics = http_status(relay.url + "/metrics")[1].decode()
        healthz = http_status(relay.url + "/healthz")[0]
    assert replica == {1: 1, 3: 3, 4: 4, 5: 5, 6: 6}
    assert capture["stopped_sources"] == {} and healthz == 200
    skipped = [r.getMessage() for r in caplog.records if "skipped a change" in r.getMessage()]
    assert len(skipped) == 1, skipped  # said once
    if mode == "bulk":  # every poll reads the whole table again: skipped (counted) each time
        assert capture["skipped_events"] >= 2
    else:
        assert capture["skipped_events"] == 1
    assert "sluice_relay_capture_skipped_events_total " in metrics
    if mode != "bulk":
        assert "sluice_relay_capture_skipped_events_total 1\n" in metrics
    assert "column 'n' (INT) of main.bad" in skipped[0] and "'seven'" in skipped[0]
    assert "the row at" in skipped[0]
    db.close()


def test_seeding_from_a_query_source_gives_the_polled_bytes(tmp_path: Path) -> None:
    """``bootstrap seed --source query+sqlite://``: key ranges, each chunk stamped with the
    time its read began; every seeded row is byte-identical to the same row polled."""
    from tests.integration.test_pg_seed import _seed_in_process

    path = tmp_path / "app.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(
        "CREATE TABLE t (a TEXT, b INTEGER, v DECIMAL(8,2), at DATETIME, PRIMARY KEY (a, b))"
    )
    for i in range(100):
        db.execute(
            "INSERT INTO t VALUES (?, ?, ?, ?)",
            (f"k{i % 7}", i, i / 4, f"2024-01-01 00:00:{i % 60:02d}"),
        )
    db.close()
    url = f"query+sqlite:///{path}"
    before = int(time.time() * 1_000_000)
    job, seeded = _seed_in_process(url, tmp_path / "store", ("main.t",), 9)
    assert len(job.plans[0].ranges) >= 10  # a composite text key cut into ranges
    assert len(seeded) == 100
    assert all(row["scn"] >= before for row in seeded.values())  # stamped with read times
    polled = _poll(url, "main.t", 100, 13)
    assert set(polled) == set(seeded)
    for key, raw in polled.items():
        assert seeded[key]["payload"] == raw.payload and seeded[key]["key_hash"] == raw.key_hash
