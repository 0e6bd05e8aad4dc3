"""Serving and end to end.

- serving: events/s and MB/s from one relay process to 1 and to 50 concurrent clients reading
  the whole buffer, with the relay's CPU seconds, against the relay's own raw read of its buffer;
- end to end: ``sluice tail`` printing JSON from a relay capturing a binlog range, against a
  python-mysql-replication loop printing the same rows as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.common import SMALL_TABLE_DDL, binlog_reader, fill_small_table, table, write_results
from sluice.capture.mysql.metadata import end_scn
from sluice.core.buffer import EventBuffer
from sluice.core.wire import FrameParser, Heartbeat, read_window_header
from sluice.relay.store import BUFFER_FILE
from sluice.testing import PrivateMariaDB, RelayProcess


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _client(session: aiohttp.ClientSession, url: str, since: int, until: int) -> int:
    size, scn = 0, since
    while scn < until:
        params = {"since_scn": str(scn), "timeout_ms": "0", "max_bytes": str(16 << 20)}
        async with session.get(url + "/stream", params=params) as resp:
            body = await resp.read()
        size += len(body)
        for frame in FrameParser().feed(body):
            scn = frame.scn if isinstance(frame, Heartbeat) else read_window_header(frame).scn
    return size


async def _fan_out(url: str, since: int, until: int, clients: int, rounds: int) -> int:
    """``clients`` concurrent readers, each reading the whole buffer ``rounds`` times."""

    async def reader(session: aiohttp.ClientSession) -> int:
        return sum([await _client(session, url, since, until) for _ in range(rounds)])

    async with aiohttp.ClientSession() as session:
        sizes = await asyncio.gather(*(reader(session) for _ in range(clients)))
    return sum(sizes)


def _serving(relay: RelayProcess, data_dir: Path, events: int) -> dict[str, Any]:
    stats = json.loads(subprocess.check_output(["curl", "-s", relay.url + "/stats"]))
    since, until = int(stats["min_scn"]), int(stats["max_scn"])
    assert relay.proc is not None
    out: dict[str, Any] = {"events_in_buffer": events, "bytes_in_buffer": stats["bytes"]}
    # The same volume both ways: one client reading the buffer 50 times, 50 clients once.
    for clients, rounds in ((1, 50), (50, 1)):
        cpu0, began = _cpu_seconds(relay.proc.pid), time.perf_counter()
        total = asyncio.run(_fan_out(relay.url, since, until, clients, rounds))
        seconds = time.perf_counter() - began
        cpu = _cpu_seconds(relay.proc.pid) - cpu0
        out[f"clients_{clients}"] = {
            "events_delivered": events * clients * rounds,
            "events_per_s": round(events * clients * rounds / seconds),
            "mb_per_s": round(total / seconds / 1e6, 1),
            "relay_cpu_s": round(cpu, 2),
        }
    out["raw_buffer_read_mb_per_s"] = _raw_buffer_read(data_dir)
    out["relay_cpu_50_vs_1"] = round(
        out["clients_50"]["relay_cpu_s"] / max(out["clients_1"]["relay_cpu_s"], 0.01), 2
    )
    return out


def _raw_buffer_read(data_dir: Path) -> float:
    """The relay's own read of its buffer file (mmap + window seek), in MB/s."""
    import mmap

    with (data_dir / BUFFER_FILE).open("rb") as fh:
        mem = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        buffer = EventBuffer(mem)
        buffer.restore()
        began, size, scn, cursor = time.perf_counter(), 0, buffer.start_scn, None
        while True:
            windows, cursor = buffer.read(scn, 16 << 20, cursor)
            if not windows:
                break
            size += sum(len(w) for w in windows)
            scn = cursor.scn if cursor else scn
        seconds = time.perf_counter() - began
        mem.close()
    return round(size / seconds / 1e6, 1)


def _tail(relay_url: str, since: int, events: int) -> float:
    began = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sluice.cli.main",
            "tail",
            "--relay",
            relay_url,
            "--since-scn",
            str(since),
        ],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    for n, _line in enumerate(proc.stdout, 1):
        if n >= events:
            break
    seconds = time.perf_counter() - began
    proc.kill()
    proc.wait()
    proc.stdout.close()
    return seconds


def _pymysqlrepl_json(db: PrivateMariaDB, start: int, events: int) -> float:
    began = time.perf_counter()
    reader = binlog_reader(db, start, 4545)
    with Path(os.devnull).open("w") as out:
        n = 0
        for event in reader:
            for row in event.rows:
                out.write(
                    json.dumps({"table": event.table, "after": row["values"]}, default=str) + "\n"
                )
                n += 1
            if n >= events:
                break
    reader.close()
    return time.perf_counter() - began


def run(events: int = 200_000, rounds: int = 3) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sluice-serving-"))
    with PrivateMariaDB(work / "db") as db:
        conn = db.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
            cur.execute(SMALL_TABLE_DDL)
            start = end_scn(conn)
            cur.execute("USE bench")
            fill_small_table(cur, events)

        def relay_args(data_dir: Path) -> list[str]:
            return [
                "--source",
                db.url,
                "--table",
                "bench.t",
                "--port",
                "0",
                "--data-dir",
                str(data_dir),
                "--since-scn",
                str(start),
                "--buffer-size",
                str(256 << 20),
            ]

        # Rounds, interleaved and best of each (the host's speed drifts). Every round starts
        # a fresh relay, so tail always runs as a pipeline with the relay's capture.
        tail_runs, base_runs = [], []
        for n in range(rounds):
            data_dir = work / f"relay-{n}"
            relay = RelayProcess(relay_args(data_dir), work / "relay.log").start()
            try:
                tail_runs.append(_tail(relay.url, start, events))
                if n == rounds - 1:
                    serving = _serving(relay, data_dir, events)
            finally:
                relay.stop()
            base_runs.append(_pymysqlrepl_json(db, start, events))
        conn.close()
    tail_s, base_s = min(tail_runs), min(base_runs)
    end_to_end = {
        "events": events,
        "tail_runs_s": [round(r, 3) for r in tail_runs],
        "python_mysql_replication_runs_s": [round(r, 3) for r in base_runs],
        "sluice_tail_events_per_s": round(events / tail_s),
        "python_mysql_replication_json_events_per_s": round(events / base_s),
        "ratio": round(base_s / tail_s, 2),
    }
    results = {"end_to_end": end_to_end, "serving": serving}
    one, fifty = serving["clients_1"], serving["clients_50"]
    print(
        table(
            [
                ("measure", "value"),
                (
                    "sluice tail (capturing too) -> JSON",
                    f"{end_to_end['sluice_tail_events_per_s']} ev/s",
                ),
                (
                    "python-mysql-replication -> JSON",
                    f"{end_to_end['python_mysql_replication_json_events_per_s']} ev/s",
                ),
                ("tail vs python-mysql-replication", f"{end_to_end['ratio']}x"),
                ("serving 1 client", f"{one['events_per_s']} ev/s, {one['mb_per_s']} MB/s"),
                ("serving 50 clients", f"{fifty['events_per_s']} ev/s, {fifty['mb_per_s']} MB/s"),
                ("relay CPU, 50 clients vs 1, same volume", f"{serving['relay_cpu_50_vs_1']}x"),
                ("relay raw buffer read", f"{serving['raw_buffer_read_mb_per_s']} MB/s"),
            ]
        )
    )
    print("wrote", write_results("serving", results))
    return results
