"""Spark Connect: the ``sluice`` source (streaming and batch, generic and typed rows) and the
bootstrap job (seed by Spark's JDBC source and by the row path, the fold) from a Connect client
against a real Connect server (``start-connect-server.sh``), with the same results as a
classic session."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.bootstrap.reader import snapshot_rows
from sluice.bootstrap.store import BootstrapStore
from sluice.capture.mysql.metadata import end_scn
from sluice.capture.source import seed_jars
from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread, key_text
from sluice.testing.mariadb import free_port
from sluice.testing.spark_connect import PrivateConnectServer
from sluice.testing.truth import table_rows
from tests.integration.support import (
    consume,
    relay_config,
    run_sluice,
    wait_relay_caught_up,
    workload_relay,
)

TABLES = ["alltypes", "person", "orders"]


@pytest.fixture(scope="module")
def connect_url() -> Iterator[str]:
    # The MariaDB JDBC driver on the server's classpath: seeds take Spark's JDBC path there.
    with PrivateConnectServer(jars=seed_jars("mysql://localhost")) as server:
        yield server.url


@pytest.fixture(scope="module")
def remote(connect_url: str) -> Iterator[Any]:
    # Connect's own builder: pyspark's refuses a remote session next to the classic one the
    # `spark` fixture keeps in this process.
    from pyspark.sql.connect.session import SparkSession

    from sluice.spark import register

    session = SparkSession.builder.remote(connect_url).getOrCreate()
    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def relay_db(
    mariadb: PrivateMariaDB, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RelayThread, pymysql.Connection[Any]]]:
    data = tmp_path_factory.mktemp("relay") / "data"
    with workload_relay(mariadb, "conn", TABLES, data, seed=27, transactions=40) as made:
        yield made[0], made[1]


def _stream(spark: Any, out: Path, **options: str) -> None:
    (
        spark.readStream.format("sluice")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )


def _rows(spark: Any, path: Path) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in spark.read.parquet(str(path)).collect())


def test_the_source_streams_and_reads_over_connect_as_in_classic_mode(
    relay_db: tuple[RelayThread, pymysql.Connection[Any]],
    remote: Any,
    spark: Any,
    tmp_path: Path,
) -> None:
    relay, _conn = relay_db
    recorder = RecordingConsumer()
    consume(relay.url, recorder)
    expected = Counter((e.scn, e.source, key_text(e.key), e.op) for e in recorder.events)
    assert expected

    # Streaming into Parquet from the Connect client, then from a classic session: the same
    # rows, every relay event once.
    _stream(remote, tmp_path / "connect", relay=relay.url, partitions="2")
    _stream(spark, tmp_path / "classic", relay=relay.url, partitions="2")
    over_connect = _rows(spark, tmp_path / "connect" / "data")
    assert over_connect == _rows(spark, tmp_path / "classic" / "data")
    seen = Counter(
        (r[0], r[1], key_text(json.loads(r[4])) if r[4] else "null", r[2]) for r in over_connect
    )
    assert seen == expected

    # Batch reads: generic rows, and one table's own typed columns.
    generic = remote.read.format("sluice").option("relay", relay.url).load()
    assert Counter(tuple(r) for r in generic.collect()) == over_connect
    typed = {"relay": relay.url, "sources": "conn.person", "typed": "true"}
    remote_typed = remote.read.format("sluice").options(**typed).load()
    classic_typed = spark.read.format("sluice").options(**typed).load()
    assert remote_typed.schema == classic_typed.schema
    got = Counter(tuple(r) for r in remote_typed.collect())
    assert got == Counter(tuple(r) for r in classic_typed.collect())
    assert sum(got.values()) == sum(n for k, n in expected.items() if k[1] == "conn.person")


def _fill(conn: pymysql.Connection[Any], table: str, rows: int) -> None:
    with conn.cursor() as cur:
        cur.execute(
            f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name VARCHAR(40), "
            "price DECIMAL(10,2), at DATETIME(3))"
        )
        cur.execute(
            f"INSERT INTO {table} SELECT seq, CONCAT('n-', seq), seq / 7, "
            f"'2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_{rows}"
        )


def test_bootstrap_run_and_seed_over_connect(
    mariadb: PrivateMariaDB, database: str, connect_url: str, tmp_path: Path
) -> None:
    conn = mariadb.connect(database)
    _fill(conn, "fast", 3000)
    _fill(conn, "rowpath", 2000)
    fast, rowpath = f"{database}.fast", f"{database}.rowpath"
    config = relay_config(mariadb, [fast, rowpath], tmp_path / "relay")
    with RelayThread(config) as relay:
        with conn.cursor() as cur:
            cur.execute("UPDATE fast SET name = 'changed' WHERE id <= 10")
            cur.execute("DELETE FROM fast WHERE id > 2990")
        wait_relay_caught_up(relay.url, conn)
        store = tmp_path / "store"
        # `bootstrap run --seed`: seeds through Spark's JDBC source on the Connect server,
        # logs the relay's events, folds.
        result = run_sluice(
            "bootstrap", "run", "--relay", relay.url, "--source", fast, "--store", str(store),
            "--seed", mariadb.url, "--chunk-rows", "1000", "--once", "--master", connect_url,
            timeout=600,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert snapshot_rows(BootstrapStore(str(store)), fast) == table_rows(conn, fast)

        # `bootstrap seed --no-jdbc`: every chunk by the row path, as Spark tasks.
        other = BootstrapStore(str(tmp_path / "other"))
        other.create(end_scn(conn), (rowpath,))
        seeded = run_sluice(
            "bootstrap", "seed", "--source", mariadb.url, "--table", rowpath,
            "--store", other.uri, "--chunk-rows", "500", "--no-jdbc", "--master", connect_url,
            timeout=600,
        )  # fmt: skip
        assert seeded.returncode == 0, seeded.stderr
        assert f"seeded {rowpath}: 2000 rows in 4 chunks" in seeded.stdout, seeded.stdout
        assert snapshot_rows(other, rowpath) == table_rows(conn, rowpath)
    conn.close()


def test_an_unreachable_connect_server_is_one_sentence(tmp_path: Path) -> None:
    """Spark's Connect client would retry for minutes; the CLI says at once what is wrong."""
    store = BootstrapStore(str(tmp_path / "store"))
    store.create(0, ("shop.t",))
    port = free_port()  # nothing listens there
    result = run_sluice(
        "bootstrap", "compact", "--store", store.uri, "--master", f"sc://127.0.0.1:{port}",
        timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"cannot reach a Spark Connect server at 127.0.0.1:{port}" in result.stderr, (
        result.stderr
    )
