"""The state store (``sluice state serve``): lookups against a primary-key SELECT on the source,
lookups a group member forwards, and the rate a new store loads from the relay.

One MariaDB source with ``orders(id INT PRIMARY KEY, status VARCHAR(20), amount DECIMAL(10,2),
note TEXT)`` of ``ROWS`` rows (1,000-row transactions), one ``sluice relay`` process holding
them, and ``sluice state serve`` processes reading that relay.

1. **Restore**: a new store (a fresh SQLite file, no ``--bootstrap``) loading every key from
   the relay: from launching the process (and from its first ``/stats`` answer) until its
   ``/stats`` ``store_scn`` reaches the relay's newest SCN with ``keys`` == ``ROWS``: keys/s.
   A snapshot restore through a bootstrap server needs Spark and is not measured here.
2. **Lookups**: 1 and 8 concurrent clients (threads, each with its own keep-alive HTTP
   connection), random existing keys, ``LOOKUP_S`` seconds each: ``GET /state/bench.orders?id=N``
   against the baseline, ``SELECT * FROM orders WHERE id = %s`` on the source with PyMySQL (one
   connection per client); lookups/s, p50 and p99, ratio state / SELECT. The clients run in this
   process (the GIL is theirs to share, the same for both).
3. **Forwarded lookups**: a group of 2 members (``--group``, a private ZooKeeper, ``--partitions
   4``); one client sends every lookup to member A: keys A holds against keys A forwards to B
   (split beforehand with ``/state/owner``), p50 and p99.

Run alone: ``python -m benchmarks.state`` (``SLUICE_BENCH_SCALE=0.1`` for a quick check).
"""

from __future__ import annotations

import http.client
import json
import os
import random
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
from urllib.parse import urlsplit

import pymysql

from benchmarks.common import relay_process, table, write_results
from sluice.capture.mysql.metadata import end_scn
from sluice.testing import PrivateMariaDB
from sluice.testing.mariadb import free_port
from sluice.testing.zookeeper import PrivateZooKeeper

