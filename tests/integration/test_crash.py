"""SIGKILL the relay, or the consumer, mid-workload: the replica still equals the source."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pymysql

from sluice.client import Client, ClientConfig, FileCheckpointStore, RetryPolicy
from sluice.core.event import Event
from sluice.testing import PrivateMariaDB, RelayProcess, ReplicaConsumer, free_port
from tests.integration.support import SLUICE, assert_replica_equals, get_json, wait_for
from tests.integration.workload import Workload, workload_thread

TABLES = ["alltypes", "person", "orders"]


def _relay_args(db: PrivateMariaDB, sources: list[str], data_dir: Path, port: int) -> list[str]:
    args = ["--source", db.url, "--port", str(port), "--data-dir", str(data_dir)]
    for source in sources:
        args += ["--table", source]
    return args


def _wait_relay_has(relay_url: str, conn: pymysql.Connection[Any]) -> int:
    from sluice.capture.mysql.metadata import end_scn

    target = end_scn(conn)
    wait_for(
        lambda: get_json(relay_url + "/stats")["capture"]["last_scn"] >= target,
        60,
        "relay to catch up",
    )
    return int(get_json(relay_url + "/stats")["max_scn"])


def test_relay_sigkill_mid_workload(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    Workload.create(conn)
    sources = [f"{database}.{t}" for t in TABLES]
    port = free_port()
    args = _relay_args(mariadb, sources, tmp_path / "relay", port)
    relay = RelayProcess(args, tmp_path / "relay.log").start()
    replica = ReplicaConsumer()
    client = Client(
        ClientConfig(relays=(relay.url,), since_scn=None, retry=RetryPolicy(max_s=0.2)),
        replica,
        FileCheckpointStore(tmp_path / "ckpt"),
    )
    runner = threading.Thread(target=client.run, daemon=True)
    runner.start()
    work = workload_thread(mariadb, database, seed=3, count=150)
    try:
        for _ in range(2):
            wait_for(lambda: replica.events > 50, 60, "some events")
            relay.kill()
            relay = RelayProcess(args, tmp_path / "relay.log").start()
        work.join(timeout=120)
        max_scn = _wait_relay_has(relay.url, conn)
        wait_for(lambda: replica.scn >= max_scn, 60, "the client to catch up")
    finally:
        client.stop()
        runner.join(timeout=30)
        relay.stop()
    assert_replica_equals(replica, conn, sources)


def _apply(replica: ReplicaConsumer, path: Path) -> None:
    """Apply a ``sluice tail`` output file; a line cut by SIGKILL is skipped (it is replayed)."""
    lines = path.read_text().splitlines()
    by_scn: dict[int, list[Event]] = {}
    for line in lines:
        try:
            body = json.loads(line)
        except ValueError:
            continue
        by_scn.setdefault(body["scn"], []).append(Event(**body))
    for scn, events in by_scn.items():
        replica.on_window_start(scn)
        for event in events:
            replica.on_event(event)
        from sluice.core.event import Window

        replica.on_window_end(Window(scn, events[0].ts_ms, tuple(events)))


def test_consumer_sigkill_resumes_from_checkpoint(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    Workload.create(conn)
    sources = [f"{database}.{t}" for t in TABLES]
    relay = RelayProcess(
        _relay_args(mariadb, sources, tmp_path / "relay", 0), tmp_path / "relay.log"
    ).start()
    tail = [
        *SLUICE,
        "tail",
        "--relay",
        relay.url,
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
    ]
    outputs = [tmp_path / "out1.jsonl", tmp_path / "out2.jsonl"]
    try:
        work = workload_thread(mariadb, database, seed=5, count=150)
        with outputs[0].open("w") as out:
            first = subprocess.Popen(tail, stdout=out)
            wait_for(lambda: outputs[0].stat().st_size > 20_000, 60, "tail output")
            first.kill()
            first.wait()
        work.join(timeout=120)
        # The first tail may have caught up before its kill on a fast machine: more changes
        # after the kill give the resumed tail something to deliver in every run.
        more = Workload(conn, seed=6)
        more.next_id = 1_000_000  # new rows' ids clear of the first workload's
        more.run(30)
        _wait_relay_has(relay.url, conn)
        with outputs[1].open("w") as out:
            second = subprocess.run(
                [*tail, "--until-caught-up"], stdout=out, timeout=120, check=False
            )
        assert second.returncode == 0
    finally:
        relay.stop()
    replica = ReplicaConsumer()
    for path in outputs:
        _apply(replica, path)
    assert_replica_equals(replica, conn, sources)
    checkpoint = json.loads((tmp_path / "ckpt" / "tail.checkpoint.json").read_text())
    resumed = [json.loads(line)["scn"] for line in outputs[1].read_text().splitlines()]
    assert resumed, "the resumed tail delivered nothing of the changes made after the kill"
    assert checkpoint["scn"] >= max(resumed)
