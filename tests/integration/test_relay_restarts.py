"""Restarting a relay with another buffer size keeps its history (what fits, saying what did
not), and a start SCN it cannot save is refused before capture starts."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread
from tests.integration.support import (
    consume,
    get_json,
    relay_config,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)
from tests.integration.test_relay_limits import _tmpfs


def test_a_new_buffer_size_keeps_the_windows_that_fit(
    mariadb: PrivateMariaDB,
    database: str,
    conn: pymysql.Connection[Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = f"{database}.t"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, body VARBINARY(2000))")
    config = relay_config(mariadb, [source], tmp_path / "relay", buffer_size=1 << 20)
    with RelayThread(config) as relay, conn.cursor() as cur:
        start = get_json(relay.url + "/stats")["min_scn"]
        for i in range(100):  # ~200 KB
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, b"x" * 2000))
        target = wait_relay_caught_up(relay.url, conn)
        wait_for(lambda: get_json(relay.url + "/stats")["max_scn"] >= target, 30, "the buffer")

    bigger = config.model_copy(update={"buffer_size": 4 << 20})
    with RelayThread(bigger) as relay:
        stats = get_json(relay.url + "/stats")
        assert stats["buffer_capacity"] > 4_000_000 and stats["min_scn"] == start
        assert stats["resized"] == {
            "from_bytes": 1 << 20,
            "kept_windows": 100,
            "dropped_windows": 0,
        }
        everything = RecordingConsumer()
        consume(relay.url, everything, since_scn=start)
        assert [e.key["id"] for e in everything.events] == list(range(100))  # type: ignore[index]

    smaller = config.model_copy(update={"buffer_size": 128 * 1024})
    with caplog.at_level(logging.WARNING), RelayThread(smaller) as relay:
        stats = get_json(relay.url + "/stats")
        kept, dropped = stats["resized"]["kept_windows"], stats["resized"]["dropped_windows"]
        assert kept + dropped == 100 and 0 < kept < 100 and stats["windows"] == kept
        newest = RecordingConsumer()
        consume(relay.url, newest, since_scn=stats["min_scn"])
        ids = [e.key["id"] for e in newest.events]  # type: ignore[index]
        assert ids == list(range(100 - kept, 100))
    assert any(
        "oldest windows do not fit" in r.getMessage() and r.levelno == logging.WARNING
        for r in caplog.records
    )


def test_a_start_scn_that_cannot_be_saved_is_refused(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    """``--since-scn`` on a full disk: refused in one line before capture starts, so a later
    restart never begins at the binlog's end and skips what came after that SCN."""
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    with _tmpfs(tmp_path / "small", "3m") as small:
        args = ["relay", "--source", mariadb.url, "--table", f"{database}.t", "--port", "0"]
        args += ["--data-dir", str(small / "r"), "--buffer-size", str(1 << 20)]
        config = relay_config(mariadb, [f"{database}.t"], small / "r", buffer_size=1 << 20)
        with RelayThread(config) as relay:
            since = get_json(relay.url + "/stats")["max_scn"]
        filler = small / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as out:
            while True:
                out.write(b"\0" * (64 << 10))
        result = run_sluice(*args, "--since-scn", str(since), timeout=60)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot save the starting SCN" in lines[0], lines
        assert "free some space" in lines[0]