_SCALE = float(os.environ.get("SLUICE_BENCH_SCALE", "1"))  # < 1: a quick check of the bench
ROWS = max(2000, round(100_000 * _SCALE) // 1000 * 1000)
LOOKUP_S = 5.0 if _SCALE >= 1 else 2.0
FORWARD_S = 4.0 if _SCALE >= 1 else 2.0
CLIENTS = (1, 8)
PARTITIONS = 4
SOURCE = "bench.orders"


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


class _State:
    """``sluice state serve`` as a child process on a known port."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.port = free_port()
        self.args, self.log = [*args, "--port", str(self.port)], log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> _State:
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sluice.cli.main", "state", "serve", *self.args],
                stdout=log, stderr=log, env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )  # fmt: skip
        return self

    def stats(self) -> dict[str, Any] | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"sluice state exited {self.proc.returncode}: {self.log}")
        try:
            stats: dict[str, Any] = _get_json(self.url + "/stats")
        except OSError:
            return None
        return stats

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()


def _loaded(stats: dict[str, Any] | None, newest: int) -> bool:
    if not stats:
        return False
    return (stats.get("store_scn") or 0) >= newest and sum(stats["keys"].values()) == ROWS


# -- 1. restore --------------------------------------------------------------------------------
def _restore(work: Path, relay_url: str, newest: int) -> tuple[dict[str, Any], _State]:
    state = _State(["--relay", relay_url, "--source", SOURCE, "--store", str(work / "s.db")],
                   work / "state.log")  # fmt: skip
    began = time.perf_counter()
    state.start()
    _wait(state.stats, 60, "the store's /stats")
    up = time.perf_counter()
    _wait(lambda: _loaded(state.stats(), newest), 300, "the store to load every key", 0.02)
    done = time.perf_counter()
    return {
        "keys": ROWS,
        "seconds": round(done - began, 2),
        "keys_per_s": round(ROWS / (done - began)),
        "seconds_from_first_stats": round(done - up, 2),
        "keys_per_s_from_first_stats": round(ROWS / (done - up)),
        "snapshot_restore": "skipped: a bootstrap server needs Spark",
    }, state


# -- 2. lookups --------------------------------------------------------------------------------
def _http_lookup(base: str) -> Callable[[], Callable[[int], None]]:
    netloc = urlsplit(base).netloc

    def make() -> Callable[[int], None]:
        conn = http.client.HTTPConnection(netloc, timeout=30)

        def one(key: int) -> None:
            conn.request("GET", f"/state/{SOURCE}?id={key}")
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"lookup of {key}: {resp.status} {body[:200]!r}")

        return one

    return make


def _sql_lookup(port: int) -> Callable[[], Callable[[int], None]]:
    def make() -> Callable[[int], None]:
        conn = pymysql.connect(host="127.0.0.1", port=port, user="root", database="bench",
                               autocommit=True)  # fmt: skip
        cur = conn.cursor()

        def one(key: int) -> None:
            cur.execute("SELECT * FROM orders WHERE id = %s", (key,))
            if cur.fetchone() is None:
                raise RuntimeError(f"no row {key}")

        return one

    return make


def _drive(make: Callable[[], Callable[[int], None]], clients: int, seconds: float,
           keys: list[int]) -> dict[str, Any]:  # fmt: skip
    """``clients`` threads, each its own connection, looking up random ``keys`` for ``seconds``."""
    lookups = [make() for _ in range(clients)]
    for one in lookups:  # warm: connections open, first request done
        for key in keys[:20]:
            one(key)
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def work(i: int) -> None:
        rng, out, one = random.Random(i), latencies[i], lookups[i]
        start.wait()
        clock = time.perf_counter
        try:
            while (t := clock()) < deadline[0]:
                one(rng.choice(keys))
                out.append(clock() - t)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    if errors:
        raise errors[0]
    every = sorted(x for lat in latencies for x in lat)
    return {
        "lookups": len(every),
        "lookups_per_s": round(len(every) / wall),
        "p50_ms": round(every[len(every) // 2] * 1000, 3),
        "p99_ms": round(every[min(len(every) - 1, int(len(every) * 0.99))] * 1000, 3),
    }


def _lookups(state_url: str, db_port: int) -> dict[str, Any]:
    keys = list(range(1, ROWS + 1))
    out: dict[str, Any] = {}
    for n, clients in enumerate(CLIENTS):
        runs = {}
        order = ("state", "select") if n % 2 == 0 else ("select", "state")  # alternate
        for kind in order:
            make = _http_lookup(state_url) if kind == "state" else _sql_lookup(db_port)
            runs[kind] = _drive(make, clients, LOOKUP_S, keys)
        s, q = runs["state"], runs["select"]
        out[f"clients_{clients}"] = {
            "clients": clients,
            "state": s,
            "select": q,
            "ratio_throughput": round(s["lookups_per_s"] / q["lookups_per_s"], 2),
            "ratio_p50": round(s["p50_ms"] / q["p50_ms"], 2),
            "ratio_p99": round(s["p99_ms"] / q["p99_ms"], 2),
        }
    return out


# -- 3. forwarded lookups ----------------------------------------------------------------------
def _forwarded(work: Path, zk: PrivateZooKeeper, relay_url: str, newest: int) -> dict[str, Any]:
    base = ["--relay", relay_url, "--source", SOURCE, "--group", "bench", "--coordinator",
            zk.url(), "--partitions", str(PARTITIONS)]  # fmt: skip
    a = _State([*base, "--store", str(work / "ga")], work / "ga.log").start()
    b = _State([*base, "--store", str(work / "gb")], work / "gb.log").start()

    def held(member: _State) -> set[str]:
        return set(((member.stats() or {}).get("group") or {}).get("held", {}))

    try:
        _wait(lambda: len(held(a) | held(b)) == PARTITIONS and not held(a) & held(b), 120,
              "the members to share the partitions")  # fmt: skip

        def both_loaded() -> bool:
            sa, sb = a.stats() or {}, b.stats() or {}
            return (
                all((s.get("store_scn") or 0) >= newest for s in (sa, sb))
                and sum(sa.get("keys", {}).values()) + sum(sb.get("keys", {}).values()) == ROWS
            )

        _wait(both_loaded, 300, "both members to load their keys", 0.1)
        rng = random.Random(7)
        sample = rng.sample(range(1, ROWS + 1), 2000)
        here: list[int] = []
        there: list[int] = []
        for key in sample:
            owner = _get_json(f"{a.url}/state/owner?source={SOURCE}&id={key}")
            (here if owner["here"] else there).append(key)
        fwd_before = (a.stats() or {})["forwarded"]
        runs = {}
        for kind, keys in (("held_by_a", here), ("forwarded_to_b", there)):
            runs[kind] = _drive(_http_lookup(a.url), 1, FORWARD_S, keys)
        forwarded = (a.stats() or {})["forwarded"] - fwd_before
        return {
            "members": 2,
            "partitions": PARTITIONS,
            "held_by_a_partitions": sorted(held(a)),
            "sample_keys": {"held_by_a": len(here), "forwarded_to_b": len(there)},
            **runs,
            "a_forwarded_count": forwarded,
            "ratio_p50": round(runs["forwarded_to_b"]["p50_ms"] / runs["held_by_a"]["p50_ms"], 2),
            "ratio_p99": round(runs["forwarded_to_b"]["p99_ms"] / runs["held_by_a"]["p99_ms"], 2),
        }
    finally:
        a.stop()
        b.stop()


def _newest(relay_url: str, conn: Any) -> int:
    end = end_scn(conn)
    _wait(lambda: _get_json(relay_url + "/stats")["capture"]["last_scn"] >= end, 120,
          "the relay to capture the rows")  # fmt: skip
    return int(_get_json(relay_url + "/stats")["max_scn"])


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with PrivateMariaDB(work / "mariadb") as db, PrivateZooKeeper(work / "zk") as zk:
            admin = db.connect()
            with admin.cursor() as cur:
                cur.execute("CREATE DATABASE bench")
                cur.execute("CREATE TABLE bench.orders (id INT PRIMARY KEY, status VARCHAR(20), "
                            "amount DECIMAL(10,2), note TEXT)")  # fmt: skip
            admin.close()
            relay = relay_process(db.url, SOURCE, work / "relay")
            conn = db.connect("bench")
            state = None
            try:
                with conn.cursor() as cur:
                    for off in range(0, ROWS, 1000):
                        cur.execute(
                            "INSERT INTO orders SELECT seq + %s, ELT(1 + MOD(seq, 4), 'new', "
                            "'paid', 'shipped', 'cancelled'), seq / 7, "
                            "CONCAT('order note ', seq, ' ', REPEAT('x', MOD(seq, 50))) "
                            "FROM seq_1_to_1000",
                            (off,),
                        )
                        conn.commit()
                newest = _newest(relay.url, conn)
                restore, state = _restore(work, relay.url, newest)
                lookups = _lookups(state.url, db.port)
                state.stop()
                state = None
                results: dict[str, Any] = {
                    "rows": ROWS,
                    "restore": restore,
                    "lookups": lookups,
                    "forwarded": _forwarded(work, zk, relay.url, newest),
                }
            finally:
                if state is not None:
                    state.stop()
                conn.close()
                relay.stop()
    rows_ = [("lookups", "clients", "lookups/s", "p50 ms", "p99 ms")]
    for run_ in lookups.values():
        for kind, name in (("state", "sluice state GET"), ("select", "PyMySQL SELECT by PK")):
            r = run_[kind]
            rows_.append((name, str(run_["clients"]), f"{r['lookups_per_s']:,}", str(r["p50_ms"]),
                          str(r["p99_ms"])))  # fmt: skip
        rows_.append(("ratio state / SELECT", str(run_["clients"]), f"{run_['ratio_throughput']}x",
                      f"{run_['ratio_p50']}x", f"{run_['ratio_p99']}x"))  # fmt: skip
    print(f"{ROWS:,} rows of orders, random existing keys, {LOOKUP_S:g} s per run "
          "(clients: threads in one process, one keep-alive connection each)")  # fmt: skip
    print(table(rows_))
    fw = results["forwarded"]
    rows_ = [("group of 2, 4 partitions, all lookups to A", "keys", "lookups/s", "p50 ms",
              "p99 ms")]  # fmt: skip
    for kind, name in (("held_by_a", "keys A holds"), ("forwarded_to_b", "keys A forwards to B")):
        r = fw[kind]
        rows_.append((name, str(fw["sample_keys"][kind]), f"{r['lookups_per_s']:,}",
                      str(r["p50_ms"]), str(r["p99_ms"])))  # fmt: skip
    print(table(rows_))
    print(f"forwarded / held: p50 {fw['ratio_p50']}x, p99 {fw['ratio_p99']}x "
          f"(A's /stats forwarded {fw['a_forwarded_count']:,} in the forwarded run)")  # fmt: skip
    print(f"restore of a new store from the relay: {ROWS:,} keys in {restore['seconds']} s "
          f"from launch, {restore['keys_per_s']:,} keys/s "
          f"({restore['keys_per_s_from_first_stats']:,} keys/s from its first /stats answer); "
          "snapshot restore through a bootstrap server: skipped (needs Spark)")  # fmt: skip
    print(f"results: {write_results('state', results)}")
    return results


if __name__ == "__main__":
    run()
