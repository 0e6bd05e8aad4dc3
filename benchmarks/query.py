"""The query source (issue 12): rows/s of a first full pass and of steady polling, each vs a
plain ``SELECT`` of the same rows through the same driver (the limit: the source must run that
query and then convert and encode every row), on SQLite, PostgreSQL and MariaDB; and
commit-to-consumer latency through a relay at the default poll interval (1 s).

Throughput runs the query capture in this process with a counting sink (no relay, no HTTP),
so it measures the source itself. The SQLite database is in WAL mode, as one read while it is
written should be: in rollback-journal mode every poll waits for the writer's locks.
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import machine, table, write_results
from sluice.capture import CapturedWindow
from sluice.capture.source import CaptureSettings, open_capture
from sluice.client import BaseConsumer, Client, ClientConfig, MemoryCheckpointStore
from sluice.core.event import Window
from sluice.relay import RelayConfig
from sluice.schemas import SchemaRegistry
from sluice.testing import PrivateMariaDB, RelayThread
from sluice.testing.postgres import PrivatePostgres

ROWS, STEADY_ROUNDS, STEADY_ROWS, ROUNDS = 300_000, 30, 5_000, 3
OPTIONS = {
    "mode": "timestamp+incrementing",
    "timestamp_column": "updated_at",
    "incrementing_column": "id",
    "poll_interval": "50ms",
}
DDL = {
    "sqlite": "CREATE TABLE t (id INTEGER PRIMARY KEY, name VARCHAR(40), qty INT, "
    "price DECIMAL(10,2), updated_at TIMESTAMP NOT NULL)",
    "postgresql": "CREATE TABLE t (id bigint PRIMARY KEY, name varchar(40), qty int, "
    "price numeric(10,2), updated_at timestamp(6) NOT NULL)",
    "mariadb": "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR(40), qty INT, "
    "price DECIMAL(10,2), updated_at DATETIME(6) NOT NULL, KEY (updated_at, id))",
}
FILL = {  # ROWS rows whose timestamps are all in the past
    "sqlite": "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) "
    "INSERT INTO t SELECT i, 'item ' || i, i % 97, (i % 10000) / 100.0, "
    "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour') FROM s",
    "postgresql": "INSERT INTO t SELECT i, 'item ' || i, i % 97, (i % 10000) / 100.0, "
    "clock_timestamp() - interval '1 hour' FROM generate_series(1, {n}) i",
    "mariadb": "INSERT INTO t SELECT seq, CONCAT('item ', seq), seq % 97, (seq % 10000) / 100, "
    "NOW(6) - INTERVAL 1 HOUR FROM seq_1_to_{n}",
}
TOUCH = {  # STEADY_ROWS rows updated in one transaction
    "sqlite": "UPDATE t SET qty = qty + 1, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now') "
    "WHERE id > {lo} AND id <= {hi}",
    "postgresql": "UPDATE t SET qty = qty + 1, updated_at = clock_timestamp() "
    "WHERE id > {lo} AND id <= {hi}",
    "mariadb": "UPDATE t SET qty = qty + 1, updated_at = NOW(6) WHERE id > {lo} AND id <= {hi}",
}


class _Db:
    """One database kind: run SQL, time a plain SELECT, and the query source URL."""

    def __init__(self, kind: str, url: str, source: str, connect: Callable[[], Any]) -> None:
        self.kind, self.url, self.source = kind, url, source
        self.conn = connect()

    def run(self, sql: str) -> None:
        if self.kind == "sqlite":
            self.conn.execute(sql)
            return
        with self.conn.cursor() as cur:
            cur.execute(sql)
        if self.kind == "postgresql":
            self.conn.commit()

    def select_rows_per_s(self, where: str = "1=1") -> float:
        """The baseline: the same rows by a plain SELECT, fetched as the driver's tuples."""
        sql = f"SELECT * FROM t WHERE {where}"
        began = time.perf_counter()
        if self.kind == "sqlite":
            count = sum(1 for _ in self.conn.execute(sql))
        else:
            with self.conn.cursor() as cur:
                cur.execute(sql)
                count = len(cur.fetchall())
        return count / (time.perf_counter() - began)


