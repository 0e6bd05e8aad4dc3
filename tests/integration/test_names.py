"""Databases and tables whose names hold dots, dashes and other characters (quoted with
backquotes): captured, filtered by name, and printed back the same way."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

from sluice.bootstrap.job import BootstrapJob, JobConfig
from sluice.bootstrap.server import BootstrapServer
from sluice.client import Client, ClientConfig
from sluice.testing import PrivateMariaDB, RelayThread, ReplicaConsumer, ServiceThread
from sluice.testing.truth import table_rows
from tests.integration.support import (
    SLUICE,
    consume,
    get_json,
    relay_config,
    wait_relay_caught_up,
)

DOTTED = "`topic-name.sanitization-it`.`DBZ.1834`"


def test_quoted_names_are_captured_and_named_back_the_same_way(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE `topic-name.sanitization-it`")
        cur.execute(f"CREATE TABLE {DOTTED} (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"CREATE TABLE `{database}`.`t.2` (id INT PRIMARY KEY, v INT)")
        cur.execute(f"CREATE TABLE `{database}`.`some|test@data` (id INT PRIMARY KEY)")
    other, odd = f"{database}.`t.2`", f"{database}.`some|test@data`"
    tables = [DOTTED, f"`{database}`.`t.2`", f"{database}.some|test@data"]  # any spelling
    with RelayThread(relay_config(mariadb, tables, tmp_path / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {DOTTED} VALUES (1, 'a'), (2, 'b')")
            cur.execute(f"INSERT INTO `{database}`.`t.2` VALUES (1, 10)")
            cur.execute(f"INSERT INTO `{database}`.`some|test@data` VALUES (7)")
            cur.execute(f"UPDATE {DOTTED} SET v = 'c' WHERE id = 2")
        wait_relay_caught_up(relay.url, conn)
        names = {s["source"] for s in get_json(relay.url + "/sources")["sources"]}
        assert names == {DOTTED, other, odd}
        replica = ReplicaConsumer()
        consume(relay.url, replica)
        for source in names:
            assert replica.snapshot(source) == table_rows(conn, source) != {}
        only = ReplicaConsumer()
        consume(relay.url, only, sources=(DOTTED,))
        assert set(only.rows) == {DOTTED}
        quoted = urllib.parse.quote(DOTTED, safe="")
        assert len(get_json(f"{relay.url}/schemas/{quoted}")["versions"]) == 1
        tail = subprocess.run(
            [
                *SLUICE,
                "tail",
                "--relay",
                relay.url,
                "--source",
                "`" + database + "`.`t.2`",
                "--since-scn",
                str(get_json(relay.url + "/stats")["min_scn"]),
                "--until-caught-up",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert tail.returncode == 0, tail.stderr
        events = [json.loads(line) for line in tail.stdout.splitlines()]
        assert [e["source"] for e in events] == [other]
    conn.close()


def test_quoted_names_go_through_seed_store_and_bootstrap_server(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Names with characters that paths and URIs treat specially (`:`, `/`, `#`, `%`)."""
    conn = mariadb.connect(database)
    odd = f"{database}.`t:1/x#%`"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE `t:1/x#%` (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute("CREATE TABLE `t.2` (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO `t:1/x#%` SELECT seq, 'old' FROM seq_1_to_50")
        cur.execute("INSERT INTO `t.2` SELECT seq, seq FROM seq_1_to_50")
    sources = (odd, f"{database}.`t.2`")
    store = str(tmp_path / "store")
    with RelayThread(relay_config(mariadb, list(sources), tmp_path / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute("UPDATE `t:1/x#%` SET v = 'new' WHERE id <= 5")
            cur.execute("DELETE FROM `t.2` WHERE id <= 5")
        wait_relay_caught_up(relay.url, conn)
        seed = mariadb.url
        BootstrapJob(JobConfig((relay.url,), sources, store, once=True, seed=seed), spark).run()
        with ServiceThread(BootstrapServer(store, port=0)) as server:
            stats = get_json(server.url + "/stats")
            assert set(stats["tables"]) == set(sources)
            replica = ReplicaConsumer()
            config = ClientConfig(relays=(relay.url,), since_scn=0, bootstrap=server.url)
            Client(config, replica).run(until_caught_up=True)
    for source in sources:
        assert replica.snapshot(source) == table_rows(conn, source)
    assert len(replica.snapshot(odd)) == 50
    conn.close()
