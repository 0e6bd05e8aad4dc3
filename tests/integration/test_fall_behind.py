"""A bootstrap job that falls behind the relay's buffer recovers by itself: `serve` started
before the store exists waits for it; `run` SIGKILLed while the relay laps its small buffer
many times is restarted and reads the missing range through the relay's cold read."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from sluice.client import Client, ClientConfig
from sluice.core.checkpoint import Online
from sluice.testing import PrivateMariaDB, RelayThread, ReplicaConsumer
from sluice.testing.mariadb import free_port
from sluice.testing.truth import table_rows
from tests.integration.support import (
    SLUICE,
    assert_replica_equals,
    get_json,
    http_status,
    relay_config,
    wait_for,
    wait_relay_caught_up,
)


def _workload(conn: Any, start: int, transactions: int) -> None:
    with conn.cursor() as cur:
        for n in range(start, start + transactions):
            cur.execute("BEGIN")
            cur.execute("INSERT INTO kv VALUES (%s, %s, %s)", (n, "v" * 300, n % 10))
            cur.execute("UPDATE kv SET grp = grp + 1 WHERE k = %s", (n // 2,))
            if n % 5 == 0:
                cur.execute("DELETE FROM kv WHERE k = %s", (n // 3,))
            if n % 7 == 0:
                cur.execute("UPDATE IGNORE kv SET k = k + 1000000 WHERE k = %s", (n // 4,))
            cur.execute("COMMIT")


def _spawn(*args: str, log: Path) -> subprocess.Popen[str]:
    with log.open("a") as handle:
        return subprocess.Popen(
            [*SLUICE, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )


def test_a_killed_job_behind_the_buffer_recovers_and_consumers_converge(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kv (k INT PRIMARY KEY, body VARCHAR(400), grp INT)")
        cur.execute(  # rows from before the relay: only the seed brings them
            "INSERT INTO kv SELECT seq + 5000000, 'old', 0 FROM seq_1_to_500"
        )
    source, store = f"{database}.kv", str(tmp_path / "store")
    port = free_port()
    serve_log = tmp_path / "serve.log"
    serve = _spawn("bootstrap", "serve", "--store", store, "--port", str(port), log=serve_log)
    config = relay_config(mariadb, [source], tmp_path / "relay", buffer_size=64 * 1024)
    job: subprocess.Popen[str] | None = None
    try:
        # `serve` first, so it is surely up before the store exists (the job creates it at once).
        wait_for(lambda: "waiting for the bootstrap store" in serve_log.read_text(), 30, "wait")
        with RelayThread(config) as relay:
            start = get_json(relay.url + "/stats")["min_scn"]
            run = ["bootstrap", "run", "--relay", relay.url, "--source", source, "--store", store]
            job = _spawn(
                *run,
                *("--seed", mariadb.url, "--trigger-seconds", "0.5", "--fold-every", "3"),
                log=tmp_path / "1.log",
            )
            marker = tmp_path / "store" / "sluice-store.json"
            wait_for(marker.exists, 120, "the job to create its store")
            assert json.loads(marker.read_text())["log_start_scn"] == start
            _workload(conn, 0, 200)
            boot = f"http://127.0.0.1:{port}"
            wait_for(lambda: _up(boot), 120, "serve to start")
            seeded = tmp_path / "store" / "seeds" / source / "SEEDED"
            wait_for(seeded.exists, 120, "the seed")
            wait_for(lambda: get_json(boot + "/stats")["max_scn"] > start, 120, "the job to log")
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
            logged = get_json(boot + "/stats")["max_scn"]

            writer = threading.Thread(target=_workload, args=(conn, 200, 1500))
            writer.start()
            writer.join()
            wait_relay_caught_up(relay.url, conn)
            assert get_json(relay.url + "/stats")["min_scn"] > logged  # lapped many times

            again = subprocess.run(
                [*SLUICE, *run, "--once"], capture_output=True, text=True, timeout=300, check=False
            )
            assert again.returncode == 0, again.stderr
            assert "Traceback" not in again.stderr and "WARN" not in again.stderr
            relay_max = get_json(relay.url + "/stats")["max_scn"]
            stats = get_json(boot + "/stats")
            assert stats["max_scn"] == relay_max and stats["snapshot_scn"] == relay_max
            assert get_json(relay.url + "/stats")["cold_reads"] == 0

            fresh = ReplicaConsumer()
            Client(ClientConfig(relays=(relay.url,), since_scn=0, bootstrap=boot), fresh).run(
                until_caught_up=True
            )
            assert_replica_equals(fresh, conn, [source])
            behind = ReplicaConsumer()
            Client(ClientConfig(relays=(relay.url,), bootstrap=boot), behind, _at(start)).run(
                until_caught_up=True
            )
            # It started after the pre-existing rows (untouched since): it has every other row.
            truth = table_rows(conn, source)
            changed = {k: v for k, v in truth.items() if json.loads(k)["k"] < 5_000_000}
            assert behind.snapshot(source) == changed and len(truth) - len(changed) == 500
    finally:
        if job is not None and job.poll() is None:  # a failure before the planned kill
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        serve.send_signal(signal.SIGTERM)
        serve.wait(30)
    text = serve_log.read_text()
    assert text.count("waiting for the bootstrap store") == 1
    assert re.search(r"sluice bootstrap serving on http://127.0.0.1:\d+", text)
    assert "Traceback" not in text and serve.returncode == 0
    conn.close()


def _up(url: str) -> bool:
    try:
        return http_status(url + "/healthz")[0] == 200
    except OSError:
        return False


def _at(scn: int) -> Any:
    from sluice.client import MemoryCheckpointStore

    return MemoryCheckpointStore(Online(scn))