def _source_rows_per_s(db: _Db, work: Callable[[], int]) -> tuple[float, float]:
    """Rows/s of a first pass over the table, and of the polls that find the rows ``work``
    changes after it. Steady counts the time spent in polls that delivered rows: the waits
    between polls (``poll_interval``) are a setting, not the source's speed."""
    lock, counted = threading.Lock(), [0]
    busy, steady_from = [0.0], [float("inf")]  # steady_from: when the first pass was read
    expected, done = [ROWS * 2 + 1], threading.Event()  # (no target before the work is done)

    def sink(window: CapturedWindow) -> None:
        with lock:
            counted[0] += len(window.events)

    options = {db.source: OPTIONS}
    settings = CaptureSettings((db.source,), SchemaRegistry(), sink, table_options=options)
    capture = open_capture(db.url, settings)
    poll = capture._poll  # type: ignore[attr-defined]

    def timed(source: str) -> None:
        before, began = counted[0], time.perf_counter()
        poll(source)
        if counted[0] > before:  # the part of a poll after the first pass (it may span both)
            busy[0] += max(0.0, time.perf_counter() - max(began, steady_from[0]))
        if counted[0] >= expected[0]:
            done.set()  # by the poll thread: the poll that read the last row is counted

    capture._poll = timed  # type: ignore[attr-defined]
    capture.check()
    began = time.perf_counter()
    capture.start(0)
    try:
        while counted[0] < ROWS:
            time.sleep(0.01)
        steady_from[0] = time.perf_counter()
        first = ROWS / (steady_from[0] - began)
        expected[0] = ROWS + work()
        if not done.wait(600):
            raise RuntimeError(f"the source read {counted[0]} rows of {expected[0]}")
        steady = (expected[0] - ROWS) / busy[0]
    finally:
        capture.stop()
    return first, steady


def _measure(db: _Db) -> dict[str, Any]:
    if db.kind == "sqlite":  # as a database read while written runs (README: SQLite)
        db.run("PRAGMA journal_mode=WAL")
    db.run(DDL[db.kind])
    db.run(FILL[db.kind].format(n=ROWS))
    if db.kind == "sqlite":
        db.run("CREATE INDEX t_ts ON t (updated_at, id)")
    elif db.kind == "postgresql":
        db.run("CREATE INDEX t_ts ON t (updated_at, id)")
        db.run("ANALYZE t")

    def steady_work() -> int:
        for n in range(STEADY_ROUNDS):
            db.run(TOUCH[db.kind].format(lo=n * STEADY_ROWS, hi=(n + 1) * STEADY_ROWS))
        return STEADY_ROUNDS * STEADY_ROWS

    # Rounds of baseline then source (a new capture, from the start, each round): the host's
    # pace drifts, and each round's ratio is against its own baseline. A first round warms
    # up (imports, kernels, the database's pages in memory) and is not counted.
    _source_rows_per_s(db, steady_work)
    firsts, steadies, selects, select_steadies = [], [], [], []
    for _ in range(ROUNDS):
        selects.append(statistics.median(db.select_rows_per_s() for _ in range(3)))
        changed = f"id <= {STEADY_ROUNDS * STEADY_ROWS}"  # (the median of 3, as the first's)
        select_steadies.append(statistics.median(db.select_rows_per_s(changed) for _ in range(3)))
        first, steady = _source_rows_per_s(db, steady_work)
        firsts.append(first)
        steadies.append(steady)
    first_rounds = [round(f / s, 2) for f, s in zip(firsts, selects, strict=True)]
    steady_rounds = [round(f / s, 2) for f, s in zip(steadies, select_steadies, strict=True)]
    return {
        "first_pass_rows_per_s": round(statistics.median(firsts)),
        "select_rows_per_s": round(statistics.median(selects)),
        "first_pass_ratio": statistics.median(first_rounds),
        "first_pass_rounds": first_rounds,
        "first_pass_worst": min(first_rounds),
        "steady_rows_per_s": round(statistics.median(steadies)),
        "select_steady_rows_per_s": round(statistics.median(select_steadies)),
        "steady_ratio": statistics.median(steady_rounds),
        "steady_rounds": steady_rounds,
        "steady_worst": min(steady_rounds),
    }


