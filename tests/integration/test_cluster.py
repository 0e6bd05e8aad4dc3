"""Sluice's Spark parts on a real Spark standalone cluster: a master and two workers of one core
each (``PrivateSparkCluster``), so executors are JVMs of their own, with their own work dirs and
Python workers, reached over the network. ``bootstrap run --seed --once`` (the seed through
Spark's JDBC source and through the row path, the log, the fold) and a streaming read of the
relay with the ``sluice`` source must give exactly what they give on ``local[2]`` (the suite's
session, in this process), and the work must have run on the cluster's executors.

Results are read back with pyarrow, not with the Spark that wrote them. If the cluster
cannot start, the test fails (never skips), as the suite's servers do.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest

from sluice.bootstrap.job import BootstrapJob, JobConfig
from sluice.bootstrap.reader import committed_files, snapshot_rows
from sluice.bootstrap.seed.records import SeedRecords
from sluice.bootstrap.store import BootstrapStore
from sluice.testing import PrivateMariaDB, RelayThread, table_rows
from sluice.testing.spark_cluster import PrivateSparkCluster
from tests.integration.cluster_driver import stream_to_parquet
from tests.integration.support import (
    SLUICE,
    create_database,
    relay_config,
    wait_for,
    wait_relay_caught_up,
)

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).resolve().parent / "cluster_driver.py"
# kv: every column kind has SQL for Spark's JDBC source (the fast path); tag's FLOAT and SET
# have none, so its chunks go through the row path (an RDD of chunk tasks).
TABLES = (
    "kv (k INT PRIMARY KEY, body VARCHAR(100), grp INT)",
    "tag (id INT PRIMARY KEY, f FLOAT, s SET('a','b','c'))",
)
SOURCES = ["clu.kv", "clu.tag"]
CHUNK_ROWS = 60
SEED_CHUNKS = 8  # kv's 351 rows (sparse keys: cut by seeks) in 6, tag's 95 in 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateSparkCluster]:
    with PrivateSparkCluster() as running:  # raises SparkClusterNotAvailable with the logs
        yield running


@pytest.fixture(scope="module")
def source(
    mariadb: PrivateMariaDB, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Two tables with rows from before the relay (only a seed has them) and changes after it
    (the log has them), and the relay, caught up."""
    conn = create_database(mariadb, "clu", *TABLES)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO kv SELECT seq, CONCAT('row ', seq), seq % 7 FROM seq_1_to_300")
        cur.execute(
            "INSERT INTO tag SELECT seq, seq / 8, ELT(1 + seq % 3, 'a', 'b,c', '') "
            "FROM seq_1_to_100"
        )
    tmp = tmp_path_factory.mktemp("cluster")
    with RelayThread(relay_config(mariadb, SOURCES, tmp / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute("UPDATE kv SET grp = grp + 100 WHERE k % 10 = 0")
            cur.execute("DELETE FROM kv WHERE k % 37 = 3")
            cur.execute("INSERT INTO kv SELECT seq, 'new', 1 FROM seq_301_to_360")
            cur.execute("UPDATE kv SET k = k + 1000 WHERE k = 42")  # a key change
            cur.execute("UPDATE tag SET f = f * 2, s = 'a,b,c' WHERE id % 9 = 0")
            cur.execute("DELETE FROM tag WHERE id > 95")
        wait_relay_caught_up(relay.url, conn)
        yield {"conn": conn, "db": mariadb.url, "relay": relay.url, "tmp": tmp}
    conn.close()


def _run(cluster: PrivateSparkCluster, command: list[str]) -> str:
    """Run a driver on the cluster (in its driver environment); its stdout. It may not fail
    or print a traceback."""
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=cluster.env(),
        check=False,
    )
    assert result.returncode == 0, f"{command}:\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def _job(source: dict[str, Any], store: Path) -> JobConfig:
    """``bootstrap run --seed URL --chunk-rows 60 --once`` of both tables into ``store``."""
    return JobConfig(
        relays=(source["relay"],),
        sources=tuple(SOURCES),
        store=str(store),
        once=True,
        seed=source["db"],
        seed_chunk_rows=CHUNK_ROWS,
    )


def _cli(config: JobConfig, master: str) -> list[str]:
    """The same job as a ``sluice bootstrap run`` command line."""
    assert config.seed is not None and config.once
    args = ["bootstrap", "run", "--relay", *config.relays, "--store", config.store]
    for name in config.sources:
        args += ["--source", name]
    args += ["--seed", config.seed, "--chunk-rows", str(config.seed_chunk_rows), "--once"]
    return [*SLUICE, *args, "--master", master]


Row = tuple[tuple[str, Any], ...]  # (column, value) pairs, by column name


def _rows(data: pads.Dataset) -> Counter[Row]:
    return Counter(tuple(sorted(row.items())) for row in data.to_table().to_pylist())


def _log_rows(store: BootstrapStore) -> Counter[Row]:
    """The rows of a log Spark's file sink layout holds: its committed files only."""
    files = committed_files(store)
    assert files, f"{store.uri}: no committed log file"
    base = store.path("log")
    return _rows(
        pads.dataset(files, filesystem=store.fs, partitioning="hive", partition_base_dir=base)
    )


def _executor_tasks(cluster: PrivateSparkCluster, app_id: str) -> dict[str, int]:
    """Tasks each executor of the application finished, by its log in a worker's work dir
    (``app-ID/EXECUTOR/stderr``)."""
    found: dict[str, int] = {}
    for i, work in enumerate(cluster.work_dirs):
        for log in (work / app_id).glob("*/stderr"):
            found[f"worker-{i}/{log.parent.name}"] = log.read_text(errors="replace").count(
                "Finished task"
            )
    return found


def _workers(tasks: dict[str, int]) -> set[str]:
    return {executor.split("/")[0] for executor in tasks}


def _app(cluster: PrivateSparkCluster, name: str) -> dict[str, Any]:
    """The master's record of the finished application ``name`` (the master hears of the
    end a moment after the driver's process has exited)."""

    def completed() -> list[dict[str, Any]]:
        return [a for a in cluster.status()["completedapps"] if a["name"] == name]

    apps = wait_for(completed, 60, f"the master to list {name} as completed")
    assert len(apps) == 1, f"the master's completed applications: {apps}"
    app: dict[str, Any] = apps[0]
    assert app["state"] == "FINISHED", app
    return app


@pytest.mark.timeout(420)
def test_bootstrap_run_with_seed_on_a_cluster_equals_local(
    cluster: PrivateSparkCluster, source: dict[str, Any], spark: Any
) -> None:
    on_cluster = _job(source, source["tmp"] / "store-cluster")
    said = _run(cluster, _cli(on_cluster, cluster.master_url))
    # the same job on local[2]: the suite's session (a JVM per process, started once)
    assert spark.sparkContext.master == "local[2]"
    local = BootstrapJob(_job(source, source["tmp"] / "store-local"), spark)
    local.run()
    stores = [BootstrapStore(on_cluster.store), local.store]
    scn = stores[0].current_snapshot()
    assert scn is not None and stores[1].current_snapshot() == scn
    assert said.strip() == f"bootstrap store {stores[0].uri}: snapshot at SCN {scn}"

    # It ran on the cluster: the master saw the job's application, whose executors (one per
    # worker, JVMs of their own) ran the tasks: the seed's chunks, the fold's.
    app = _app(cluster, "sluice-bootstrap")
    tasks = _executor_tasks(cluster, app["id"])
    assert _workers(tasks) == {"worker-0", "worker-1"}, tasks
    assert sum(tasks.values()) >= SEED_CHUNKS, tasks

    chunks = 0
    for name in SOURCES:
        truth = table_rows(source["conn"], name)
        assert truth and snapshot_rows(stores[0], name) == truth
        assert snapshot_rows(stores[1], name) == truth
        # the same chunks at the same SCNs, and no chunk quietly left to the row path (the
        # JDBC driver's JAR reached the executors)
        seeded = [SeedRecords(store).seeded(name) for store in stores]
        assert seeded[0] is not None and seeded[1] is not None
        assert seeded[0].fallback_chunks == 0, seeded[0].fallback
        assert replace(seeded[0], finished_at=0) == replace(seeded[1], finished_at=0)
        chunks += seeded[0].chunks
    assert chunks == SEED_CHUNKS
    # The folded generations and the logs, row for row (payload bytes, SCNs, key hashes).
    snapshots = [
        _rows(pads.dataset(s.path(s.snapshot_dir(scn)), filesystem=s.fs, partitioning="hive"))
        for s in stores
    ]
    assert snapshots[0] and snapshots[0] == snapshots[1]
    logs = [_log_rows(store) for store in stores]
    assert logs[0] == logs[1]
    ops = Counter(dict(row)["op"] for row in logs[0].elements())
    assert ops["c"] >= 60 and ops["u"] >= 30 and ops["d"] >= 8, ops


@pytest.mark.timeout(420)
def test_a_streaming_read_on_a_cluster_equals_local(
    cluster: PrivateSparkCluster, source: dict[str, Any], spark: Any
) -> None:
    outs = [source["tmp"] / "stream-cluster", source["tmp"] / "stream-local"]
    args = [source["relay"], ",".join(SOURCES)]
    # README's other way onto a cluster: spark-submit starts the driver, master given
    said = _run(cluster, cluster.submit(str(DRIVER), *args, str(outs[0])))
    ran = json.loads(said.strip().splitlines()[-1])
    assert ran["master"] == cluster.master_url
    assert ran["executors"] >= 3, ran  # the driver and one executor per worker
    # the same query on local[2]: the suite's session
    assert spark.sparkContext.master == "local[2]"
    batches = stream_to_parquet(spark, *args, str(outs[1]))
    assert ran["batches"] >= 2 and ran["batches"] == batches, (ran, batches)

    app = _app(cluster, "sluice-cluster-stream")
    assert app["id"] == ran["app_id"]
    tasks = _executor_tasks(cluster, ran["app_id"])
    assert _workers(tasks) == {"worker-0", "worker-1"}, tasks
    assert sum(tasks.values()) >= 2 * ran["batches"], tasks  # two read tasks a batch

    # The sinks' folders are named log: the store reader lists a Spark file sink's
    # committed files (its _spark_metadata), as it does for logs Spark's own sink wrote.
    rows = [_log_rows(BootstrapStore(str(out))) for out in outs]
    assert rows[0] and rows[0] == rows[1]
    assert {dict(row)["source"] for row in rows[0]} == set(SOURCES)
