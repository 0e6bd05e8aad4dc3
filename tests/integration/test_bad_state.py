"""Bad state in the relay's data dir: a clear line naming the file, or a recovery that keeps
every valid window (issue 11)."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pymysql

from sluice.relay.store import BUFFER_FILE, STATE_FILE
from sluice.testing import (
    PrivateMariaDB,
    RecordingConsumer,
    RelayProcess,
    RelayThread,
    ReplicaConsumer,
)
from tests.integration.support import (
    assert_replica_equals,
    consume,
    get_json,
    relay_config,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)


def test_a_state_file_that_is_a_directory_is_one_clear_line(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    data = tmp_path / "relay"
    (data / STATE_FILE).mkdir(parents=True)
    result = run_sluice(
        "relay",
        "--source",
        mariadb.url,
        "--table",
        f"{database}.t",
        "--data-dir",
        str(data),
        "--port",
        "0",
    )
    assert result.returncode == 2
    assert f"{data / STATE_FILE} is not a file: move it away" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_state_file_ahead_of_an_intact_buffer_never_wipes_it(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.kv"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kv (k INT PRIMARY KEY, v INT)")
    config = relay_config(mariadb, [source], tmp_path / "relay")
    with RelayThread(config) as relay:
        with conn.cursor() as cur:
            for k in range(30):
                cur.execute("INSERT INTO kv VALUES (%s, %s)", (k, k))
        wait_relay_caught_up(relay.url, conn)
        before = get_json(relay.url + "/stats")
    state = tmp_path / "relay" / STATE_FILE
    state.write_text(json.dumps({"max_scn": before["max_scn"] + 10**9}))  # from the future
    with RelayThread(config) as relay:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO kv VALUES (100, 100)")
        wait_relay_caught_up(relay.url, conn)
        after = get_json(relay.url + "/stats")
        replica = ReplicaConsumer()
        consume(relay.url, replica, since_scn=before["min_scn"])
    assert after["min_scn"] == before["min_scn"] and after["windows"] == before["windows"] + 1
    assert_replica_equals(replica, conn, [source])


def _relay_args(mariadb: PrivateMariaDB, source: str, data: Path) -> list[str]:
    return ["relay", "--source", mariadb.url, "--table", source, "--data-dir", str(data)]


def test_a_missing_or_altered_schema_file_is_refused_at_start(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.kv"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kv (k INT PRIMARY KEY, v VARCHAR(10))")
    data = tmp_path / "relay"
    with RelayThread(relay_config(mariadb, [source], data)) as relay:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO kv VALUES (1, 'a'), (2, 'b')")
        wait_relay_caught_up(relay.url, conn)
    (avsc,) = (data / "schemas").glob("*/v1.avsc")
    original = avsc.read_text()
    altered = json.loads(original)
    altered["fields"].reverse()  # still a valid schema: consumers would misread every row
    avsc.write_text(json.dumps(altered))
    result = run_sluice(*_relay_args(mariadb, source, data), "--port", "0")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{avsc} differs from the schema the relay wrote" in lines[0]
    avsc.unlink()
    result = run_sluice(*_relay_args(mariadb, source, data), "--port", "0")
    assert result.returncode == 2, result.stderr
    assert f"{avsc} is missing" in result.stderr and "restore it" in result.stderr
    avsc.write_text(original)  # restored: the relay starts and serves every row again
    with RelayThread(relay_config(mariadb, [source], data)) as relay:
        replica = ReplicaConsumer()
        consume(relay.url, replica, since_scn=get_json(relay.url + "/stats")["min_scn"])
    assert_replica_equals(replica, conn, [source])


def test_a_buffer_file_truncated_to_0_bytes_is_a_logged_drop(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    """Issue 40: an ``events.buf`` truncated to 0 bytes (a crash on a full disk) stopped the
    relay with a bare ``ValueError: cannot mmap an empty file``. Its history is dropped with a
    WARNING saying why, shown in /stats, and capture resumes after the persisted SCN."""
    source = f"{database}.kv"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kv (k INT PRIMARY KEY, v INT)")
    data = tmp_path / "relay"
    args = ["--source", mariadb.url, "--table", source, "--port", "0", "--data-dir", str(data)]
    relay = RelayProcess(args, tmp_path / "relay.log").start()
    try:
        with conn.cursor() as cur:
            for k in range(20):
                cur.execute("INSERT INTO kv VALUES (%s, %s)", (k, k))
        wait_relay_caught_up(relay.url, conn)
        wait_for(
            lambda: (
                get_json(relay.url + "/stats")["persist"]["persisted_scn"]
                == get_json(relay.url + "/stats")["max_scn"]
            ),
            30,
            "the state saved",
        )
        before = get_json(relay.url + "/stats")
    finally:
        relay.stop()
    os.truncate(data / BUFFER_FILE, 0)
    relay = RelayProcess(args, tmp_path / "relay.log").start()
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO kv VALUES (100, 100)")
        wait_relay_caught_up(relay.url, conn)
        after = get_json(relay.url + "/stats")
        assert "0 bytes long, too short to be a buffer" in after["buffer_lost"]
        assert after["min_scn"] == before["max_scn"] and after["windows"] == 1
        assert "sluice_relay_buffer_lost 1" in _text(relay.url + "/metrics")
        recorded = RecordingConsumer()
        consume(relay.url, recorded, since_scn=after["min_scn"])
        assert [e.key for e in recorded.events] == [{"k": 100}]
    finally:
        relay.stop()
    log = (tmp_path / "relay.log").read_text()
    warning = [line for line in log.splitlines() if "too short to be a buffer" in line]
    assert len(warning) == 1 and "WARNING" in warning[0], warning
    assert "its windows are dropped" in warning[0]
    assert "Traceback" not in log and "ValueError" not in log


def _text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return str(resp.read().decode())
