"""Shared bits: a private server, timing, and result files."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sluice.capture.mysql.scn import scn_position
from sluice.testing import RelayProcess

RESULTS = Path(__file__).parent / "results"

# The 5-column table of the serving and Spark benchmarks, filled 1,000 rows per statement.
SMALL_TABLE_DDL = (
    "CREATE TABLE bench.t (id INT PRIMARY KEY, a INT, b VARCHAR(40), c DECIMAL(10,2), d DATETIME)"
)
SMALL_TABLE_ROWS = (
    "INSERT INTO bench.t SELECT seq + {off}, seq, CONCAT('name-', seq), seq / 100, "
    "'2024-01-02 03:04:05' FROM seq_1_to_{n}"
)


def fill_small_table(cur: Any, events: int) -> None:
    for off in range(0, events, 1000):
        cur.execute(SMALL_TABLE_ROWS.format(off=off, n=1000))


def relay_process(source: str, table_: str, data: Path, *more: str) -> RelayProcess:
    """``sluice relay`` in its own process, as deployed (a relay in the benchmark's process
    would share its GIL with the consumer and the writer), its log beside ``data``."""
    args = ["--source", source, "--table", table_, "--port", "0", "--data-dir", str(data)]
    return RelayProcess([*args, *more], data.parent / f"{data.name}.log").start()


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def write_results(name: str, results: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **results}, indent=2) + "\n")
    return path


def table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def binlog_reader(
    db: Any, start_scn: int, server_id: int, *, blocking: bool = False, **filters: Any
) -> Any:
    """The baseline: python-mysql-replication reading row changes from ``start_scn``
    (file/position mode with ``resume_stream``, the only correct one on MariaDB)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    return BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": db.port, "user": "root", "password": ""},
        server_id=server_id,
        log_file=f"binlog.{start_scn >> 32:06d}",
        log_pos=scn_position(start_scn),
        resume_stream=True,
        blocking=blocking,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        **filters,
    )
