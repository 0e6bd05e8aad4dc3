"""Changes into Delta Lake (SCD1): ``sluice.spark.lake.apply_changes`` against Spark's own
MERGE of the same change batches staged as Parquet, and against the relay's capture rate:
``python -m benchmarks.lake [--rows N --changes N --max-events N --rounds N]``.

A private MariaDB table (the 5-column table, key ``id``) gets ``--rows`` inserts (1,000 per
transaction), then ``--changes`` more row changes in transactions of one to three statements
of 100-1,000 rows each: updates of existing key ranges, deletes, inserts of new keys and
re-inserts of deleted ones (``INSERT IGNORE``), so one transaction can change a key twice. A
relay process holds all of it. Both sides start from an empty Delta table and apply every
event, the initial inserts included, in the same micro-batches:

- **Sluice**: one streaming query over the ``sluice`` source's typed rows with the options
  ``sluice lake run`` uses (``lake_job.change_stream``: typed, ``coldRead``, two tasks with
  ``split=scn``, ``startingScn=earliest``), ``maxEventsPerTrigger``, ``availableNow``,
  ``foreachBatch(apply_changes)`` in SCD1; timed from the query's start to its end.
- **Spark's own MERGE**: the same stream read once (untimed) with each micro-batch written as
  a Parquet directory, with a ``_seq`` column (the change's place in the batch). Timed: a
  plain PySpark loop that, per staged batch, reads it, keeps the last change per key
  (``row_number`` over the key by ``_scn`` and ``_seq`` descending) and runs ``MERGE INTO ...
  WHEN MATCHED AND _op = 'd' DELETE WHEN MATCHED UPDATE SET * WHEN NOT MATCHED AND _op <> 'd'
  INSERT *``: what a user would write by hand, minus reading the relay.
- **The relay's capture rate**: a fresh relay (in process) capturing the workload's binlog
  range, from its start until its buffer holds the range's last SCN (``capture.relay_catch_up``).

Rounds alternate the order of the two sides (the host's speed drifts); the best of each
counts. A warm-up MERGE into a scratch table first pays Delta's one-time costs for both. At
the end every Delta table must hold exactly the source table's rows (count and a SHA-256 of
the sorted rows as text), else the benchmark fails.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.capture import relay_catch_up
from benchmarks.common import SMALL_TABLE_DDL, fill_small_table, relay_process, table, write_results
from sluice.blocking_http import get_json
from sluice.bootstrap.job import spark_session
from sluice.bootstrap.lake_job import change_stream, query_session
from sluice.capture.mysql.metadata import end_scn
from sluice.spark.lake import apply_changes, delta_settings
from sluice.testing import PrivateMariaDB, RelayProcess

KEYS = ["id"]
COLUMNS = ["id", "a", "b", "c", "d"]
# Every row as one text, alike in MariaDB and Spark (a UTC session: DATETIME prints as stored).
ROW_TEXT_SQL = "CONCAT_WS('|', id, a, b, c, d)"
ROW_TEXT_SPARK = "concat_ws('|', id, a, b, c, cast(d AS string))"
MERGE = (
    "MERGE INTO delta.`{path}` t USING {view} s ON t.id = s.id\n"
    "WHEN MATCHED AND s._op = 'd' THEN DELETE\n"
    "WHEN MATCHED THEN UPDATE SET *\n"
    "WHEN NOT MATCHED AND s._op <> 'd' THEN INSERT *"
)


# -- the workload --------------------------------------------------------------------------------
def _statement(rng: random.Random, next_id: int) -> tuple[str, int]:
    """One statement of 100-1,000 rows, and the next new key after it."""
    size = rng.randint(100, 1000)
    lo = rng.randint(1, max(1, next_id - size))
    hi = lo + size - 1
    pick = rng.random()
    if pick < 0.55:
        return (
            "UPDATE t SET a = a + 1, b = CONCAT('v', a + 1, '-', id), c = c + 0.01, "
            f"d = d + INTERVAL 1 SECOND WHERE id BETWEEN {lo} AND {hi}",
            next_id,
        )
    if pick < 0.7:
        return f"DELETE FROM t WHERE id BETWEEN {lo} AND {hi}", next_id
    values = (
        "SELECT seq + {off}, seq, CONCAT('new-', seq), seq / 100, "
        "'2024-03-04 05:06:07' + INTERVAL seq SECOND FROM seq_1_to_{n}"
    )
    if pick < 0.9:
        return f"INSERT INTO t {values.format(off=next_id - 1, n=size)}", next_id + size
    return f"INSERT IGNORE INTO t {values.format(off=lo - 1, n=size)}", next_id


def workload(cur: Any, rows: int, changes: int, seed: int = 7) -> int:
    """``rows`` inserts (rounded up to thousands), then at least ``changes`` row changes; the
    events written."""
    rows = -(-rows // 1000) * 1000
    fill_small_table(cur, rows)
    rng, next_id, events = random.Random(seed), rows + 1, rows
    while events < rows + changes:
        cur.execute("BEGIN")
        for _ in range(rng.randint(1, 3)):
            sql, next_id = _statement(rng, next_id)
            events += cur.execute(sql)
        cur.execute("COMMIT")
    return events


def _relay_with_workload(
    work: Path, rows: int, changes: int
) -> tuple[PrivateMariaDB, RelayProcess, int, int, int]:
    """The server and a relay process holding the workload; its first and last SCN and its
    row changes."""
    db = PrivateMariaDB(work / "db").__enter__()
    conn = db.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute(SMALL_TABLE_DDL)
    start = end_scn(conn)
    relay = relay_process(db.url, "bench.t", work / "relay", "--buffer-size", str(512 << 20))
    with conn.cursor() as cur:
        cur.execute("USE bench")
        written = workload(cur, rows, changes)
    target = end_scn(conn)
    conn.close()
    while int(get_json(relay.url, "/stats")["capture"]["last_scn"]) < target:
        time.sleep(0.2)
    print(f"  workload: {written:,} row changes", flush=True)
    return db, relay, start, target, written


# -- the two sides -------------------------------------------------------------------------------
def _stream(spark: Any, relay: str, max_events: int) -> Any:
    """The ``sluice`` source as ``sluice lake run`` reads it, in a session of its own."""
    return change_stream(query_session(spark), (relay,), "bench.t", max_events=max_events)


def _drain(stream: Any, each: Any, checkpoint: Path) -> float:
    """Seconds from the query's start to its end: ``foreachBatch(each)``, ``availableNow``."""
    began = time.perf_counter()
    query = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    took = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    return took


