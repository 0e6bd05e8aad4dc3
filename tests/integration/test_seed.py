"""Seeding a live database: existing rows of every type, seeded by the Spark job while a
workload updates, deletes, inserts and moves keys; consumers from SCN 0 end equal to the source.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pymysql
import pytest

from sluice.blocking_http import frames
from sluice.bootstrap.job import BootstrapJob, JobConfig
from sluice.bootstrap.seed.job import SeedConfig, SeedJob
from sluice.bootstrap.seed.records import SeedRecords
from sluice.bootstrap.server import BootstrapServer
from sluice.bootstrap.store import GENERATION_SHIFT, BootstrapStore, generation_of
from sluice.client import Client, ClientConfig
from sluice.core.wire import Heartbeat, decode_events, read_window_header
from sluice.testing import PrivateMariaDB, RelayThread, ReplicaConsumer, ServiceThread
from sluice.testing.truth import table_rows
from tests.integration.support import (
    assert_replica_equals,
    get_json,
    relay_config,
    spark_replica_from_scn_0,
    wait_for,
    wait_relay_caught_up,
)
from tests.integration.workload import ALL_TYPES_COLUMNS, ALL_TYPES_DDL, random_all_types

DB = "seedlive"
EXISTING = 100_000
SOURCES = [f"{DB}.alltypes", f"{DB}.orders"]


def _populate(conn: pymysql.Connection[Any]) -> None:
    """100,000 rows of every type (500 random rows, multiplied), 20,000 composite-key orders."""
    rng = random.Random(11)
    cols = ", ".join(ALL_TYPES_COLUMNS)
    with conn.cursor() as cur:
        cur.execute(ALL_TYPES_DDL)
        cur.execute(
            "CREATE TABLE orders (region CHAR(2), num BIGINT UNSIGNED, item VARCHAR(40), "
            "qty SMALLINT, PRIMARY KEY (region, num)) ENGINE=InnoDB"
        )
        for i in range(500):
            row = random_all_types(rng, nulls=i % 2 == 0)
            marks = ", ".join(["%s"] * (len(row) + 1))
            cur.execute(f"INSERT INTO alltypes (id, {cols}) VALUES ({marks})", (i, *row.values()))
        cur.execute(
            f"INSERT INTO alltypes (id, {cols}) SELECT a.id + 500 * s.seq, {cols} "
            f"FROM alltypes a JOIN seq_1_to_{EXISTING // 500 - 1} s"
        )
        cur.execute(
            "INSERT INTO orders SELECT ELT(1 + seq % 3, 'eu', 'us', 'ap'), seq, "
            "CONCAT('item-', seq), seq % 500 FROM seq_1_to_20000"
        )
        cur.execute("COMMIT")


class Writer(threading.Thread):
    """Updates, deletes, inserts and key changes on existing and new rows, until stopped."""

    def __init__(self, conn: pymysql.Connection[Any]) -> None:
        super().__init__(daemon=True)
        self.conn, self.rng = conn, random.Random(3)
        self.stop_event = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self._transaction()
                self.transactions += 1
        except BaseException as exc:
            self.error = exc

    def _transaction(self) -> None:
        rng = self.rng
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 4)):
                target = rng.randrange(EXISTING)
                action = rng.choice(("update", "update", "delete", "insert", "move", "order"))
                if action == "update":
                    row = random_all_types(rng)
                    sets = ", ".join(f"{c}=%s" for c in row)
                    cur.execute(f"UPDATE alltypes SET {sets} WHERE id=%s", (*row.values(), target))
                elif action == "delete":
                    cur.execute("DELETE FROM alltypes WHERE id=%s", (target,))
                elif action == "insert":
                    cur.execute(
                        "INSERT IGNORE INTO alltypes (id, nn) VALUES (%s, 1)",
                        (EXISTING + rng.randrange(10**6),),
                    )
                elif action == "move":  # a primary key change, possibly into another chunk
                    cur.execute(
                        "UPDATE IGNORE alltypes SET id = %s WHERE id = %s",
                        (rng.randrange(EXISTING, 10 * EXISTING), target),
                    )
                else:
                    cur.execute(
                        "UPDATE orders SET qty = qty + 1, num = num + 1000000 "
                        "WHERE region = 'us' AND num = %s",
                        (rng.randrange(20000),),
                    )
            cur.execute("COMMIT")


@pytest.fixture(scope="module")
def seeded(
    mariadb: PrivateMariaDB, tmp_path_factory: pytest.TempPathFactory, spark: Any
) -> Iterator[dict[str, Any]]:
    admin = mariadb.connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DB}")
    admin.close()
    conn = mariadb.connect(DB)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    _populate(conn)
    tmp = tmp_path_factory.mktemp("seed")
    store_dir = str(tmp / "store")
    with RelayThread(relay_config(mariadb, SOURCES, tmp / "relay")) as relay:
        job = BootstrapJob(
            JobConfig((relay.url,), tuple(SOURCES), store_dir, trigger_s=0.5, fold_every_s=4),
            spark,
        )
        job_thread = threading.Thread(target=job.run, daemon=True)
        job_thread.start()
        wait_for(lambda: BootstrapStore(store_dir).exists("sluice-store.json"), 60, "the store")
        writer = Writer(mariadb.connect(DB))
        writer.start()
        seed = SeedJob(SeedConfig(mariadb.url, tuple(SOURCES), store_dir, 12_000))
        seed.prepare()
        report = seed.run(spark)
        writer.stop_event.set()
        writer.join(30)
        assert writer.error is None and writer.transactions > 20
        target = wait_relay_caught_up(relay.url, conn)
        with ServiceThread(BootstrapServer(store_dir, port=0)) as server:
            wait_for(
                lambda: (
                    get_json(server.url + "/stats")["max_scn"]
                    >= get_json(relay.url + "/stats")["max_scn"]
                    >= target
                ),
                120,
                "the bootstrap log to reach the relay",
            )
            job.stop()
            job_thread.join(120)
            assert job.error is None
            yield {
                "relay": relay,
                "server": server,
                "conn": conn,
                "report": report,
                "store": BootstrapStore(store_dir),
                "writer": writer,
            }
    conn.close()


def test_seed_reads_every_chunk_in_parallel_and_records_it(seeded: dict[str, Any]) -> None:
    report, store = seeded["report"], seeded["store"]
    by_source = {s.source: s for s in report.seeded}
    assert set(by_source) == set(SOURCES)
    # 100k rows in chunks of about 12k: ranges come from InnoDB's row estimate, which is
    # approximate (an estimate of 90k gave 8 chunks once), so "several" is what holds
    assert by_source[f"{DB}.alltypes"].chunks >= 5
    assert by_source[f"{DB}.orders"].chunks == 2
    # Chunks were read while the writer ran: at different SCNs, none older than the log.
    assert by_source[f"{DB}.alltypes"].min_scn < by_source[f"{DB}.alltypes"].max_scn
    assert min(s.min_scn for s in report.seeded) >= store.meta().log_start_scn
    assert SeedRecords(store).seeded(f"{DB}.alltypes") == by_source[f"{DB}.alltypes"]
    assert report.snapshot_scn is not None
    assert EXISTING * 0.95 < by_source[f"{DB}.alltypes"].rows < EXISTING * 1.05
    tables = get_json(seeded["server"].url + "/stats")["tables"]
    for source in SOURCES:
        assert tables[source]["seeded"] == by_source[source].to_json()
        assert tables[source]["seed_in_snapshot"] == by_source[source].generation
        assert tables[source]["log"] == {"first_scn": store.meta().log_start_scn, "gaps": []}
        assert tables[source]["snapshot_scn"] == store.current_snapshot()


def test_a_consumer_from_scn_0_gets_whole_tables(seeded: dict[str, Any]) -> None:
    relay, server, conn = seeded["relay"], seeded["server"], seeded["conn"]
    replica = ReplicaConsumer()
    Client(ClientConfig(relays=(relay.url,), since_scn=0, bootstrap=server.url), replica).run(
        until_caught_up=True
    )
    assert len(replica.snapshot(SOURCES[0])) > EXISTING * 0.95
    assert_replica_equals(replica, conn, SOURCES)


def test_spark_read_from_scn_0_equals_the_source(seeded: dict[str, Any], spark: Any) -> None:
    relay, server, conn = seeded["relay"], seeded["server"], seeded["conn"]
    replica = spark_replica_from_scn_0(spark, relay.url, server.url)
    assert "r" in replica["ops"]
    for source in SOURCES:
        assert replica[source] == table_rows(conn, source)


def test_reseeding_one_table_replaces_its_rows_only(
    seeded: dict[str, Any], spark: Any, mariadb: PrivateMariaDB
) -> None:
    """A table seeded again is replaced in the generation the seed publishes (at once, even on
    an idle log: same SCN, a new folder); the other table keeps its rows."""
    store, conn = seeded["store"], seeded["conn"]
    relay, server = seeded["relay"], seeded["server"]
    before = store.current()
    assert before is not None and set(before["seeds"]) == set(SOURCES)
    orders = SOURCES[1]
    # A consumer is in the middle of reading the snapshot when the re-seed republishes it.
    first_hashes, cursor = _snapshot_hashes(server.url, before["scn"], orders, None, first=True)
    again = SeedJob(SeedConfig(mariadb.url, (orders,), store.uri, 5000))
    again.prepare()
    report = again.run(spark)
    rest, _ = _snapshot_hashes(server.url, before["scn"], orders, f"{orders}:{cursor}")
    old = pq.read_table(store.path("snapshots", before["dir"], f"source={orders}"))
    assert cursor >> GENERATION_SHIFT == generation_of(before["dir"])
    # It continues in the generation it started in: every row once, none skipped.
    assert sorted(first_hashes + rest) == sorted(
        h & 0xFFFFFFFF for h in old.column("key_hash").to_pylist()
    )
    assert report.seeded[0].chunks in (4, 5)
    after = store.current()
    assert after is not None and report.snapshot_scn == after["scn"] == before["scn"]
    assert after["dir"] != before["dir"]
    assert store.snapshot_dir(after["scn"]).endswith(after["dir"])
    # No change followed the seed: its chunk files became the generation's files as they are.
    files = sorted(Path(store.path("snapshots", after["dir"], f"source={orders}")).iterdir())
    assert [f.name for f in files] == [
        f"seed-{report.seeded[0].generation:05d}-chunk-{i:05d}.parquet"
        for i in range(report.seeded[0].chunks)
    ]
    assert after["seeds"] == {**before["seeds"], orders: before["seeds"][orders] + 1}
    with conn.cursor() as cur:  # then the log moves on: an ordinary incremental fold
        cur.execute("DELETE FROM orders WHERE region = 'eu' AND num < 100")
        cur.execute("UPDATE orders SET item = 'later' WHERE region = 'ap' AND num < 100")
    job = BootstrapJob(JobConfig((relay.url,), tuple(SOURCES), store.uri, once=True), spark)
    wait_relay_caught_up(relay.url, conn)
    job.run()
    latest = store.current()
    assert latest is not None and latest["scn"] > after["scn"]
    assert latest["seeds"] == after["seeds"]
    replica = ReplicaConsumer()
    Client(ClientConfig(relays=(relay.url,), since_scn=0, bootstrap=server.url), replica).run(
        until_caught_up=True
    )
    assert_replica_equals(replica, conn, SOURCES)


def _snapshot_hashes(
    url: str, scn: int, source: str, after: str | None, first: bool = False
) -> tuple[list[int], int]:
    """Key hashes of the snapshot rows of ``source`` (the first window only, with ``first``)
    and the cursor after the last window read."""
    params = {"snapshot_scn": str(scn), "sources": source}
    if after is not None:
        params["after"] = after
    hashes: list[int] = []
    cursor = -1
    for frame in frames(url, "/snapshot", params):
        if isinstance(frame, Heartbeat):
            break
        hashes += [e.key_hash for e in decode_events(frame)]
        cursor = read_window_header(frame).prev_scn
        if first:
            break
    return hashes, cursor


def test_a_table_added_later_is_logged_from_then_on_and_seeded(
    mariadb: PrivateMariaDB, database: str, tmp_path: Any, spark: Any
) -> None:
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        for name in ("first", "later"):
            cur.execute(f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
            cur.execute(f"INSERT INTO {name} SELECT seq, seq FROM seq_1_to_300")
    first, later = f"{database}.first", f"{database}.later"
    store = str(tmp_path / "store")
    with RelayThread(relay_config(mariadb, [first], tmp_path / "relay")) as relay:
        BootstrapJob(JobConfig((relay.url,), (first,), store, once=True), spark).run()
    with conn.cursor() as cur:
        cur.execute("UPDATE later SET v = -v WHERE id <= 10")  # before the relay sees it
    config = relay_config(mariadb, [first, later], tmp_path / "relay")
    # The server runs throughout: it serves the added table without a restart.
    with ServiceThread(BootstrapServer(store, port=0)) as server, RelayThread(config) as relay:
        assert get_json(server.url + "/sources") == {"sources": [{"source": first}]}
        with conn.cursor() as cur:
            cur.execute("UPDATE later SET v = 0 WHERE id > 290")
            cur.execute("UPDATE first SET v = 0 WHERE id > 290")
        wait_relay_caught_up(relay.url, conn)
        job = BootstrapJob(
            JobConfig((relay.url,), (first, later), store, once=True, seed=mariadb.url),
            spark,
        )
        job.run()
        meta = BootstrapStore(store).meta()
        assert meta.sources == (first, later) and meta.start_of(later) > meta.start_of(first)
        assert len(get_json(server.url + "/sources")["sources"]) == 2
        replica = ReplicaConsumer()
        Client(ClientConfig(relays=(relay.url,), since_scn=0, bootstrap=server.url), replica).run(
            until_caught_up=True
        )
    assert_replica_equals(replica, conn, [first, later])
    conn.close()


def test_the_bootstrap_console_shows_the_store_its_seeds_and_folds(
    seeded: dict[str, Any], browser: Any, tmp_path: Path
) -> None:
    """The bootstrap server's page in headless Chromium: the log's range, the snapshot
    generation it serves, and each table's seed (rows, chunks)."""
    from tests.integration.test_console import shot, text

    server = seeded["server"]
    stats = get_json(server.url + "/stats")
    browser.get(server.url + "/ui")
    wait_for(lambda: text(browser, "#role") == "bootstrap", 30, "the bootstrap page")
    wait_for(lambda: f"{stats['max_scn']:,}" in text(browser, "#log-range"), 30, "the log range")
    assert text(browser, "#snapshot-scn") == f"{stats['snapshot_scn']:,}"
    served = browser.execute_script(
        "return [...document.querySelectorAll('#generations tr[data-generation]')]"
        ".filter(r => r.textContent.includes('served')).length"
    )
    assert served == 1
    for source, table in stats["tables"].items():
        seed = table["seeded"]
        row = f'#source-table tr[data-source="{source}"]'
        chunks = f"{seed['chunks']:,} chunk" + ("" if seed["chunks"] == 1 else "s")
        assert f"{seed['rows']:,} rows in {chunks}" in text(browser, row)
    assert text(browser, "#fold-error") == "none"
    shot(browser, tmp_path, "console-bootstrap")
