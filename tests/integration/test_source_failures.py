"""The source goes away (dump connection killed, server SIGKILLed): capture resumes, no loss."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pymysql

from sluice.capture.mysql.describe import describe_table
from sluice.testing import PrivateMariaDB, RelayThread, ReplicaConsumer
from tests.integration.support import (
    assert_replica_equals,
    consume,
    get_json,
    http_status,
    relay_config,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)
from tests.integration.workload import ALL_TYPES_DDL


def _dump_threads(conn: pymysql.Connection[Any]) -> list[int]:
    with conn.cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Binlog Dump'")
        return [int(r[0]) for r in cur.fetchall()]


def test_capture_reconnects_after_its_connection_is_killed(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.kv"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kv (k INT PRIMARY KEY, v INT)")
    with RelayThread(relay_config(mariadb, [source], tmp_path / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO kv VALUES (1, 1)")
            wait_relay_caught_up(relay.url, conn)
            for thread_id in _dump_threads(conn):
                cur.execute(f"KILL {thread_id}")
            for k in range(2, 50):
                cur.execute("INSERT INTO kv VALUES (%s, %s)", (k, k))
        wait_relay_caught_up(relay.url, conn)
        replica = ReplicaConsumer()
        consume(relay.url, replica)
        assert get_json(relay.url + "/stats")["capture"]["reconnects"] >= 1
    assert_replica_equals(replica, conn, [source])


def test_source_sigkill_and_restart(tmp_path: Path) -> None:
    with PrivateMariaDB(tmp_path / "db") as db:
        admin = db.connect()
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE s")
            cur.execute("CREATE TABLE s.kv (k INT PRIMARY KEY, v INT)")
        admin.close()
        with RelayThread(relay_config(db, ["s.kv"], tmp_path / "relay")) as relay:
            conn = db.connect("s")
            with conn.cursor() as cur:
                for k in range(20):
                    cur.execute("INSERT INTO kv VALUES (%s, %s)", (k, k))
            wait_relay_caught_up(relay.url, conn)
            conn.close()
            assert http_status(relay.url + "/healthz")[0] == 200
            # Frozen (SIGSTOP): heartbeats stop, and /healthz says so within seconds.
            assert db._proc is not None
            os.kill(db._proc.pid, signal.SIGSTOP)
            try:
                wait_for(lambda: _health(relay.url) == "source silent", 30, "health: silent")
            finally:
                os.kill(db._proc.pid, signal.SIGCONT)
            wait_for(lambda: _health(relay.url) == "ok", 60, "health: ok again")
            db.kill()
            wait_for(
                lambda: _health(relay.url) in ("source unreachable", "source silent"),
                30,
                "health: unreachable",
            )
            db.start()  # same data dir and port; the binlog rotates to a new file
            conn = db.connect("s")
            with conn.cursor() as cur:
                for k in range(20, 40):
                    cur.execute("INSERT INTO kv VALUES (%s, %s)", (k, k))
                cur.execute("UPDATE kv SET v = -1 WHERE k < 5")
            wait_for(
                lambda: get_json(relay.url + "/stats")["capture"]["connected"],
                60,
                "capture to reconnect",
            )
            wait_relay_caught_up(relay.url, conn)
            replica = ReplicaConsumer()
            consume(relay.url, replica)
            assert_replica_equals(replica, conn, ["s.kv"])
            conn.close()


def _health(url: str) -> str:
    status, body = http_status(url + "/healthz")
    body = json.loads(body) if isinstance(body, bytes) else body
    assert (status == 200) == (body["status"] == "ok")
    return str(body["status"])


def test_schema_generate_matches_the_registered_schema(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.alltypes"
    with conn.cursor() as cur:
        cur.execute(ALL_TYPES_DDL)
    with RelayThread(relay_config(mariadb, [source], tmp_path / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO alltypes (id) VALUES (1)")
        wait_relay_caught_up(relay.url, conn)
        consume(relay.url, ReplicaConsumer())
        registered = get_json(f"{relay.url}/schemas/{source}")["versions"][0]
    result = run_sluice(
        "schema", "generate", "--source", mariadb.url, "--table", source, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == registered
    assert describe_table(conn, source).primary_key == ("id",)
    fields = {f["sluice.column"]: f for f in registered["fields"]}
    assert fields["d1"]["type"] == [
        "null",
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
    ]
    assert fields["dt"]["type"][1] == {"type": "int", "logicalType": "date"}
    assert fields["ts"]["type"][1]["logicalType"] == "timestamp-micros"
    assert (
        fields["u"]["sluice.kind"],
        fields["ip"]["sluice.kind"],
        fields["j"]["sluice.kind"],
    ) == ("uuid", "inet6", "json")
    unknown = run_sluice(
        "schema", "generate", "--source", mariadb.url, "--table", f"{database}.nope", timeout=60
    )
    assert unknown.returncode == 1 and "unknown table" in unknown.stderr
