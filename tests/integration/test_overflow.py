"""A client behind the buffer gets 410; the relay keeps serving the others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.errors import BootstrapRequired
from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread
from tests.integration.support import (
    consume,
    get_json,
    http_status,
    relay_config,
    run_sluice,
    wait_relay_caught_up,
)


def test_overflow_gives_410_and_others_keep_streaming(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.blob_log"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE blob_log (id INT PRIMARY KEY, body VARBINARY(2000))")
    config = relay_config(mariadb, [source], tmp_path / "relay", buffer_size=64 * 1024)
    with RelayThread(config) as relay, conn.cursor() as cur:
        start = get_json(relay.url + "/stats")["min_scn"]
        for i in range(200):  # ~400 KB through a 64 KB buffer
            cur.execute("INSERT INTO blob_log VALUES (%s, %s)", (i, bytes([i % 256]) * 2000))
        wait_relay_caught_up(relay.url, conn)
        stats = get_json(relay.url + "/stats")
        assert stats["min_scn"] > start and stats["bytes"] <= stats["buffer_capacity"]

        status, body = http_status(f"{relay.url}/stream?since_scn={start}")
        assert status == 410 and body["oldest_scn"] == stats["min_scn"]

        with pytest.raises(BootstrapRequired) as info:
            consume(relay.url, RecordingConsumer(), since_scn=start)
        assert "bootstrap" in str(info.value)

        tail = run_sluice(
            "tail", "--relay", relay.url, "--since-scn", str(start), "--until-caught-up", timeout=60
        )
        assert tail.returncode == 1 and "bootstrap" in tail.stderr
        assert "Traceback" not in tail.stderr

        recent = RecordingConsumer()
        consume(relay.url, recent, since_scn=stats["min_scn"])
        ids = [e.key["id"] for e in recent.events]  # type: ignore[index]
        assert ids == list(range(ids[0], 200)) and len(ids) == stats["events"]
        cur.execute("INSERT INTO blob_log VALUES (1000, 'still capturing')")
        wait_relay_caught_up(relay.url, conn)
        more = RecordingConsumer()
        consume(relay.url, more, since_scn=get_json(relay.url + "/stats")["min_scn"])
        assert more.events[-1].key == {"id": 1000}


def test_window_larger_than_buffer_is_refused_clearly(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.big"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, body VARBINARY(2000))")
    config = relay_config(mariadb, [source], tmp_path / "relay", buffer_size=64 * 1024)
    with RelayThread(config) as relay, conn.cursor() as cur:
        cur.execute("INSERT INTO big VALUES (0, 'small')")
        cur.execute("BEGIN")
        for i in range(1, 100):
            cur.execute("INSERT INTO big VALUES (%s, %s)", (i, b"x" * 2000))
        cur.execute("COMMIT")
        status, health = 200, None
        from tests.integration.support import wait_for

        def unhealthy() -> bool:
            nonlocal status, health
            status, health = http_status(relay.url + "/healthz")
            return status == 503

        wait_for(unhealthy, 30, "the relay to report the refused window")
        assert "--buffer-size" in health["error"]  # type: ignore[index]
        recorder = RecordingConsumer()
        consume(relay.url, recorder)  # still serves what it holds
        assert [e.key for e in recorder.events] == [{"id": 0}]