def stage(spark: Any, relay: str, max_events: int, out: Path) -> tuple[list[Path], float]:
    """The baseline's input: each micro-batch of the same stream as a Parquet directory, with
    ``_seq`` (the change's place in the batch: a key's changes within one transaction)."""
    from pyspark.sql import functions as F  # noqa: N812

    def write(batch: Any, batch_id: int) -> None:
        rows = batch.withColumn("_seq", F.monotonically_increasing_id())
        rows.write.parquet(str(out / f"batch-{batch_id:06d}"))

    took = _drain(_stream(spark, relay, max_events), write, out / "_checkpoint")
    return sorted(out.glob("batch-*")), took


def sluice_lake(spark: Any, relay: str, max_events: int, path: Path, app: str) -> float:
    """Seconds for the sluice path: relay -> typed rows -> ``apply_changes`` (SCD1)."""
    def merge(batch: Any, batch_id: int) -> None:
        apply_changes(batch, batch_id, str(path), keys=KEYS, mode="scd1", app_id=app)

    return _drain(_stream(spark, relay, max_events), merge, path.parent / f"{path.name}.ckpt")


def spark_merge(spark: Any, staged: list[Path], path: Path) -> float:
    """Seconds for Spark's own MERGE of the staged batches, last change per key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812

    last = Window.partitionBy(*KEYS).orderBy(F.col("_scn").desc(), F.col("_seq").desc())
    began = time.perf_counter()
    for i, batch_dir in enumerate(staged):
        batch = spark.read.parquet(str(batch_dir))
        if i == 0:
            batch.select(*COLUMNS).limit(0).write.format("delta").save(str(path))
        changes = batch.withColumn("_rn", F.row_number().over(last)).where("_rn = 1")
        changes.select(*COLUMNS, "_op").createOrReplaceTempView("bench_changes")
        spark.sql(MERGE.format(path=path, view="bench_changes"))
    return time.perf_counter() - began


# -- correctness ---------------------------------------------------------------------------------
def _digest(texts: list[str]) -> dict[str, Any]:
    sha = hashlib.sha256("\n".join(sorted(texts)).encode()).hexdigest()
    return {"rows": len(texts), "sha256": sha}


def source_rows(db: PrivateMariaDB) -> list[str]:
    conn = db.connect("bench")
    with conn.cursor() as cur:
        cur.execute(f"SELECT {ROW_TEXT_SQL} FROM t")
        texts = [r[0] for r in cur.fetchall()]
    conn.close()
    return texts


def check_same(spark: Any, expected: list[str], paths: list[Path]) -> dict[str, Any]:
    """Each Delta table holds exactly the source's rows, else ``RuntimeError``."""
    want = _digest(expected)
    for path in paths:
        frame = spark.read.format("delta").load(str(path))
        texts = [r[0] for r in frame.selectExpr(ROW_TEXT_SPARK).collect()]
        got = _digest(texts)
        if got != want:
            missing = sorted(set(expected) - set(texts))[:5]
            extra = sorted(set(texts) - set(expected))[:5]
            raise RuntimeError(
                f"Delta table {path} differs from the source: {got} vs {want}; "
                f"missing {missing}, extra {extra}"
            )
    return want


