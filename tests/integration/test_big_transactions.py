"""A transaction several times the event buffer (400,000 updated rows plus 400,000 inserted
ones, ~3.5x the default 64 MiB), with the relay SIGKILLed while it is being received: a live
consumer and a late one both end with exactly the source's rows, and the relay's anonymous
memory does not grow with the transaction. On MariaDB and on PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql

from sluice.client import Client, ClientConfig, FileCheckpointStore, RetryPolicy
from sluice.testing import PrivateMariaDB, RelayProcess, ReplicaConsumer, free_port
from sluice.testing.postgres import PrivatePostgres
from tests.integration.support import (
    SLUICE,
    assert_replica_equals,
    consume,
    get_json,
    wait_for,
)

ROWS = 400_000
WARM = 20_000  # rows of the warm-up transaction: ~5 MB, a few capture parts
PAD = "x" * 170  # ~200-byte rows


def _anon_rss(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


class _Sampler:
    """Samples the anonymous RSS of whichever relay process runs now."""

    def __init__(self) -> None:
        self.pid = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            if self.pid:
                self.peak = max(self.peak, _anon_rss(self.pid))

    @contextmanager
    def running(self) -> Iterator[_Sampler]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()


def _start(args: list[str], log: Path, sampler: _Sampler) -> RelayProcess:
    relay = RelayProcess(args, log).start()
    assert relay.proc is not None
    sampler.pid = relay.proc.pid
    return relay


def _held(relay_url: str, min_bytes: int = 0) -> bool:
    """A window is held in a file, none is being received, and held windows total more than
    ``min_bytes``."""
    held = get_json(relay_url + "/stats")["window_files"]
    return bool(held["windows"] >= 1 and held["receiving_bytes"] == 0 and held["bytes"] > min_bytes)


def _through_a_kill(
    args: list[str],
    tmp_path: Path,
    write: Callable[[int], None],
    check: Callable[[ReplicaConsumer], None],
) -> None:
    """Start a relay and a live client, run ``write(WARM)`` (a transaction of a few parts), then
    ``write(ROWS)`` (the big one), SIGKILL the relay while it receives it, restart it; then
    both the live client and a late one must pass ``check``."""
    log = tmp_path / "relay.log"
    with _Sampler().running() as sampler:
        relay = _start(args, log, sampler)
        start = get_json(relay.url + "/stats")["min_scn"]
        live = ReplicaConsumer()
        client = Client(
            ClientConfig(relays=(relay.url,), since_scn=start, retry=RetryPolicy(max_s=0.2)),
            live,
            FileCheckpointStore(tmp_path / "ckpt"),
        )
        runner = threading.Thread(target=client.run, daemon=True)
        runner.start()
        try:
            # The relay's memory serving, warm: after a transaction of a few parts went through
            # (pools and buffers its first parts start belong to the base, not the growth)
            write(WARM)
            wait_for(
                lambda: get_json(relay.url + "/stats")["max_scn"] > start,
                120,
                "the warm-up transaction captured",
            )
            warm_scn = get_json(relay.url + "/stats")["max_scn"]
            wait_for(lambda: live.scn >= warm_scn, 120, "the warm-up transaction delivered")
            base = _anon_rss(sampler.pid)
            write(ROWS)
            wait_for(
                lambda: (
                    get_json(relay.url + "/stats")["window_files"]["receiving_bytes"] > 40 << 20
                ),
                300,
                "the relay to be receiving the big transaction",
            )
            relay.kill()  # mid-transaction: part of it is in windows/open.tmp
            relay = _start(args, log, sampler)
            big = 2 * get_json(relay.url + "/stats")["buffer_capacity"]
            wait_for(lambda: _held(relay.url, big), 300, "the big window held")
            stats = get_json(relay.url + "/stats")
            assert stats["window_files"]["windows"] >= 1
            assert stats["window_files"]["bytes"] > 2 * stats["buffer_capacity"]
            wait_for(lambda: live.scn >= stats["max_scn"], 300, "the live client")
            check(live)
            late = ReplicaConsumer()
            consume(relay.url, late, since_scn=start)
            check(late)
        finally:
            client.stop()
            runner.join(timeout=60)
            relay.stop()
    # The transaction (~230 MB of events) passed through; the relay's own heap did not hold it.
    grown = sampler.peak - base
    print(f"relay anonymous RSS: {base >> 20} MiB serving, peak {sampler.peak >> 20} MiB")
    assert grown < 64 << 20, f"relay anonymous RSS grew by {grown:,} bytes"


def test_mariadb_transaction_of_3x_the_buffer_through_a_relay_sigkill(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.wide"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE wide (id INT PRIMARY KEY, n BIGINT, pad VARCHAR(200))")
        cur.execute(f"INSERT INTO wide SELECT seq, seq, '{PAD}' FROM seq_1_to_{ROWS}")
    conn.commit()
    args = ["--source", mariadb.url, "--port", str(free_port())]
    args += ["--data-dir", str(tmp_path / "relay")]
    args += ["--table", source]

    def write(rows: int) -> None:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE wide SET n = n + 1, pad = CONCAT('u', pad) WHERE id <= {rows}")
            if rows == ROWS:
                cur.execute(
                    f"INSERT INTO wide SELECT seq, seq, '{PAD}' FROM seq_{ROWS + 1}_to_{2 * ROWS}"
                )
            cur.execute("COMMIT")

    _through_a_kill(args, tmp_path, write, lambda r: assert_replica_equals(r, conn, [source]))


def test_postgres_transaction_of_3x_the_buffer_through_a_relay_sigkill(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE wide (id int PRIMARY KEY, n bigint, pad text)")
        cur.execute(f"INSERT INTO wide SELECT g, g, '{PAD}' FROM generate_series(1, {ROWS}) g")
    args = [
        "--source",
        postgres.source_url(pg_database, slot=f"big_{pg_database}"),
        "--port",
        str(free_port()),
    ]
    args += ["--data-dir", str(tmp_path / "relay"), "--table", "public.wide"]

    def write(rows: int) -> None:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE wide SET n = n + 1, pad = 'u' || pad WHERE id <= {rows}")
            if rows == ROWS:
                cur.execute(
                    f"INSERT INTO wide SELECT g, g, '{PAD}' FROM generate_series({ROWS + 1}, "
                    f"{2 * ROWS}) g"
                )
            cur.execute("COMMIT")

    def check(replica: ReplicaConsumer) -> None:
        with conn.cursor() as cur:
            cur.execute("SELECT id, n, pad FROM wide")
            truth = {
                json.dumps({"id": i}, separators=(",", ":")): {"id": i, "n": n, "pad": p}
                for i, n, p in cur
            }
        mine = replica.snapshot("public.wide")
        assert len(mine) == len(truth) == 2 * ROWS
        assert mine == truth

    _through_a_kill(args, tmp_path, write, check)
    conn.close()


def test_a_consumer_killed_inside_a_big_window_gets_it_whole_again(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    """``sluice tail`` SIGKILLed while it writes a window held in a file: its checkpoint is
    still before the window, so the restarted tail writes the whole window again."""
    source = f"{database}.wide"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE wide (id INT PRIMARY KEY, n BIGINT, pad VARCHAR(200))")
    args = ["--source", mariadb.url, "--port", "0", "--data-dir", str(tmp_path / "relay")]
    args += ["--table", source, "--buffer-size", str(1 << 20)]
    args += ["--window-files-bytes", str(64 << 20)]
    relay = RelayProcess(args, tmp_path / "relay.log").start()
    tail = [*SLUICE, "tail", "--relay", relay.url, "--checkpoint-dir", str(tmp_path / "ckpt")]
    start = str(get_json(relay.url + "/stats")["min_scn"])
    outputs = [tmp_path / "out1.jsonl", tmp_path / "out2.jsonl"]
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO wide VALUES (0, 0, 'before')")
            cur.execute(f"INSERT INTO wide SELECT seq, seq, '{PAD}' FROM seq_1_to_100000")
            cur.execute("INSERT INTO wide VALUES (100001, 0, 'after')")
        wait_for(lambda: _held(relay.url), 120, "the big window held")
        with outputs[0].open("w") as out:
            first = subprocess.Popen([*tail, "--since-scn", start], stdout=out)
            wait_for(lambda: outputs[0].stat().st_size > 2 << 20, 120, "tail inside the window")
            first.kill()
            first.wait()
        lines = outputs[0].read_text().count("\n")
        assert 1 < lines < 100_002  # killed inside the big window
        with outputs[1].open("w") as out:
            second = subprocess.run(
                [*tail, "--until-caught-up"], stdout=out, timeout=300, check=False
            )
        assert second.returncode == 0
    finally:
        relay.stop()
    again = [json.loads(line)["key"]["id"] for line in outputs[1].read_text().splitlines()]
    assert again == list(range(1, 100_002))  # the whole window, then the one after
