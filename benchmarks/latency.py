"""Commit-to-consumer latency through relay and client at a steady commit rate: the relay in
its own process (as deployed), the client and the writer in the benchmark's."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import binlog_reader, relay_process, table, write_results
from sluice.capture.mysql.metadata import end_scn
from sluice.client import AsyncClient, BaseConsumer, ClientConfig
from sluice.core.event import Event
from sluice.testing import PrivateMariaDB

FAST_RATE, FAST_SECONDS = 1000, 8.0


class _Arrivals(BaseConsumer):
    def __init__(self) -> None:
        self.seen: dict[int, float] = {}

    def on_event(self, event: Event) -> None:
        assert event.after is not None
        self.seen[event.after["id"]] = time.perf_counter()


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "max_ms": round(ordered[-1], 2),
        "n": len(ordered),
    }


async def _measure(db: PrivateMariaDB, rate: int, seconds: float) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    relay = await asyncio.to_thread(relay_process, db.url, "bench.lat", data / "relay")
    try:
        (found,) = await measure_clients(db, [relay.url], rate, seconds)
    finally:
        relay.stop()
    return found


async def measure_clients(
    db: PrivateMariaDB, urls: list[str], rate: int, seconds: float, first_id: int = 0
) -> list[dict[str, Any]]:
    """Commit-to-consumer latency of one client per relay in ``urls``, all reading the same
    single-row commits into ``bench.lat`` at ``rate`` per second (ids from ``first_id``)."""
    consumers = [_Arrivals() for _ in urls]
    clients = [
        AsyncClient(ClientConfig(relays=(url,), since_scn=None), consumer)
        for url, consumer in zip(urls, consumers, strict=True)
    ]
    tasks = [asyncio.create_task(client.run()) for client in clients]
    await asyncio.sleep(0.5)
    commits: dict[int, float] = {}

    def work() -> None:
        conn = db.connect()
        cur = conn.cursor()
        for i in range(first_id, first_id + int(rate * seconds)):
            began = time.perf_counter()
            cur.execute("INSERT INTO bench.lat VALUES (%s, 'x')", (i,))
            commits[i] = time.perf_counter()
            time.sleep(max(0.0, 1 / rate - (time.perf_counter() - began)))
        conn.close()

    worker = threading.Thread(target=work)
    worker.start()
    while worker.is_alive():
        await asyncio.sleep(0.1)
    deadline = time.monotonic() + 30
    while any(len(c.seen) < len(commits) for c in consumers) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for client in clients:
        client.stop()
    await asyncio.gather(*tasks)
    return [
        percentiles([(c.seen[i] - t) * 1000 for i, t in commits.items() if i in c.seen])
        for c in consumers
    ]


def _direct_reader(db: PrivateMariaDB, rate: int, seconds: float) -> dict[str, Any]:
    """Baseline: python-mysql-replication's arrival latency reading the binlog directly."""
    conn = db.connect()
    cur = conn.cursor()
    arrivals: dict[int, float] = {}
    reader = binlog_reader(db, end_scn(conn), 4343, blocking=True, only_tables=["lat2"])
    total = int(rate * seconds)

    def read() -> None:
        for event in reader:
            for row in event.rows:
                arrivals[row["values"]["id"]] = time.perf_counter()
            if len(arrivals) >= total:
                return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    time.sleep(0.5)
    commits: dict[int, float] = {}
    for i in range(total):
        began = time.perf_counter()
        cur.execute("INSERT INTO bench.lat2 VALUES (%s, 'x')", (i,))
        commits[i] = time.perf_counter()
        time.sleep(max(0.0, 1 / rate - (time.perf_counter() - began)))
    thread.join(30)
    reader.close()
    conn.close()
    return percentiles([(arrivals[i] - t) * 1000 for i, t in commits.items() if i in arrivals])


def run(rate: int = 100, seconds: float = 10.0) -> dict[str, Any]:
    with PrivateMariaDB() as db:
        with db.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
            cur.execute("CREATE TABLE bench.lat (id INT PRIMARY KEY, v VARCHAR(10))")
            cur.execute("CREATE TABLE bench.lat2 (id INT PRIMARY KEY, v VARCHAR(10))")
        ours = asyncio.run(_measure(db, rate, seconds))
        base = _direct_reader(db, rate, seconds)
        # Issue 30: p99 <= 5 ms at 1,000 commits/s (fresh tables: ids start again)
        with db.connect() as conn, conn.cursor() as cur:
            cur.execute("TRUNCATE TABLE bench.lat")
            cur.execute("TRUNCATE TABLE bench.lat2")
        fast = asyncio.run(_measure(db, FAST_RATE, FAST_SECONDS))
        fast_base = _direct_reader(db, FAST_RATE, FAST_SECONDS)
    results = {
        "commits_per_s": rate,
        "sluice_relay_client": ours,
        "python_mysql_replication_direct": base,
        f"at_{FAST_RATE}_per_s": {
            "sluice_relay_client": fast,
            "python_mysql_replication_direct": fast_base,
        },
    }
    print(
        table(
            [
                ("path", "p50 ms", "p99 ms", "max ms", "n"),
                (
                    "sluice relay -> client",
                    *(str(ours[k]) for k in ("p50_ms", "p99_ms", "max_ms", "n")),
                ),
                (
                    "direct binlog reader",
                    *(str(base[k]) for k in ("p50_ms", "p99_ms", "max_ms", "n")),
                ),
                (
                    f"sluice relay -> client, {FAST_RATE}/s",
                    *(str(fast[k]) for k in ("p50_ms", "p99_ms", "max_ms", "n")),
                ),
                (
                    f"direct binlog reader, {FAST_RATE}/s",
                    *(str(fast_base[k]) for k in ("p50_ms", "p99_ms", "max_ms", "n")),
                ),
            ]
        )
    )
    print("wrote", write_results("latency", results))
    return results
