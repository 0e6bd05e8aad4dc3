"""A normal client's ``/stream`` latency alone vs while 200 clients catch up over the whole
buffer, 20 hold whole-buffer streams open without reading them and 1,000 idle long polls are
held (issues 11 and 25: target <= 3x), and the relay's peak RSS under that load vs the
documented bound. Then the operator's view under a flood (issue 40): ``/stats`` latency while
200 clients catch up over the whole buffer through a partition filter that keeps little
(before the fix such streams never yielded the loop: ``/stats`` waited seconds).

The relay is a ``sluice relay`` process; the crowd is another process (asyncio: 200 readers
that re-read the whole buffer as fast as they can, 1,000 sockets holding long polls); the
normal client is this process, timing small reads of the newest windows.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.common import SMALL_TABLE_DDL, fill_small_table, machine, table, write_results
from sluice.capture.mysql.metadata import end_scn
from sluice.testing import PrivateMariaDB, RelayProcess

READERS, UNREAD, IDLE, SAMPLES = 200, 20, 1000, 300
# The filtered flood: a member of a 1,000-way consumer group, for FLOOD_S from its start
FILTERED, FLOOD_S = "&partition=0/1000", 10.0


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.read()


def _stats(url: str) -> dict[str, Any]:
    return dict(json.loads(_get(url + "/stats")))


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _stats_latency(url: str, seconds: float) -> dict[str, float]:
    """``GET /stats`` one after another for ``seconds``: ms per request."""
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        began = time.perf_counter()
        _get(url + "/stats")
        times.append((time.perf_counter() - began) * 1000)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(times[int(len(times) * 0.99) - 1], 2),
        "max_ms": round(times[-1], 2),
        "answers": len(times),
    }


def _normal_client(url: str, since: int) -> dict[str, float]:
    """Small reads of the newest window, one after another: ms per request."""
    times = []
    for _ in range(SAMPLES):
        began = time.perf_counter()
        _get(f"{url}/stream?since_scn={since}&max_bytes=65536&timeout_ms=0")
        times.append((time.perf_counter() - began) * 1000)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(times[int(len(times) * 0.99) - 1], 2),
    }


async def _crowd(port: int, start: int, tip: int, seconds: float, query: str = "") -> None:
    """In the crowd process: readers re-reading the whole buffer, streams of the whole
    buffer never read, idle long polls; with ``query`` (a filter), the readers alone."""
    unread = []
    for _ in range(UNREAD if not query else 0):
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"GET /stream?since_scn={start}&max_bytes=268435456&timeout_ms=300000 HTTP/1.1\r\n"
            "Host: x\r\n\r\n".encode()
        )
        unread.append(writer)  # never read: its socket fills and stays full
    idle = []
    for _ in range(IDLE if not query else 0):
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"GET /stream?since_scn={tip}&timeout_ms=300000 HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        idle.append(writer)
    deadline = time.monotonic() + seconds

    async def reader() -> None:
        while time.monotonic() < deadline:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(
                f"GET /stream?since_scn={start}&max_bytes=268435456&timeout_ms=0{query} "
                "HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
            )
            while await r.read(1 << 20):
                if time.monotonic() >= deadline:
                    break
            w.close()

    await asyncio.gather(*(reader() for _ in range(READERS)))
    for writer in idle + unread:
        writer.close()


def _crowd_main() -> None:
    port, start, tip, seconds = (int(a) for a in sys.argv[2:6])
    asyncio.run(_crowd(port, start, tip, seconds, *sys.argv[6:7]))


def _filtered_flood(url: str, port: int, start: int, tip: int) -> dict[str, float]:
    """``/stats`` latency while ``READERS`` filtered clients re-read the whole buffer, from
    the moment they all arrive (issue 40's case) on."""
    crowd = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.load", "crowd", str(port), str(start), str(tip),
         "120", FILTERED]
    )  # fmt: skip
    try:
        return _stats_latency(url, FLOOD_S)
    finally:
        crowd.kill()
        crowd.wait()


