"""A randomized workload over every column type streams into a replica equal to the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymysql

from sluice.client import FileCheckpointStore
from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread, ReplicaConsumer
from tests.integration.support import (
    assert_replica_equals,
    consume,
    relay_config,
    wait_relay_caught_up,
)
from tests.integration.workload import Workload

TABLES = ["alltypes", "person", "orders"]


def test_random_workload_replica_equals_source(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    Workload.create(conn)
    sources = [f"{database}.{t}" for t in TABLES]
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        Workload(conn, seed=11).run(120)
        wait_relay_caught_up(relay.url, conn)
        replica = ReplicaConsumer()
        store = FileCheckpointStore(tmp_path / "ckpt")
        scn = consume(relay.url, replica, store)
        assert_replica_equals(replica, conn, sources)
        assert store.load() is not None and store.load().scn == scn  # type: ignore[union-attr]
        assert replica.events > 2000


def test_windows_are_whole_transactions_in_scn_order(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    Workload.create(conn)
    sources = [f"{database}.{t}" for t in TABLES]
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute("BEGIN")
            for i in range(5):
                cur.execute("INSERT INTO person VALUES (%s, 'a', 1, NULL)", (i,))
            cur.execute("COMMIT")
            cur.execute("BEGIN")
            cur.execute("INSERT INTO person VALUES (100, 'rolled back', 1, NULL)")
            cur.execute("ROLLBACK")
            cur.execute("UPDATE person SET id = 50 WHERE id = 4")
            cur.execute("DELETE FROM person WHERE id = 0")
        wait_relay_caught_up(relay.url, conn)
        recorder = RecordingConsumer()
        consume(relay.url, recorder)
    windows = recorder.windows
    assert [len(w.events) for w in windows] == [5, 2, 1]
    assert [w.scn for w in windows] == sorted({w.scn for w in windows})
    assert all(e.scn == w.scn for w in windows for e in w.events)
    assert all(e.after is None or e.after["name"] != "rolled back" for e in recorder.events)
    moved = windows[1].events
    assert (moved[0].op, moved[0].key, moved[1].op, moved[1].key) == (
        "d",
        {"id": 4},
        "c",
        {"id": 50},
    )
    assert windows[2].events[0].op == "d" and windows[2].events[0].before["id"] == 0  # type: ignore[index]


def test_non_transactional_changes_survive_a_rollback(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    """MyISAM changes inside a rolled-back transaction stay in the table: the replica keeps
    them too, and the InnoDB changes of that transaction never appear."""
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE inno (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute("CREATE TABLE isam (id INT PRIMARY KEY) ENGINE=MyISAM")
    sources = [f"{database}.inno", f"{database}.isam"]
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        with conn.cursor() as cur:
            for n, end in ((1, "ROLLBACK"), (2, "ROLLBACK"), (3, "COMMIT")):
                cur.execute("BEGIN")
                first, second = ("inno", "isam") if n % 2 else ("isam", "inno")
                cur.execute(f"INSERT INTO {first} VALUES (%s)", (n,))
                cur.execute(f"INSERT INTO {second} VALUES (%s)", (n,))
                cur.execute(end)
        wait_relay_caught_up(relay.url, conn)
        replica = ReplicaConsumer()
        consume(relay.url, replica)
    assert_replica_equals(replica, conn, sources)
    assert len(replica.snapshot(f"{database}.isam")) == 3
    assert len(replica.snapshot(f"{database}.inno")) == 1
