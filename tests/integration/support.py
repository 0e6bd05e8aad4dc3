"""Helpers for integration tests: relays, waiting on conditions, comparing replicas."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql

from sluice.capture.mysql.metadata import end_scn
from sluice.client import Client, ClientConfig, MemoryCheckpointStore
from sluice.client.checkpoints import CheckpointStore
from sluice.client.consumer import Consumer, JsonConsumer
from sluice.relay import RelayConfig
from sluice.testing import PrivateMariaDB, ReplicaConsumer, key_text, table_rows
from sluice.testing.relays import RelayThread
from tests.integration.workload import Workload


def wait_for(condition: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def relay_config(
    db: PrivateMariaDB, tables: list[str], data_dir: Path, **extra: Any
) -> RelayConfig:
    return RelayConfig(source=db.url, tables=tables, data_dir=data_dir, port=0, **extra)


def create_database(db: PrivateMariaDB, name: str, *tables: str) -> pymysql.Connection[Any]:
    """A new database with ``tables`` (``CREATE TABLE`` bodies: "kv (k INT PRIMARY KEY)"),
    and a connection to it."""
    admin = db.connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
        for table in tables:
            cur.execute(f"CREATE TABLE {name}.{table}")
    admin.close()
    return db.connect(name)


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def http_status(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body


def wait_relay_caught_up(relay_url: str, conn: pymysql.Connection[Any], timeout: float = 60) -> int:
    """Wait until the relay has read the binlog up to the server's current end."""
    target = end_scn(conn)
    wait_for(
        lambda: get_json(relay_url + "/stats")["capture"]["last_scn"] >= target,
        timeout,
        f"relay capture to reach SCN {target}",
    )
    return target


def consume(
    relay_url: str,
    consumer: Consumer | JsonConsumer,
    store: CheckpointStore | None = None,
    **config: Any,
) -> int:
    config.setdefault("since_scn", None)
    client = Client(
        ClientConfig(relays=(relay_url,), **config), consumer, store or MemoryCheckpointStore()
    )
    return client.run(until_caught_up=True)


def assert_replica_equals(
    replica: ReplicaConsumer, conn: pymysql.Connection[Any], sources: list[str]
) -> None:
    for source in sources:
        truth = table_rows(conn, source)
        mine = replica.snapshot(source)
        missing = sorted(set(truth) - set(mine))[:5]
        extra = sorted(set(mine) - set(truth))[:5]
        assert not missing and not extra, f"{source}: missing {missing}, extra {extra}"
        for key, row in truth.items():
            assert mine[key] == row, f"{source} {key}: replica {mine[key]} != source {row}"


SLUICE = [sys.executable, "-m", "sluice.cli.main"]

# Malformed /stream and /offsets parameters: the relay and the bootstrap server share their
# parsing (core/requests.py), so both answer each of these alike.
BAD_STREAM_QUERIES = [
    ("", 400, "missing query parameter since_scn"),
    ("since_scn=abc", 400, "since_scn must be an integer"),
    ("since_scn=-1", 400, "since_scn must be in"),
    ("since_scn=9223372036854775808", 400, "since_scn must be in"),
    ("since_scn=18446744073709551615", 400, "since_scn must be in"),
    ("since_scn=0&partition=5/2", 400, "partition must be i/n"),
    ("since_scn=0&partition=x", 400, "partition must be i/n"),
    ("since_scn=0&format=xml", 400, "format must be binary, json or debezium"),
    ("since_scn=0&sources=nope.nope", 404, "unknown source"),
    ("since_scn=0&max_bytes=0", 400, "max_bytes must be in"),
    ("since_scn=0&timeout_ms=-5", 400, "timeout_ms must be in"),
]


def run_sluice(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the CLI; whatever it says, it never prints a traceback."""
    result = subprocess.run(
        [*SLUICE, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def spark_replica_from_scn_0(spark: Any, relay_url: str, bootstrap_url: str) -> dict[str, Any]:
    """A bounded Spark read from SCN 0 (snapshot, then the log), folded to the latest row per
    key: ``{source: {key: row}}``, plus the ops seen under ``"ops"``."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.window import Window as SparkWindow

    df = (
        spark.read.format("sluice")
        .option("relay", relay_url)
        .option("bootstrap", bootstrap_url)
        .option("startingScn", "0")
        .load()
    )
    ops = {r["op"] for r in df.select("op").distinct().collect()}
    # A truncate (op t) drops every older row of its source.
    truncated = df.where("op = 't'").groupBy("source").agg(F.max("scn").alias("t_scn"))
    df = (
        df.where("op != 't'")
        .join(truncated, "source", "left")
        .where(F.col("t_scn").isNull() | (F.col("scn") > F.col("t_scn")))
    )
    latest = SparkWindow.partitionBy("source", "key").orderBy(F.col("scn").desc())
    state = (
        df.withColumn("n", F.row_number().over(latest))
        .where("n = 1 AND op != 'd'")
        .select("source", "key", "after")
        .collect()
    )
    out: dict[str, Any] = {"ops": ops}
    for r in state:
        out.setdefault(r["source"], {})[key_text(json.loads(r["key"]))] = json.loads(r["after"])
    return out


@contextlib.contextmanager
def workload_relay(
    mariadb: PrivateMariaDB,
    database: str,
    tables: list[str],
    data_dir: Path,
    seed: int,
    transactions: int,
) -> Iterator[tuple[RelayThread, pymysql.Connection[Any], Workload]]:
    """A new database with the workload's tables, a relay on ``tables`` (names without the
    database), and ``transactions`` of the workload it has caught up with."""
    admin = mariadb.connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
    admin.close()
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    Workload.create(conn)
    config = relay_config(mariadb, [f"{database}.{t}" for t in tables], data_dir)
    try:
        with RelayThread(config) as relay:
            workload = Workload(conn, seed=seed)
            workload.run(transactions)
            wait_relay_caught_up(relay.url, conn)
            yield relay, conn, workload
    finally:
        conn.close()
