"""PostgreSQL commit-to-consumer latency at a steady commit rate: through the Sluice relay
(in its own process, as deployed) and client, and (baseline) a psycopg2 logical-replication
loop reading the slot directly.
The server commits synchronously here: with ``synchronous_commit=off`` WAL reaches the
walsender only every ``wal_writer_delay``."""

from __future__ import annotations

import asyncio
import select
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extras

from benchmarks.common import relay_process, table, write_results
from benchmarks.latency import FAST_RATE, FAST_SECONDS, _Arrivals, percentiles
from sluice.client import AsyncClient, ClientConfig
from sluice.testing.postgres import PrivatePostgres


def _commits(pg: PrivatePostgres, table_name: str, rate: int, seconds: float) -> dict[int, float]:
    commits: dict[int, float] = {}
    conn = pg.connect("bench")
    cur = conn.cursor()
    for i in range(int(rate * seconds)):
        began = time.perf_counter()
        cur.execute(f"INSERT INTO {table_name} VALUES (%s, 'x')", (i,))
        commits[i] = time.perf_counter()
        time.sleep(max(0.0, 1 / rate - (time.perf_counter() - began)))
    conn.close()
    return commits


async def _sluice(pg: PrivatePostgres, rate: int, seconds: float) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    source = pg.source_url("bench", slot=f"lat{rate}")
    relay = await asyncio.to_thread(relay_process, source, "public.lat", data / "relay")
    try:
        consumer = _Arrivals()
        client = AsyncClient(ClientConfig(relays=(relay.url,), since_scn=None), consumer)
        task = asyncio.create_task(client.run())
        await asyncio.sleep(0.5)
        commits = await asyncio.to_thread(_commits, pg, "lat", rate, seconds)
        deadline = time.monotonic() + 30
        while len(consumer.seen) < len(commits) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        client.stop()
        await task
    finally:
        relay.stop()
    return percentiles([(consumer.seen[i] - t) * 1000 for i, t in commits.items()])


def _direct(pg: PrivatePostgres, rate: int, seconds: float) -> dict[str, Any]:
    conn = psycopg2.connect(
        pg.dsn("bench"), connection_factory=psycopg2.extras.LogicalReplicationConnection
    )
    cur = conn.cursor()
    cur.create_replication_slot(f"direct{rate}", output_plugin="pgoutput")
    cur.start_replication(
        slot_name=f"direct{rate}",
        decode=False,
        options={"proto_version": "1", "publication_names": "lat2"},
    )
    total = int(rate * seconds)
    arrivals: dict[int, float] = {}

    def read() -> None:
        while len(arrivals) < total:
            msg = cur.read_message()
            if msg is None:
                select.select([cur], [], [], 0.5)
                continue
            data = msg.payload
            if data[:1] == b"I":  # relid, 'N', ncols, 't', len, the id's text
                size = int.from_bytes(data[9:13], "big")
                arrivals[int(data[13 : 13 + size])] = time.perf_counter()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    time.sleep(0.5)
    commits = _commits(pg, "lat2", rate, seconds)
    thread.join(30)
    conn.close()
    return percentiles([(arrivals[i] - t) * 1000 for i, t in commits.items() if i in arrivals])


def run(rate: int = 100, seconds: float = 10.0) -> dict[str, Any]:
    with PrivatePostgres(settings=("synchronous_commit=on",)) as pg:
        pg.connect().cursor().execute("CREATE DATABASE bench")
        conn = pg.connect("bench")
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE lat (id int PRIMARY KEY, v text)")
            cur.execute("CREATE TABLE lat2 (id int PRIMARY KEY, v text)")
            cur.execute("CREATE PUBLICATION lat2 FOR TABLE lat2")
        conn.close()
        ours = asyncio.run(_sluice(pg, rate, seconds))
        base = _direct(pg, rate, seconds)
        # Issue 30: p99 <= 5 ms at 1,000 commits/s (fresh tables: ids start again)
        conn = pg.connect("bench")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("TRUNCATE lat, lat2")
        conn.close()
        fast = asyncio.run(_sluice(pg, FAST_RATE, FAST_SECONDS))
        fast_base = _direct(pg, FAST_RATE, FAST_SECONDS)
    results = {
        "commits_per_s": rate,
        "sluice_relay_client": ours,
        "psycopg2_direct": base,
        f"at_{FAST_RATE}_per_s": {"sluice_relay_client": fast, "psycopg2_direct": fast_base},
    }
    print(
        table(
            [("PostgreSQL latency", "p50 ms", "p99 ms", "max ms")]
            + [
                (name, str(v["p50_ms"]), str(v["p99_ms"]), str(v["max_ms"]))
                for name, v in (
                    ("Sluice relay -> client", ours),
                    ("psycopg2 direct", base),
                    (f"Sluice relay -> client, {FAST_RATE}/s", fast),
                    (f"psycopg2 direct, {FAST_RATE}/s", fast_base),
                )
            ]
        )
    )
    print("wrote", write_results("pg_latency", results))
    return results


if __name__ == "__main__":
    run()