# -- the run -------------------------------------------------------------------------------------
def _warm_up(spark: Any, staged: list[Path], work: Path) -> None:
    """Delta's first MERGE in a JVM pays class loading and JIT: once, for both sides."""
    spark_merge(spark, staged[:1], work / "warm")


def _rounds(
    spark: Any, relay: str, staged: list[Path], work: Path, max_events: int, rounds: int
) -> tuple[list[dict[str, float]], list[Path]]:
    per_round, tables = [], []
    for r in range(rounds):
        sides = ["sluice", "spark_merge"]
        if r % 2:
            sides.reverse()
        took = {}
        for side in sides:
            path = work / f"{side}-{r}"
            if side == "sluice":
                took[side] = sluice_lake(spark, relay, max_events, path, f"bench-lake:{r}")
            else:
                took[side] = spark_merge(spark, staged, path)
            tables.append(path)
        print(
            f"  round {r + 1}: sluice {took['sluice']:.2f} s, Spark's MERGE "
            f"{took['spark_merge']:.2f} s",
            flush=True,
        )
        per_round.append(took)
    return per_round, tables


def run(
    rows: int = 100_000, changes: int = 300_000, max_events: int = 100_000, rounds: int = 2
) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-lake-"))
    db, relay, start, target, written = _relay_with_workload(work, rows, changes)
    spark = None
    try:
        captured, capture_s = relay_catch_up(db, start, target)
        conf = {**delta_settings(), "spark.databricks.delta.snapshotPartitions": "2"}
        spark = spark_session("local[2]", "sluice-bench-lake", quiet=True, conf=conf)
        staged, stage_s = stage(spark, relay.url, max_events, work / "staged")
        events = spark.read.parquet(*(str(p) for p in staged)).count()
        if events != written:
            raise RuntimeError(f"the stream read {events:,} changes of the {written:,} written")
        _warm_up(spark, staged, work)
        per_round, tables = _rounds(spark, relay.url, staged, work, max_events, rounds)
        digest = check_same(spark, source_rows(db), tables)
    finally:
        if spark is not None:
            spark.stop()
        relay.stop()
        db.__exit__(None, None, None)
        shutil.rmtree(work, ignore_errors=True)
    results = _results(events, len(staged), per_round, captured / capture_s, stage_s, digest)
    results.update(rows=rows, changes=changes, max_events_per_trigger=max_events)
    _print(results)
    print("wrote", write_results("lake", results))
    return results


def _results(
    events: int,
    batches: int,
    per_round: list[dict[str, float]],
    capture_rate: float,
    stage_s: float,
    digest: dict[str, Any],
) -> dict[str, Any]:
    sluice = events / min(r["sluice"] for r in per_round)
    merge = events / min(r["spark_merge"] for r in per_round)
    return {
        "events": events,
        "batches": batches,
        "rounds": [
            {
                "sluice_rows_per_s": round(events / r["sluice"]),
                "spark_merge_rows_per_s": round(events / r["spark_merge"]),
                "ratio": round(r["spark_merge"] / r["sluice"], 2),
            }
            for r in per_round
        ],
        "sluice_rows_per_s": round(sluice),
        "spark_merge_rows_per_s": round(merge),
        "sluice_vs_spark_merge": round(sluice / merge, 2),
        "relay_capture_events_per_s": round(capture_rate),
        "sluice_vs_relay_capture": round(sluice / capture_rate, 2),
        "staging_relay_to_parquet_events_per_s": round(events / stage_s),
        "final_table": digest,
    }


def _print(res: dict[str, Any]) -> None:
    print(
        table(
            [
                (f"{res['events']:,} changes in {res['batches']} batches", "rows/s", "ratio"),
                ("sluice -> Delta SCD1 (apply_changes)", f"{res['sluice_rows_per_s']:,}", "-"),
                (
                    "Spark's MERGE of the batches staged as Parquet",
                    f"{res['spark_merge_rows_per_s']:,}",
                    f"sluice {res['sluice_vs_spark_merge']}x (target >= 0.8x)",
                ),
                (
                    "relay capture of the same binlog",
                    f"{res['relay_capture_events_per_s']:,}",
                    f"sluice {res['sluice_vs_relay_capture']}x",
                ),
                (
                    "staging: relay -> Parquet (first query, cold)",
                    f"{res['staging_relay_to_parquet_events_per_s']:,}",
                    "-",
                ),
            ]
        )
    )
    final = res["final_table"]
    digest = final["sha256"][:16]
    print(f"  every Delta table = the source: {final['rows']:,} rows, sha256 {digest}...")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lake", description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000, help="initial inserts")
    parser.add_argument("--changes", type=int, default=300_000, help="row changes after them")
    parser.add_argument("--max-events", type=int, default=100_000, help="maxEventsPerTrigger")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    run(args.rows, args.changes, args.max_events, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
