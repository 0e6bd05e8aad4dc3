"""Zero dates (`sql_mode=''`) in primary keys: captured as JSON null, the relay keeps
capturing every table, and a replica equals the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pymysql

from sluice.testing import PrivateMariaDB, RelayThread, ReplicaConsumer
from sluice.testing.truth import table_rows
from tests.integration.support import consume, get_json, relay_config, wait_relay_caught_up


def test_a_zero_date_in_a_key_is_captured_and_capture_goes_on(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    keyed, other = f"{database}.zkey", f"{database}.other"
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE zkey (id INT, d DATETIME, day DATE, v INT, PRIMARY KEY (id, d, day))"
        )
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)")
    with RelayThread(relay_config(mariadb, [keyed, other], tmp_path / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            cur.execute("INSERT INTO zkey VALUES (1, '0000-00-00 00:00:00', '0000-00-00', 1)")
            cur.execute("INSERT INTO zkey VALUES (1, '2024-01-02 03:04:05', '0000-00-00', 2)")
            cur.execute("INSERT INTO zkey VALUES (2, '0000-00-00 00:00:00', '2024-05-06', 3)")
            cur.execute("UPDATE zkey SET v = v + 10 WHERE id = 1")
            cur.execute("DELETE FROM zkey WHERE id = 2")
            cur.execute("INSERT INTO other VALUES (1, 1)")  # after them: still captured
        wait_relay_caught_up(relay.url, conn)
        assert get_json(relay.url + "/healthz")["status"] == "ok"
        replica = ReplicaConsumer()
        consume(relay.url, replica)
    rows = replica.snapshot(keyed)
    assert rows == table_rows(conn, keyed)
    assert rows['{"d":null,"day":null,"id":1}'] == {"id": 1, "d": None, "day": None, "v": 11}
    assert len(rows) == 2
    assert replica.snapshot(other) == table_rows(conn, other) != {}
