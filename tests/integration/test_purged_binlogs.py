"""The source purged the binlogs a stopped bootstrap job had not read: the log records the gap,
the job seeds again, and consumers behind the gap get a clear error (its own file, so the
suite's two workers can run it beside ``test_fall_behind.py``)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from sluice.client import Client, ClientConfig
from sluice.errors import LogGap
from sluice.testing import PrivateMariaDB, RelayThread, ReplicaConsumer
from sluice.testing.mariadb import free_port
from tests.integration.support import (
    assert_replica_equals,
    get_json,
    http_status,
    relay_config,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)
from tests.integration.test_fall_behind import _at, _spawn, _up, _workload


def test_purged_binlogs_become_a_marked_gap_and_the_job_seeds_again(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    """The job was down while the source purged the binlogs it had not read: the log records
    the gap, the job seeds the table again by itself, a new consumer converges, and one behind
    the gap gets a clear error, never a silent hole."""
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kv (k INT PRIMARY KEY, body VARCHAR(400), grp INT)")
        cur.execute("INSERT INTO kv SELECT seq + 5000000, 'old', 0 FROM seq_1_to_300")
    source, store = f"{database}.kv", str(tmp_path / "store")
    config = relay_config(mariadb, [source], tmp_path / "relay", buffer_size=64 * 1024)
    with RelayThread(config) as relay:
        run = ["bootstrap", "run", "--relay", relay.url, "--source", source, "--store", store]
        first = run_sluice(*run, "--seed", mariadb.url, "--once", timeout=300)
        assert first.returncode == 0, first.stderr
        logged = int(json.loads((tmp_path / "store/snapshots/CURRENT").read_text())["scn"])

        _workload(conn, 0, 1200)  # the job is down: the relay laps its buffer
        with conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
        _workload(conn, 1200, 20)
        wait_relay_caught_up(relay.url, conn)
        with conn.cursor() as cur:  # the source drops every binlog the job has not read
            cur.execute("SHOW MASTER STATUS")
            current = cur.fetchone()[0]
            cur.execute(f"PURGE BINARY LOGS TO '{current}'")
        oldest = get_json(relay.url + "/stats")["min_scn"]
        assert oldest > logged
        assert http_status(f"{relay.url}/stream?since_scn={logged}&cold=true")[0] == 410

        again = run_sluice(*run, "--seed", mariadb.url, "--once", timeout=300)
        assert again.returncode == 0, again.stderr
        assert "seeding" in again.stderr and "gap" in again.stderr
        assert "Traceback" not in again.stderr
        relay_max = get_json(relay.url + "/stats")["max_scn"]

        port = free_port()
        serve = _spawn(
            "bootstrap", "serve", "--store", store, "--port", str(port), log=tmp_path / "s.log"
        )
        try:
            boot = f"http://127.0.0.1:{port}"
            wait_for(lambda: _up(boot), 120, "serve to start")
            stats = get_json(boot + "/stats")
            assert stats["snapshot_scn"] == relay_max
            (gap,) = stats["tables"][source]["log"]["gaps"]
            assert logged <= gap[0] < gap[1] <= oldest

            fresh = ReplicaConsumer()
            Client(ClientConfig(relays=(relay.url,), since_scn=0, bootstrap=boot), fresh).run(
                until_caught_up=True
            )
            assert_replica_equals(fresh, conn, [source])

            status, body = http_status(f"{boot}/stream?since_scn={logged}")
            assert status == 410 and body["gap"] == gap
            behind = ReplicaConsumer()
            client = Client(ClientConfig(relays=(relay.url,), bootstrap=boot), behind, _at(logged))
            with pytest.raises(LogGap, match="gap after SCN"):
                client.run(until_caught_up=True)
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(30)
    conn.close()
