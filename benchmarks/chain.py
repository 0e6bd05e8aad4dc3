"""Relay chaining (issue 29): what a second tier of relays costs.

- Throughput: a first-tier relay process holds a range of 500,000 rows (1,000-row
  transactions); a second-tier relay process (``sluice://``) started after it reads the whole
  range from it into its own buffer (the whole process, its start included). Baseline, same
  run: a raw reader of the first tier's
  ``/stream`` (blocking HTTP, frames parsed, nothing kept), and the first tier's own capture
  rate over the same range.
- Latency: commit to consumer at 100 and 1,000 commits/s, one client on each tier reading the
  same commits at once.

``python -m benchmarks.chain`` runs it alone.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import fill_small_table, relay_process, table, write_results
from benchmarks.latency import measure_clients
from sluice.blocking_http import frames, get_json
from sluice.capture.mysql.metadata import end_scn
from sluice.core import wire
from sluice.testing import PrivateMariaDB

ROWS = 500_000
RATES = (100, 1000)
SECONDS = 8.0


def _wait_max(url: str, scn: int, timeout: float = 300) -> float:
    """When the relay at ``url`` first held ``scn`` (perf_counter)."""
    deadline = time.monotonic() + timeout
    while get_json(url, "/stats")["max_scn"] < scn:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not reach SCN {scn}")
        time.sleep(0.005)
    return time.perf_counter()


def _raw_read(url: str, since: int, until: int) -> float:
    began = time.perf_counter()
    while since < until:
        params = {"since_scn": str(since), "timeout_ms": "0", "max_bytes": str(16 << 20)}
        for frame in frames(url, "/stream", params):
            if isinstance(frame, bytes):
                since = wire.read_window_header(frame).scn
    return time.perf_counter() - began


def _throughput(db: PrivateMariaDB, tmp: Path) -> dict[str, Any]:
    with db.connect() as admin, admin.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
    conn = db.connect("bench")
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE bench.t (id INT PRIMARY KEY, a INT, b VARCHAR(40), "
            "c DECIMAL(10,2), d DATETIME)"
        )
        start = end_scn(conn)
        fill_small_table(cur, ROWS)
        last = end_scn(conn)
    conn.close()
    began = time.perf_counter()
    top = relay_process(db.url, "bench.t", tmp / "a", "--since-scn", str(start))
    try:
        while get_json(top.url, "/stats")["capture"]["last_scn"] < last:
            time.sleep(0.005)
        capture_s = time.perf_counter() - began
        newest = get_json(top.url, "/stats")["max_scn"]
        raw_s = min(_raw_read(top.url, start, newest) for _ in range(3))
        source = top.url.replace("http://", "sluice://")
        began = time.perf_counter()
        low = relay_process(source, "bench.t", tmp / "b", "--since-scn", str(start))
        try:
            chain_s = _wait_max(low.url, newest) - began
        finally:
            low.stop()
    finally:
        top.stop()
    return {
        "rows": ROWS,
        "first_tier_capture_rows_per_s": round(ROWS / capture_s),
        "raw_reader_rows_per_s": round(ROWS / raw_s),
        "second_tier_rows_per_s": round(ROWS / chain_s),
        "second_tier_vs_raw_reader": round(raw_s / chain_s, 2),
        "second_tier_vs_first_tier_capture": round(capture_s / chain_s, 2),
    }


def run() -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="sluice-bench-chain-"))
    with PrivateMariaDB() as db:
        results: dict[str, Any] = {"throughput": _throughput(db, tmp)}
        with db.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE bench.lat (id INT PRIMARY KEY, v VARCHAR(10))")
        top = relay_process(db.url, "bench.lat", tmp / "la")
        low = relay_process(top.url.replace("http://", "sluice://"), "bench.lat", tmp / "lb")
        try:
            for n, rate in enumerate(RATES):
                urls = [top.url, low.url]
                first, second = asyncio.run(measure_clients(db, urls, rate, SECONDS, n * 100_000))
                results[f"latency_{rate}_per_s"] = {"first_tier": first, "second_tier": second}
        finally:
            low.stop()
            top.stop()
    got = results["throughput"]
    print(
        table(
            [
                ("relay chaining", "rows/s"),
                ("first tier's capture", f"{got['first_tier_capture_rows_per_s']:,}"),
                ("a raw reader of the first tier", f"{got['raw_reader_rows_per_s']:,}"),
                (
                    "second tier (sluice://) reading the first",
                    f"{got['second_tier_rows_per_s']:,} ({got['second_tier_vs_raw_reader']}x "
                    f"the raw reader, {got['second_tier_vs_first_tier_capture']}x capture)",
                ),
            ]
        )
    )
    rows = [("commit -> consumer", "p50 ms", "p99 ms", "max ms")]
    for rate in RATES:
        for tier in ("first_tier", "second_tier"):
            m = results[f"latency_{rate}_per_s"][tier]
            rows.append(
                (
                    f"{rate}/s, {tier.replace('_', ' ')}",
                    *(str(m[k]) for k in ("p50_ms", "p99_ms", "max_ms")),
                )
            )
    print(table(rows))
    print("wrote", write_results("chain", results))
    return results


if __name__ == "__main__":
    run()
