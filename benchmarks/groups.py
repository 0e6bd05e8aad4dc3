"""Sink groups (``sluice sink --group``, issue 43): throughput of a group against one sink, and
failover after a SIGKILL.

One MariaDB source, one ``sluice relay`` process and a private ZooKeeper. The relay first
captures a backlog of ``EVENTS`` row changes (the 5-column table of ``serving``: inserts, then
updates of the same rows, 1,000 per transaction) before any sink starts.

1. **Throughput**: from launching the processes until the PostgreSQL replica (a fresh, empty
   database each) holds the relay's newest SCN. The baseline is ONE ``sluice sink`` (no group;
   done when its ``/stats`` ``checkpoint_scn`` reaches that SCN); against it, a group of
   ``GROUP_MEMBERS`` members on ``PARTITIONS`` partitions (done when every partition's row of
   ``sluice_sink_checkpoint`` reaches it). Ratio: group seconds / single seconds (below 1: the
   group is faster). The CPU seconds of the sink processes, of the PostgreSQL server (postmaster
   and its backends) and of the relay are read from ``/proc`` over each run: on a 2-core machine
   the group's processes compete for the same two cores, and every partition's sink reads (and
   filters) the whole stream.
2. **Failover**: a group of 3 members on 8 partitions, ``--session-timeout 4``, a paced workload
   running (single-row transactions); one member is SIGKILLed, and two times are measured: until
   the other members' ``/stats`` (``group.held``) cover all 8 partitions again, and until each of
   the killed member's partitions' checkpoint rows move past where they were at the kill.

Run alone: ``python -m benchmarks.groups`` (``SLUICE_BENCH_SCALE=0.1`` for a quick check).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import relay_process, table, write_results
from sluice.capture.mysql.metadata import end_scn
from sluice.core.checkpoint import decode_checkpoint
from sluice.testing import PrivateMariaDB
from sluice.testing.mariadb import free_port
from sluice.testing.postgres import PrivatePostgres
from sluice.testing.zookeeper import PrivateZooKeeper

_SCALE = float(os.environ.get("SLUICE_BENCH_SCALE", "1"))  # < 1: a quick check of the bench
EVENTS = max(2000, round(100_000 * _SCALE) // 2000 * 2000)  # half inserts, half updates
PARTITIONS = 8
GROUP_MEMBERS = 4
FAILOVER_MEMBERS = 3
SESSION_S = 4.0
TICKS = os.sysconf("SC_CLK_TCK")


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def _wait(check: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


class _Sink:
    """``sluice sink`` as a child process on a known port (``/stats``)."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.port = free_port()
        self.args, self.log = [*args, "--port", str(self.port)], log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> _Sink:
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sluice.cli.main", "sink", *self.args],
                stdout=log, stderr=log, env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )  # fmt: skip
        return self

    def stats(self) -> dict[str, Any] | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"sluice sink exited {self.proc.returncode}: {self.log}")
        try:
            stats: dict[str, Any] = _get_json(f"http://127.0.0.1:{self.port}/stats")
        except OSError:
            return None
        return stats

    def held(self) -> set[int]:
        stats = self.stats() or {}
        return {int(p) for p in (stats.get("group") or {}).get("held", {})}

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


# -- CPU seconds from /proc -------------------------------------------------------------------
def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from the 3rd (state) on


