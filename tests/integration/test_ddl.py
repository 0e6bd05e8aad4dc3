"""DDL in the middle of the stream: each row decodes with the columns it was written with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymysql

from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread, ReplicaConsumer
from sluice.testing.truth import table_rows
from tests.integration.support import (
    consume,
    get_json,
    relay_config,
    wait_relay_caught_up,
)


def test_add_drop_modify_column_mid_stream(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.item"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE item (id INT PRIMARY KEY, a VARCHAR(10), b INT)")
    with RelayThread(relay_config(mariadb, [source], tmp_path / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO item VALUES (1, 'one', 10)")
            cur.execute("ALTER TABLE item ADD COLUMN c DECIMAL(6,2) DEFAULT 1.50")
            cur.execute("INSERT INTO item VALUES (2, 'two', 20, 2.25)")
            cur.execute("ALTER TABLE item DROP COLUMN b")
            cur.execute("INSERT INTO item VALUES (3, 'three', 3.75)")
            cur.execute("ALTER TABLE item MODIFY COLUMN a VARCHAR(40) NOT NULL")
            cur.execute("INSERT INTO item VALUES (4, 'four', 4.00)")
            cur.execute("UPDATE item SET a = 'uno' WHERE id = 1")
        wait_relay_caught_up(relay.url, conn)
        recorder = RecordingConsumer()
        consume(relay.url, recorder)
        schemas = get_json(f"{relay.url}/schemas/{source}")["versions"]
        replica = ReplicaConsumer()
        consume(relay.url, replica)
    rows = {e.key["id"]: e for e in recorder.events if e.op == "c"}  # type: ignore[index]
    assert rows[1].after == {"id": 1, "a": "one", "b": 10}
    assert rows[2].after == {"id": 2, "a": "two", "b": 20, "c": "2.25"}
    assert rows[3].after == {"id": 3, "a": "three", "c": "3.75"}
    assert rows[4].after == {"id": 4, "a": "four", "c": "4.00"}
    versions = [rows[i].schema_version for i in (1, 2, 3, 4)]
    assert versions == sorted(versions) and len(set(versions)) == 4
    assert [s["sluice.version"] for s in schemas] == [1, 2, 3, 4]
    nullable = {f["sluice.column"]: f["sluice.nullable"] for f in schemas[-1]["fields"]}
    assert nullable["a"] is False
    update = next(e for e in recorder.events if e.op == "u")
    assert update.before == {"id": 1, "a": "one", "c": "1.50"} and update.schema_version == 4
    # DDL rewrites no rows in the binlog: untouched rows keep the image they were written with.
    assert sorted(replica.snapshot(source)) == sorted(table_rows(conn, source))
    assert replica.snapshot(source)['{"id":1}'] == {"id": 1, "a": "uno", "c": "1.50"}


def test_schemas_survive_relay_restart(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.item"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE item (id INT PRIMARY KEY, a INT)")
    config = relay_config(mariadb, [source], tmp_path / "relay")
    with RelayThread(config) as relay, conn.cursor() as cur:
        cur.execute("INSERT INTO item VALUES (1, 1)")
        cur.execute("ALTER TABLE item ADD COLUMN b INT")
        cur.execute("INSERT INTO item VALUES (2, 2, 2)")
        wait_relay_caught_up(relay.url, conn)
    with RelayThread(config) as relay:
        recorder = RecordingConsumer()
        consume(relay.url, recorder)
    assert [e.after for e in recorder.events] == [{"id": 1, "a": 1}, {"id": 2, "a": 2, "b": 2}]
    assert [e.schema_version for e in recorder.events] == [1, 2]
