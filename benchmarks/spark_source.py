"""The `sluice` source against the ceiling of any Python streaming source, on the same rows
(issue 40): ``python -m benchmarks.spark_source`` (or ``python -m benchmarks.spark_path
--source-vs-ceiling``).

One relay process holds 1,000,000 events of the 5-column table. The source's own ``read()`` is run
once outside Spark on each partition of one ``availableNow`` batch (generic columns,
``partitions=2``), and the Arrow batches it yields are kept in one Arrow IPC file per
partition. Then, in each round, two streaming queries drain one ``availableNow`` micro-batch
into Parquet, the query's start included: the ceiling (a Python ``DataSourceStreamReader``
whose ``read()`` only yields those batches, memory-mapped: the same rows, schema, batch sizes
and partitions) and the `sluice` source reading the relay. The ratio is ceiling seconds over
sluice seconds; the order alternates between rounds (the host's speed drifts).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.common import (
    SMALL_TABLE_DDL,
    fill_small_table,
    relay_process,
    table,
    write_results,
)
from benchmarks.spark_ipc_source import PrebuiltIpcSource
from sluice.blocking_http import get_json
from sluice.bootstrap.job import spark_session
from sluice.capture.mysql.metadata import end_scn
from sluice.spark import register
from sluice.spark.options import parse_options
from sluice.spark.rows import GENERIC_DDL
from sluice.spark.source import SluiceStreamReader
from sluice.testing import PrivateMariaDB, RelayProcess

# The cases measured: the generic columns with each way of cutting a batch into partitions.
CASES: dict[str, dict[str, str]] = {
    "generic, split=scn": {"split": "scn"},
    "generic, split=key": {},
}


def _drain(stream: Any, out: Path) -> float:
    """Seconds from a query's start to its end: one availableNow micro-batch into Parquet."""
    began = time.perf_counter()
    (
        stream.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
    return time.perf_counter() - began


def _options(relay: str, case: dict[str, str]) -> dict[str, str]:
    return {"relay": relay, "partitions": "2", **case}


def prebuilt(relay: str, case: dict[str, str], work: Path) -> tuple[list[str], int, float]:
    """The batches the source's ``read()`` yields for one availableNow batch, outside Spark,
    one IPC file per partition; the events, and the seconds ``read()`` took (no Spark)."""
    reader = SluiceStreamReader(parse_options(_options(relay, case)), None)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    paths, rows, seconds = [], 0, 0.0
    work.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(reader.partitions(start, end)):
        began = time.perf_counter()
        batches = list(reader.read(part))
        seconds += time.perf_counter() - began
        path = work / f"part-{i}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batches[0].schema) as out:
            for batch in batches:
                out.write_batch(batch)
                rows += batch.num_rows
        paths.append(str(path))
    return paths, rows, seconds


def _relay_with_events(work: Path, events: int) -> tuple[PrivateMariaDB, RelayProcess]:
    """A relay process (as deployed: not sharing the driver's GIL) holding ``events``."""
    db = PrivateMariaDB(work / "db").__enter__()
    conn = db.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute(SMALL_TABLE_DDL)
    relay = relay_process(db.url, "bench.t", work / "relay", "--buffer-size", str(512 << 20))
    with conn.cursor() as cur:
        cur.execute("USE bench")
        fill_small_table(cur, events)
    target = end_scn(conn)
    conn.close()
    while int(get_json(relay.url, "/stats")["capture"]["last_scn"]) < target:
        time.sleep(0.2)
    return db, relay


def _case_rounds(
    spark: Any, relay: str, name: str, case: dict[str, str], work: Path, rounds: int
) -> dict[str, Any]:
    paths, rows, read_s = prebuilt(relay, case, work / "ipc")
    ceiling = (
        spark.readStream.format("sluice_ceiling_ipc")
        .option("paths", ",".join(paths))
        .option("ddl", GENERIC_DDL)
        .load()
    )
    sluice = spark.readStream.format("sluice").options(**_options(relay, case)).load()
    # Warm both: the Python workers, the JIT, each source's imports.
    _drain(ceiling, work / "warm-ceiling")
    _drain(sluice, work / "warm-sluice")
    per_round = [
        _round(r, rows, {"ceiling": ceiling, "sluice": sluice}, work) for r in range(rounds)
    ]
    for r, got in enumerate(per_round):
        print(
            f"  {name} round {r + 1}: sluice {got['sluice_events_per_s']:,} ev/s, ceiling "
            f"{got['ceiling_rows_per_s']:,} rows/s, ratio {got['sluice_vs_ceiling']:.2f}",
            flush=True,
        )
    ratios = [p["sluice_vs_ceiling"] for p in per_round]
    return {
        "events": rows,
        "read_outside_spark_events_per_s": round(rows / read_s),
        "rounds": per_round,
        "sluice_vs_ceiling_worst": min(ratios),
        "sluice_vs_ceiling_best": max(ratios),
        "sluice_vs_ceiling_median": sorted(ratios)[len(ratios) // 2],
    }


def _round(r: int, rows: int, streams: dict[str, Any], work: Path) -> dict[str, Any]:
    """One round: both queries, in alternating order; their rates and the ratio."""
    order = list(streams.items())
    if r % 2:
        order.reverse()
    took = {who: _drain(stream, work / f"{who}-{r}") for who, stream in order}
    ceiling_s, sluice_s = took["ceiling"], took["sluice"]
    return {
        "sluice_events_per_s": round(rows / sluice_s),
        "ceiling_rows_per_s": round(rows / ceiling_s),
        "sluice_vs_ceiling": round(ceiling_s / sluice_s, 2),
    }


def run(events: int = 1_000_000, rounds: int = 8) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sluice-spark-source-"))
    spark = spark_session("local[2]", "sluice-bench")
    register(spark)
    spark.dataSource.register(PrebuiltIpcSource)
    db, relay = _relay_with_events(work, events)
    try:
        cases = {
            name: _case_rounds(spark, relay.url, name, case, work / f"case{i}", rounds)
            for i, (name, case) in enumerate(CASES.items())
        }
    finally:
        relay.stop()
        db.__exit__(None, None, None)
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    rows: list[tuple[str, ...]] = [("case", "sluice / ceiling per round", "read() alone")]
    for name, got in cases.items():
        per = ", ".join(f"{p['sluice_vs_ceiling']:.2f}" for p in got["rounds"])
        rows.append((name, per, f"{got['read_outside_spark_events_per_s']:,} ev/s"))
    print(table(rows))
    results = {"events": events, "cases": cases}
    print("wrote", write_results("spark_source", results))
    return results


if __name__ == "__main__":
    run(*(int(a) for a in sys.argv[1:3]))