def _load_relay(db: PrivateMariaDB, tmp: str) -> RelayProcess:
    return RelayProcess(
        [
            "--source", db.url, "--table", "bench.t", "--port", "0",
            "--data-dir", str(Path(tmp) / "r"), "--buffer-size", str(64 << 20),
            "--max-clients", "2000",
        ],
        Path(tmp) / "relay.log",
    ).start()  # fmt: skip


def run(windows: int = 500) -> dict[str, Any]:
    with PrivateMariaDB() as db, tempfile.TemporaryDirectory(prefix="sluice-load-") as tmp:
        conn = db.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
            cur.execute(SMALL_TABLE_DDL)
        relay = _load_relay(db, tmp)
        try:
            start = _stats(relay.url)["max_scn"]
            with conn.cursor() as cur:
                cur.execute("USE bench")
                fill_small_table(cur, windows * 1000)  # 1,000-row windows
            end = end_scn(conn)
            while _stats(relay.url)["capture"]["last_scn"] < end:
                time.sleep(0.1)
            stats = _stats(relay.url)
            tip = stats["max_scn"]
            assert relay.proc is not None
            pid = relay.proc.pid
            head = tip - 1  # the newest window: what a client at the head reads
            alone = _normal_client(relay.url, head)
            port = int(relay.url.rsplit(":", 1)[1])
            crowd = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.load", "crowd", str(port), str(start),
                 str(tip), "120"]
            )  # fmt: skip
            while _stats(relay.url)["clients"] < UNREAD + IDLE + READERS // 2:
                time.sleep(0.2)
            peak = _rss(pid)
            before, began = _stats(relay.url)["bytes_served"], time.perf_counter()
            loaded = _normal_client(relay.url, head)
            peak = max(peak, _rss(pid))
            under = _stats(relay.url)
            crowd_mb_s = (under["bytes_served"] - before) / (time.perf_counter() - began) / 2**20
            crowd.kill()
            crowd.wait()
            flood = _filtered_flood(relay.url, port, start, tip)
        finally:
            relay.stop()
    # README's formula: baseline (~180 MB) + buffer pages (<= --buffer-size) + ~1 MiB/stream
    bound = 180 + 64 + under["clients"]
    results = {
        "machine": machine(),
        "buffer_bytes": stats["bytes"],
        "alone": alone,
        "loaded": loaded,
        "clients_under_load": under["clients"],
        "unread_streams": UNREAD,
        "crowd_mb_per_s": round(crowd_mb_s, 1),
        "p99_ratio": round(loaded["p99_ms"] / max(alone["p99_ms"], 0.01), 2),
        "peak_rss_mb": round(peak / 2**20, 1),
        "rss_bound_mb": bound,
        "stats_under_filtered_flood": flood,
    }
    print(
        table(
            [
                ("normal client /stream", "p50", "p99"),
                ("alone", f"{alone['p50_ms']} ms", f"{alone['p99_ms']} ms"),
                (
                    f"{READERS} catching up + {UNREAD} unread + {IDLE} idle polls",
                    f"{loaded['p50_ms']} ms",
                    f"{loaded['p99_ms']} ms",
                ),
            ]
        )
    )
    print(
        f"p99 under load / alone: {results['p99_ratio']}x; relay peak RSS "
        f"{results['peak_rss_mb']} MB (formula ~{bound} MB); the crowd read "
        f"{results['crowd_mb_per_s']} MB/s meanwhile"
    )
    print(
        f"/stats under {READERS} filtered ({FILTERED[1:]}) catching up: p50 {flood['p50_ms']} "
        f"ms, p99 {flood['p99_ms']} ms, max {flood['max_ms']} ms"
    )
    print("wrote", write_results("load", results))
    return results


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "crowd":
        _crowd_main()
    else:
        run()
