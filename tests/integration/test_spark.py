"""The ``sluice`` Spark source: exactly-once into Parquet, restarts, partitions, errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread, free_port, key_text
from tests.integration.support import (
    consume,
    wait_for,
    wait_relay_caught_up,
    workload_relay,
)

TABLES = ["alltypes", "person", "orders"]


@pytest.fixture(scope="module")
def relay_db(
    mariadb: PrivateMariaDB, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RelayThread, pymysql.Connection[Any]]]:
    data = tmp_path_factory.mktemp("relay") / "data"
    with workload_relay(mariadb, "sparky", TABLES, data, seed=21, transactions=60) as made:
        yield made[0], made[1]


def _relay_events(url: str) -> Counter[tuple[int, str, str, str]]:
    recorder = RecordingConsumer()
    consume(url, recorder)
    return Counter((e.scn, e.source, key_text(e.key), e.op) for e in recorder.events)


def _sink_events(spark: Any, path: str) -> Counter[tuple[int, str, str, str]]:
    rows = spark.read.parquet(path).select("scn", "source", "key", "op").collect()
    return Counter((r["scn"], r["source"], key_text(json.loads(r["key"])), r["op"]) for r in rows)


def _to_parquet(spark: Any, out: str, **options: str) -> None:
    """Stream what the relay holds now into Parquet under ``out`` (availableNow)."""
    (
        spark.readStream.format("sluice")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", f"{out}/data")
        .option("checkpointLocation", f"{out}/checkpoint")
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )


def test_stream_into_parquet_restart_and_partitions(
    relay_db: tuple[RelayThread, pymysql.Connection[Any]], spark: Any, tmp_path: Path
) -> None:
    relay, conn = relay_db
    expected = _relay_events(relay.url)
    out = str(tmp_path / "sink")

    def run_once(**options: str) -> None:
        _to_parquet(spark, out, relay=relay.url, **options)

    run_once(maxEventsPerTrigger="500")
    assert _sink_events(spark, f"{out}/data") == expected
    run_once(maxEventsPerTrigger="500")  # restarted from its checkpoint: nothing new, no repeats
    assert _sink_events(spark, f"{out}/data") == expected

    with conn.cursor() as cur:
        cur.execute("UPDATE person SET name = 'after restart' LIMIT 3")
    wait_relay_caught_up(relay.url, conn)
    expected = _relay_events(relay.url)
    run_once()
    assert _sink_events(spark, f"{out}/data") == expected

    parted = str(tmp_path / "parted")
    _to_parquet(spark, parted, relay=relay.url, partitions="3")
    assert _sink_events(spark, f"{parted}/data") == expected


def test_scn_split_reads_the_log_whole(
    relay_db: tuple[RelayThread, pymysql.Connection[Any]], spark: Any, tmp_path: Path
) -> None:
    """``split=scn`` (what ``bootstrap run`` uses) cuts the range into runs of whole windows:
    the same rows as one partition, sequence numbers included, and more than one part."""
    relay, _conn = relay_db
    options = {"relay": relay.url, "includeRaw": "true", "images": "false"}

    def rows(**extra: str) -> Counter[tuple[Any, ...]]:
        df = spark.read.format("sluice").options(**options, **extra).load()
        return Counter(tuple(r) for r in df.drop("ts").collect())

    whole = rows()
    assert rows(partitions="3", split="scn") == whole
    plan = spark.read.format("sluice").options(**options, partitions="3", split="scn").load()
    assert plan.rdd.getNumPartitions() == 3

    # Streaming in capped micro-batches, as `bootstrap run` reads: the same rows again.
    out = str(tmp_path / "scn_split")
    _to_parquet(spark, out, **options, partitions="3", split="scn", maxEventsPerTrigger="400")
    streamed = spark.read.parquet(f"{out}/data").drop("ts")
    assert Counter(tuple(r) for r in streamed.collect()) == whole


def test_batch_read_generic_and_typed(
    relay_db: tuple[RelayThread, pymysql.Connection[Any]], spark: Any
) -> None:
    relay, _conn = relay_db
    expected = _relay_events(relay.url)
    df = spark.read.format("sluice").option("relay", relay.url).load()
    assert df.columns == ["scn", "source", "op", "ts", "key", "before", "after", "schema_version"]
    assert df.count() == sum(expected.values())
    typed = (
        spark.read.format("sluice")
        .option("relay", relay.url)
        .option("sources", "sparky.person")
        .option("typed", "true")
        .load()
    )
    assert typed.columns == ["id", "name", "balance", "updated", "_scn", "_op", "_ts"]
    types = dict(typed.dtypes)
    assert types["balance"] == "decimal(12,2)" and types["updated"] == "timestamp_ntz"
    person = [k for k in expected.elements() if k[1] == "sparky.person"]
    assert typed.count() == len(person)


def test_driver_sigkill_then_restart_is_exactly_once(
    relay_db: tuple[RelayThread, pymysql.Connection[Any]], spark: Any, tmp_path: Path
) -> None:
    relay, _conn = relay_db
    expected = _relay_events(relay.url)
    out = str(tmp_path / "killed")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    driver = [sys.executable, "-m", "tests.integration.spark_driver", relay.url, out]
    proc = subprocess.Popen(
        [*driver, "forever"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        commits = Path(out) / "checkpoint" / "commits"
        wait_for(
            lambda: commits.exists() and len(list(commits.iterdir())) >= 3,
            180,
            "three committed micro-batches",
        )
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    subprocess.run(
        [*driver, "once"],
        env=env,
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert _sink_events(spark, f"{out}/data") == expected


def test_bad_options_are_clear(
    spark: Any, relay_db: tuple[RelayThread, pymysql.Connection[Any]]
) -> None:
    relay, _conn = relay_db
    from pyspark.errors import PySparkException

    def load(**options: str) -> Any:
        reader = spark.read.format("sluice")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load().count()

    cases = [
        ({"relay": relay.url, "sources": "no.such"}, "unknown source 'no.such'"),
        ({"relay": f"http://127.0.0.1:{free_port()}"}, "no relay answered"),
        ({}, "needs option"),
        ({"relay": relay.url, "typed": "true"}, "typed=true needs exactly one source"),
        ({"relay": relay.url, "partitions": "0"}, "partitions must be a positive integer"),
        ({"relay": relay.url, "split": "hash"}, "split must be key or scn"),
        ({"relay": relay.url, "startingScn": "soon"}, "not an SCN"),
    ]
    for options, message in cases:
        with pytest.raises(PySparkException, match=re.escape(message)):
            load(**options)