class _Latency(BaseConsumer):
    def __init__(self, stamps: dict[int, float]) -> None:
        self.stamps, self.ms = stamps, []

    def on_window_end(self, window: Window) -> None:
        now = time.time()
        for event in window.events:
            key = (event.key or {}).get("id")
            if key in self.stamps:
                self.ms.append((now - self.stamps.pop(key)) * 1000)


def _latency(path: Path, tmp: Path, commits: int = 60) -> dict[str, float]:
    """Commit -> consumer through a relay with the default poll interval (1 s)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE lat (id INTEGER PRIMARY KEY, v TEXT)")
    options = {"main.lat": {"mode": "incrementing", "incrementing_column": "id"}}
    config = RelayConfig(
        source=f"query+sqlite:///{path}", tables=["main.lat"], data_dir=tmp / "relay", port=0,
        table_options=options,
    )  # fmt: skip
    stamps: dict[int, float] = {}
    consumer = _Latency(stamps)
    with RelayThread(config) as relay:
        client = Client(
            ClientConfig(relays=(relay.url,), since_scn=0), consumer, MemoryCheckpointStore()
        )
        thread = threading.Thread(target=client.run, daemon=True)
        thread.start()
        for i in range(1, commits + 1):
            stamps[i] = time.time()
            db.execute("INSERT INTO lat VALUES (?, 'x')", (i,))
            time.sleep(0.05)
        deadline = time.monotonic() + 30
        while stamps and time.monotonic() < deadline:
            time.sleep(0.05)
        client.stop()
        thread.join(10)
    ms = sorted(consumer.ms)
    return {
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(ms[int(len(ms) * 0.99) - 1], 1),
        "poll_interval_ms": 1000,
    }


def run() -> dict[str, Any]:
    results: dict[str, Any] = {"machine": machine(), "rows": ROWS}
    with tempfile.TemporaryDirectory(prefix="sluice-query-") as tmp:
        path = Path(tmp) / "bench.db"
        sqlite_db = _Db(
            "sqlite",
            f"query+sqlite:///{path}",
            "main.t",
            lambda: sqlite3.connect(path, isolation_level=None, check_same_thread=False),
        )
        results["sqlite"] = _measure(sqlite_db)
        results["latency"] = _latency(Path(tmp) / "lat.db", Path(tmp))
    with PrivatePostgres() as pg:
        url = pg.source_url("postgres")
        results["postgresql"] = _measure(
            _Db("postgresql", "query+" + url, "public.t", lambda: pg.connect("postgres"))
        )
    with PrivateMariaDB() as maria:
        admin = maria.connect()
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
        results["mariadb"] = _measure(
            _Db("mariadb", "query+" + maria.url, "bench.t", lambda: maria.connect("bench"))
        )
    rows = [
        ("database", "first pass", "SELECT", "ratio (worst)", "steady", "SELECT", "ratio (worst)")
    ]
    for kind in ("sqlite", "postgresql", "mariadb"):
        r = results[kind]
        rows.append(
            (
                kind,
                f"{r['first_pass_rows_per_s']:,}",
                f"{r['select_rows_per_s']:,}",
                f"{r['first_pass_ratio']}x ({r['first_pass_worst']}x)",
                f"{r['steady_rows_per_s']:,}",
                f"{r['select_steady_rows_per_s']:,}",
                f"{r['steady_ratio']}x ({r['steady_worst']}x)",
            )
        )
    print(table(rows))
    lat = results["latency"]
    print(
        f"commit -> consumer at the default 1 s poll: p50 {lat['p50_ms']} ms, "
        f"p99 {lat['p99_ms']} ms"
    )
    print("wrote", write_results("query", results))
    return results


if __name__ == "__main__":
    run()
