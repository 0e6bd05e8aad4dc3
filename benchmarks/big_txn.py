"""One 1,000,000-row transaction vs the same rows in 1,000-row transactions, through a relay
with the default 64 MiB buffer (issue 25): the big one is handed over in parts and held in a
file beside the buffer. Measured: relay capture time from its start (``--since-scn`` before
the rows) until its buffer's max SCN reaches the binlog's end, and the relay's peak anonymous
RSS (RssAnon, sampled every 50 ms) while it does. Target: big / small throughput >= 0.8x.

Run alone: ``python -m benchmarks.big_txn``.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.common import table, write_results
from sluice.capture.mysql.metadata import end_scn
from sluice.testing import PrivateMariaDB, RelayProcess

ROWS = 1_000_000
PAD = "x" * 170  # ~200-byte rows, as in the issue


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/stats", timeout=30) as resp:
        body: dict[str, Any] = json.loads(resp.read())
        return body


def _anon_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def _capture(db: PrivateMariaDB, work: Path, name: str, start: int, end: int) -> dict[str, Any]:
    """A fresh relay from ``start``: seconds until its buffer holds ``end``, peak RSS."""
    args = ["--source", db.url, "--table", f"bench.{name}", "--port", "0"]
    args += ["--data-dir", str(work / f"relay-{name}-{time.monotonic_ns()}")]
    args += ["--since-scn", str(start)]
    began = time.perf_counter()
    relay = RelayProcess(args, work / "relay.log").start()
    assert relay.proc is not None
    pid, peak, done = relay.proc.pid, 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.05):
            peak = max(peak, _anon_rss(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    base = _anon_rss(pid)
    try:
        while _stats(relay.url)["max_scn"] < end:
            time.sleep(0.02)
        seconds = time.perf_counter() - began
        held = _stats(relay.url)["window_files"]
    finally:
        done.set()
        sampler.join()
        relay.stop()
    return {
        "seconds": round(seconds, 2),
        "rows_per_s": round(ROWS / seconds),
        "anon_rss_start_mb": round(base / 2**20, 1),
        "anon_rss_peak_mb": round(peak / 2**20, 1),
        "window_files": held["windows"],
    }


def run(rounds: int = 3) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sluice-bigtxn-"))
    with PrivateMariaDB(work / "db") as db:
        conn = db.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
            cur.execute("USE bench")
            for name in ("big", "small"):
                cur.execute(f"CREATE TABLE bench.{name} (id INT PRIMARY KEY, n BIGINT, pad TEXT)")
            start = end_scn(conn)
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO bench.big SELECT seq, seq, '{PAD}' FROM seq_1_to_{ROWS}")
            cur.execute("COMMIT")
            middle = end_scn(conn)
            for off in range(0, ROWS, 1000):
                cur.execute(
                    f"INSERT INTO bench.small SELECT seq + {off}, seq, '{PAD}' FROM seq_1_to_1000"
                )
            end = end_scn(conn)
        conn.close()
        big, small = [], []
        for _ in range(rounds):  # interleaved: the host's speed drifts
            big.append(_capture(db, work, "big", start, middle))
            small.append(_capture(db, work, "small", middle, end))
    ratios = [b["rows_per_s"] / s["rows_per_s"] for b, s in zip(big, small, strict=True)]
    results = {
        "rows": ROWS,
        "rounds": rounds,
        "one_transaction": big,
        "thousand_row_transactions": small,
        "ratio_per_round": [round(r, 2) for r in ratios],
        "ratio_worst": round(min(ratios), 2),
        "target_ratio": 0.8,
        "peak_anon_rss_mb_one_transaction": max(b["anon_rss_peak_mb"] for b in big),
        "peak_anon_rss_mb_small_transactions": max(s["anon_rss_peak_mb"] for s in small),
    }
    print(
        table(
            [
                ("case", "rows/s (best)", "rows/s (worst)", "peak anon RSS MB"),
                *(
                    (
                        label,
                        f"{max(r['rows_per_s'] for r in runs):,}",
                        f"{min(r['rows_per_s'] for r in runs):,}",
                        f"{max(r['anon_rss_peak_mb'] for r in runs)}",
                    )
                    for label, runs in (
                        ("1 transaction of 1M rows", big),
                        ("1,000 transactions of 1,000 rows", small),
                    )
                ),
            ]
        )
    )
    print(
        f"one big / many small: {', '.join(f'{r:.2f}x' for r in ratios)} "
        f"(worst {min(ratios):.2f}x, target >= 0.8x)"
    )
    path = write_results("big_txn", results)
    print(f"results: {path}")
    return results


if __name__ == "__main__":
    run()
