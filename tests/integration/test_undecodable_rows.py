"""A row capture cannot decode never stops the relay's other tables: its table stops at a
transaction boundary (the default), or with on_decode_error = "skip" only that rows event is
skipped. The server is real; only the failure is injected into the decoder of one table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.capture.mysql.tables import TableDecoder
from sluice.testing import PrivateMariaDB, RelayThread, ReplicaConsumer
from tests.integration.support import (
    consume,
    get_json,
    http_status,
    relay_config,
    wait_for,
    wait_relay_caught_up,
)


def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    real = TableDecoder._events

    def failing(self: TableDecoder, event_type: int, body: bytes) -> list[bytes]:
        if b"poison" in body:
            raise ValueError("injected: bytes this decoder cannot read")
        return real(self, event_type, body)

    monkeypatch.setattr(TableDecoder, "_events", failing)


def _workload(conn: pymysql.Connection[Any]) -> None:
    with conn.cursor() as cur:
        cur.execute("INSERT INTO bad VALUES (1, 'fine')")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO good VALUES (1)")
        cur.execute("INSERT INTO bad VALUES (2, 'fine too')")  # same transaction, before it
        cur.execute("INSERT INTO bad VALUES (3, 'poison')")
        cur.execute("COMMIT")
        cur.execute("INSERT INTO good VALUES (2)")
        cur.execute("INSERT INTO bad VALUES (4, 'after')")


@pytest.mark.parametrize("mode", ["stop_source", "skip"])
def test_an_undecodable_row_stops_only_its_table_or_is_skipped(
    mariadb: PrivateMariaDB,
    database: str,
    conn: pymysql.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    bad, good = f"{database}.bad", f"{database}.good"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE bad (id INT PRIMARY KEY, note VARCHAR(20))")
        cur.execute("CREATE TABLE good (id INT PRIMARY KEY)")
    _poison(monkeypatch)
    config = relay_config(mariadb, [bad, good], tmp_path / "relay", on_decode_error=mode)
    with RelayThread(config) as relay:
        _workload(conn)
        wait_relay_caught_up(relay.url, conn)
        replica = ReplicaConsumer()
        consume(relay.url, replica)
        capture = get_json(relay.url + "/stats")["capture"]
        health = http_status(relay.url + "/healthz")
        listed = {s["source"]: s for s in get_json(relay.url + "/sources")["sources"]}
    assert sorted(replica.snapshot(good)) == ['{"id":1}', '{"id":2}']  # the other table goes on
    ids = sorted(row["id"] for row in replica.snapshot(bad).values())
    if mode == "stop_source":
        # Stopped at the transaction boundary before the bad row: row 2 is not half-delivered.
        assert ids == [1]
        message = capture["stopped_sources"][bad]
        assert "injected" in message and bad in message and "binlog" in message
        assert health[0] == 503 and bad in health[1]["stopped_sources"]
        assert listed[bad]["stopped"] == message and listed[good]["stopped"] is None
    else:
        assert ids == [1, 2, 4]  # only the rows event that failed is gone
        assert capture["skipped_events"] == 1 and capture["stopped_sources"] == {}
        assert health[0] == 200


def test_a_table_stopped_inside_a_transaction_handed_over_in_parts_is_read_again_without_it(
    mariadb: PrivateMariaDB,
    database: str,
    conn: pymysql.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bad table's earlier rows of a big transaction already went to the relay in parts
    when its bad row comes: capture reads the transaction again without that table, so no
    half of it is served; the other table's rows of it all are."""
    bad, good = f"{database}.bad", f"{database}.good"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE bad (id INT PRIMARY KEY, note VARCHAR(2000))")
        cur.execute("CREATE TABLE good (id INT PRIMARY KEY, note VARCHAR(2000))")
    _poison(monkeypatch)
    config = relay_config(mariadb, [bad, good], tmp_path / "relay", buffer_size=64 * 1024)
    with RelayThread(config) as relay:  # parts of 8 KiB
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            for i in range(60):  # ~120 KB, many parts, before the bad row
                cur.execute("INSERT INTO bad VALUES (%s, %s)", (i, "x" * 2000))
                cur.execute("INSERT INTO good VALUES (%s, %s)", (i, "y" * 2000))
            cur.execute("INSERT INTO bad VALUES (1000, 'poison')")
            cur.execute("COMMIT")
            cur.execute("INSERT INTO good VALUES (1000, 'after')")
        target = wait_relay_caught_up(relay.url, conn)
        wait_for(lambda: get_json(relay.url + "/stats")["max_scn"] >= target, 30, "the buffer")
        replica = ReplicaConsumer()
        consume(relay.url, replica)
        capture = get_json(relay.url + "/stats")["capture"]
    assert replica.snapshot(bad) == {}
    assert len(replica.snapshot(good)) == 61
    assert bad in capture["stopped_sources"] and capture["reconnects"] >= 1