def _cpu(pid: int, children: bool = False) -> float:
    """utime + stime (+ the reaped children's) of ``pid`` in seconds; 0 once it is gone."""
    try:
        f = _stat(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    ticks = int(f[11]) + int(f[12]) + (int(f[13]) + int(f[14]) if children else 0)
    return ticks / TICKS


def _pg_cpu(pg: PrivatePostgres) -> float:
    """The PostgreSQL server's CPU seconds: the postmaster with its reaped backends, and its
    live children (backends, writers)."""
    postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
    total = _cpu(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat(int(entry.name))[1]) == postmaster:
                    total += _cpu(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
    return total


# -- the replica -------------------------------------------------------------------------------
def _fresh_db(pg: PrivatePostgres, name: str) -> str:
    admin = pg.connect()
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    admin.close()
    return f"postgresql://postgres@127.0.0.1:{pg.port}/{name}"


def _checkpoints(pg: PrivatePostgres, database: str, group: str) -> dict[str, int]:
    """The replica's checkpoint rows of ``group``: name -> SCN (-1 without one yet)."""
    conn = pg.connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT name, checkpoint FROM sluice_sink_checkpoint WHERE name LIKE %s",
                        (f"{group}.p%",))  # fmt: skip
            return {
                name: decode_checkpoint(text, where=name).scn if text else -1
                for name, text in cur.fetchall()
            }
    except Exception:  # the table is not made yet
        return {}
    finally:
        conn.close()


def _newest(relay_url: str, conn: Any) -> int:
    end = end_scn(conn)
    _wait(lambda: _get_json(relay_url + "/stats")["capture"]["last_scn"] >= end, 120,
          "the relay to capture the backlog")  # fmt: skip
    return int(_get_json(relay_url + "/stats")["max_scn"])


# -- 1. throughput -----------------------------------------------------------------------------
def _catch_up(
    kind: str, work: Path, pg: PrivatePostgres, zk: PrivateZooKeeper, relay: Any, newest: int
) -> dict[str, Any]:
    """One run from launching the processes until a fresh replica holds ``newest``."""
    database = f"{kind}_replica"
    base = ["--to", _fresh_db(pg, database), "--relay", relay.url]
    if kind == "single":
        sinks = [_Sink(base, work / "single.log")]
    else:
        base += ["--group", "tp", "--coordinator", zk.url(), "--partitions", str(PARTITIONS)]
        sinks = [_Sink(base, work / f"tp{i}.log") for i in range(GROUP_MEMBERS)]

    def done() -> bool:
        stats = [sink.stats() for sink in sinks]  # raises if one died
        if kind == "single":
            return ((stats[0] or {}).get("checkpoint_scn") or 0) >= newest
        rows = _checkpoints(pg, database, "tp")
        return len(rows) == PARTITIONS and min(rows.values()) >= newest

    pg_before, relay_before = _pg_cpu(pg), _cpu(relay.proc.pid)
    began = time.perf_counter()
    for sink in sinks:
        sink.start()
    try:
        _wait(done, 600, f"{kind}: the replica to reach SCN {newest}", every=0.1)
        seconds = time.perf_counter() - began
        sink_cpu = sum(_cpu(s.proc.pid) for s in sinks if s.proc is not None)
        return {
            "processes": len(sinks),
            "seconds": round(seconds, 2),
            "events_per_s": round(EVENTS / seconds),
            "sink_cpu_s": round(sink_cpu, 1),
            "postgres_cpu_s": round(_pg_cpu(pg) - pg_before, 1),
            "relay_cpu_s": round(_cpu(relay.proc.pid) - relay_before, 1),
        }
    finally:
        for sink in sinks:
            sink.stop()


def _throughput(
    work: Path, pg: PrivatePostgres, zk: PrivateZooKeeper, relay: Any, newest: int
) -> dict[str, Any]:
    runs = {kind: _catch_up(kind, work, pg, zk, relay, newest) for kind in ("single", "group")}
    ratio = round(runs["group"]["seconds"] / runs["single"]["seconds"], 2)
    return {**runs, "ratio_group_over_single": ratio}


# -- 2. failover -------------------------------------------------------------------------------
def _paced(conn: Any, stop: threading.Event, first_id: int) -> None:
    """Single-row inserts and updates, ~100 commits/s, until ``stop``: every partition's
    checkpoint keeps moving."""
    with conn.cursor() as cur:
        i = 0
        while not stop.is_set():
            cur.execute("INSERT INTO t VALUES (%s, 1, 'x', 1, '2024-01-02 03:04:05')",
                        (first_id + i,))  # fmt: skip
            cur.execute("UPDATE t SET a = a + 1 WHERE id = %s", (1 + i % 1000,))
            conn.commit()
            i += 1
            time.sleep(0.01)


def _failover(
    work: Path, pg: PrivatePostgres, zk: PrivateZooKeeper, relay: Any, conn: Any, newest: int
) -> dict[str, Any]:
    database = "failover_replica"
    base = ["--to", _fresh_db(pg, database), "--relay", relay.url, "--group", "fo",
            "--coordinator", zk.url(), "--partitions", str(PARTITIONS),
            "--session-timeout", str(SESSION_S)]  # fmt: skip
    members = [_Sink(base, work / f"fo{i}.log").start() for i in range(FAILOVER_MEMBERS)]
    stop = threading.Event()
    worker = threading.Thread(target=_paced, args=(conn, stop, 10 * EVENTS), daemon=True)
    try:

        def all_held(alive: list[_Sink]) -> bool:
            held = [m.held() for m in alive]
            return sum(len(h) for h in held) == PARTITIONS and len(set().union(*held)) == PARTITIONS

        _wait(lambda: all_held(members), 120, "the group to hold every partition")
        # caught up with the backlog first: what follows measures failover, not catch-up

        def caught_up() -> bool:
            rows = _checkpoints(pg, database, "fo")
            return len(rows) == PARTITIONS and min(rows.values()) >= newest

        _wait(caught_up, 600, "the group to catch up", every=0.2)
        worker.start()
        time.sleep(3)  # the workload flowing through every partition
        victim, alive = members[0], members[1:]
        lost = sorted(victim.held())
        at_kill = _checkpoints(pg, database, "fo")
        killed = time.perf_counter()
        victim.kill()
        _wait(lambda: all_held(alive), SESSION_S + 60, "the others to hold every partition")
        held_s = time.perf_counter() - killed
        names = [f"fo.p{p}" for p in lost]

        def moved() -> bool:
            rows = _checkpoints(pg, database, "fo")
            return all(rows.get(n, -1) > at_kill[n] for n in names)

        _wait(moved, SESSION_S + 60, "the killed member's partitions to move", every=0.05)
        moved_s = time.perf_counter() - killed
    finally:
        stop.set()
        if worker.is_alive():
            worker.join(30)
        for member in members:
            member.stop()
    return {
        "members": FAILOVER_MEMBERS,
        "session_timeout_s": SESSION_S,
        "killed_partitions": lost,
        "all_held_s": round(held_s, 2),
        "checkpoints_moved_s": round(moved_s, 2),
    }


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with (
            PrivateMariaDB(work / "mariadb") as db,
            PrivatePostgres(work / "pg") as pg,
            PrivateZooKeeper(work / "zk") as zk,
        ):
            admin = db.connect()
            with admin.cursor() as cur:
                cur.execute("CREATE DATABASE bench")
                cur.execute(
                    "CREATE TABLE bench.t (id INT PRIMARY KEY, a INT, b VARCHAR(40), "
                    "c DECIMAL(10,2), d DATETIME)"
                )
            admin.close()
            relay = relay_process(db.url, "bench.t", work / "relay")
            conn = db.connect("bench")
            try:
                rows = EVENTS // 2
                with conn.cursor() as cur:  # the backlog: inserts, then updates, 1,000 a commit
                    for off in range(0, rows, 1000):
                        cur.execute(
                            "INSERT INTO t SELECT seq + %s, seq, CONCAT('name-', seq), "
                            "seq / 100, '2024-01-02 03:04:05' FROM seq_1_to_1000",
                            (off,),
                        )
                        conn.commit()
                    for off in range(0, rows, 1000):
                        cur.execute(f"UPDATE t SET a = a + 1 WHERE id BETWEEN {off + 1} "
                                    f"AND {off + 1000}")  # fmt: skip
                        conn.commit()
                newest = _newest(relay.url, conn)
                results: dict[str, Any] = {
                    "events": EVENTS,
                    "partitions": PARTITIONS,
                    "throughput": _throughput(work, pg, zk, relay, newest),
                    "failover": _failover(work, pg, zk, relay, conn, newest),
                }
            finally:
                conn.close()
                relay.stop()
    tp, fo = results["throughput"], results["failover"]
    rows_ = [("run", "processes", "seconds", "events/s", "sink CPU s", "PostgreSQL CPU s",
              "relay CPU s")]  # fmt: skip
    names = {"single": "single (no group)",
             "group": f"group ({GROUP_MEMBERS} members, {PARTITIONS} partitions)"}  # fmt: skip
    for kind, name in names.items():
        r = tp[kind]
        cells = ("processes", "seconds", "events_per_s", "sink_cpu_s", "postgres_cpu_s",
                 "relay_cpu_s")  # fmt: skip
        rows_.append((name, *(str(r[c]) for c in cells)))
    print(f"{EVENTS} row changes (1,000-row transactions) from empty to the relay's newest SCN")
    print(table(rows_))
    busy = tp["group"]["sink_cpu_s"] + tp["group"]["postgres_cpu_s"] + tp["group"]["relay_cpu_s"]
    print(f"group / single: {tp['ratio_group_over_single']}x the time; on {os.cpu_count()} "
          f"cores the group kept {busy / tp['group']['seconds']:.2f} cores busy "
          f"(sinks + PostgreSQL + relay CPU s / wall s)")  # fmt: skip
    print(f"failover ({fo['members']} members, {PARTITIONS} partitions, --session-timeout "
          f"{SESSION_S:g}, SIGKILL of the holder of partitions {fo['killed_partitions']}): "
          f"all partitions held again after {fo['all_held_s']} s, their checkpoints moving "
          f"again after {fo['checkpoints_moved_s']} s")  # fmt: skip
    print(f"results: {write_results('groups', results)}")
    return results


if __name__ == "__main__":
    run()
