"""The Spark path: relay -> Parquet through the ``sluice`` source (Arrow vs tuples) against
Spark's own Parquet source on the same events; the fold; snapshot serving rows/s."""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from benchmarks.capture import relay_catch_up
from benchmarks.common import SMALL_TABLE_DDL, fill_small_table, table, write_results
from benchmarks.spark_ceiling import ceiling
from sluice.bootstrap.fold import LOG_DDL, fold
from sluice.bootstrap.job import spark_session
from sluice.bootstrap.logwriter import LogWriter
from sluice.bootstrap.server import BootstrapServer
from sluice.bootstrap.store import BootstrapStore
from sluice.capture.mysql.metadata import end_scn
from sluice.relay import RelayConfig
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.spark import register
from sluice.testing import PrivateMariaDB, RelayThread, ServiceThread


def _timed(action: Any) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def _to_parquet(stream: Any, out: str) -> float:
    """Seconds to drain a streaming DataFrame into Parquet (availableNow)."""
    return _timed(
        lambda: (
            stream.writeStream.format("parquet")
            .option("path", f"{out}/data")
            .option("checkpointLocation", f"{out}/ckpt")
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )
    )


def _steady(stream: Any, out: str) -> float:
    """Events/s of a stream's micro-batches after its first (which also pays for starting
    the query, its Python workers and the JIT): what a running job keeps up with."""
    query = (
        stream.writeStream.format("parquet")
        .option("path", f"{out}/data")
        .option("checkpointLocation", f"{out}/ckpt")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    later = [p for p in query.recentProgress[1:] if p["numInputRows"]]
    if not later:
        raise RuntimeError("the stream ran a single micro-batch: nothing steady to measure")
    rows = sum(p["numInputRows"] for p in later)
    return float(rows / (sum(p["durationMs"]["triggerExecution"] for p in later) / 1000))


def _sluice(spark: Any, relay: str, options: dict[str, str], arrow: bool = True) -> Any:
    reader = spark.readStream.format("sluice").option("relay", relay).options(**options)
    return reader.option("arrow", str(arrow).lower()).option("partitions", "2").load()


def _relay_to_parquet(spark: Any, relay: str, out: str, arrow: bool, **options: str) -> float:
    return _to_parquet(_sluice(spark, relay, options, arrow), out)


def _parquet_steady(spark: Any, files: str, out: str) -> float:
    """Spark's Parquet source, steady, two of ``_parquet_files``' eight files a batch."""
    schema = spark.read.parquet(files).schema
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", "2").parquet(files)
    return _steady(stream, out)


def _parquet_to_parquet(spark: Any, source: str, out: str) -> float:
    schema = spark.read.parquet(source).schema
    return _to_parquet(spark.readStream.schema(schema).parquet(source), out)


def _log_writer(relay: str, work: Path, name: str, start: int, max_events: int) -> LogWriter:
    """What `bootstrap run` does to a relay's events: the log writer into a new store, until
    it has what the relay held at its start."""
    store = BootstrapStore(str(work / name))
    store.create(start, ("bench.t",))
    options = {
        "relay": relay,
        "sources": "bench.t",
        "startingScn": str(start),
        "includeRaw": "true",
        "images": "false",
        "partitions": "1",
    }
    writer = LogWriter(store, options, max_events=max_events, trigger_s=0.1, once=True)
    writer.start()
    writer.wait()
    if writer.error is not None:
        raise RuntimeError(f"the log writer failed: {writer.error}") from writer.error
    return writer


def _parquet_files(spark: Any, source: str, out: str, files: int) -> str:
    """The log's rows as ``files`` plain Parquet files: Spark's own source reads them with
    every core, and in ``files`` / 2 micro-batches of two files each when steady."""
    spark.read.parquet(source).repartition(files).write.parquet(out)
    return out


def _stream_bench(spark: Any, work: Path, events: int) -> dict[str, Any]:
    with PrivateMariaDB(work / "db") as db:
        conn = db.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
            cur.execute(SMALL_TABLE_DDL)
        config = RelayConfig(
            source=SecretStr(db.url),
            tables=["bench.t"],
            data_dir=work / "relay",
            port=0,
            buffer_size=512 << 20,
        )
        start = end_scn(conn)
        with RelayThread(config) as relay, conn.cursor() as cur:
            cur.execute("USE bench")
            fill_small_table(cur, events)
            target = end_scn(conn)
            while json.loads(_get(relay.url, "/stats"))["capture"]["last_scn"] < target:
                time.sleep(0.2)
            # Warm up the JVM and the Python workers: the first micro-batch costs seconds.
            spark.read.format("sluice").option("relay", relay.url).load().count()
            tuples_s = _relay_to_parquet(spark, relay.url, str(work / "tuples"), False)
            arrow_s = _relay_to_parquet(spark, relay.url, str(work / "arrow"), True)
            # split=scn: each task reads whole windows of the buffer as it is (no per-event
            # key filtering in the relay, which costs the relay ~2 us an event a partition).
            scn_s = _relay_to_parquet(spark, relay.url, str(work / "scn"), True, split="scn")
            typed = {"typed": "true", "sources": "bench.t", "split": "scn"}
            typed_s = _relay_to_parquet(spark, relay.url, str(work / "typed"), True, **typed)
            # Steady: the micro-batches after the first, a quarter of the events each (the
            # first also pays for starting the query and Spark's Python source runner).
            quarter = {"maxEventsPerTrigger": str(events // 4), "split": "scn"}
            generic_steady = _steady(_sluice(spark, relay.url, quarter), str(work / "g_st"))
            typed_steady = _steady(_sluice(spark, relay.url, typed | quarter), str(work / "t_st"))
            connect = _connect_bench(relay.url, work, events, scn_s)
            # What `bootstrap run` does: the log writer (raw payloads and keys, no JSON
            # images) into a store, in one batch, then in four (the first left out: steady).
            # One batch: the whole run, its start included, as Spark's query start is.
            store_s = _timed(lambda: _log_writer(relay.url, work, "log", start, events))
            steady = _log_writer(relay.url, work, "log_steady", start, events // 4)
        later = list(steady.timings)[1:]
        if not later:
            raise RuntimeError("the log writer wrote a single batch: nothing steady to measure")
        store_steady = sum(n for n, _s in later) / sum(s for _n, s in later)
        # Spark's own Parquet -> Parquet over the same rows (the log's columns), eight files.
        source = _parquet_files(spark, str(work / "log" / "log"), str(work / "pq_source"), 8)
        log_parquet_s = _parquet_to_parquet(spark, source, str(work / "pq_log"))
        # ... and over the `sluice` source's own output (the JSON images too).
        parquet_s = _parquet_to_parquet(spark, str(work / "arrow" / "data"), str(work / "pq"))
        typed_parquet_s = _parquet_to_parquet(
            spark, str(work / "typed" / "data"), str(work / "pq_typed")
        )
        parquet_steady = _parquet_steady(spark, source, str(work / "pq_steady"))
        # Spark's Parquet source over the `sluice` source's own rows, in the same batches
        generic_files = _parquet_files(spark, str(work / "arrow" / "data"), str(work / "g8"), 8)
        parquet_generic_steady = _parquet_steady(spark, generic_files, str(work / "pq_g_st"))
        typed_files = _parquet_files(spark, str(work / "typed" / "data"), str(work / "t8"), 8)
        parquet_typed_steady = _parquet_steady(spark, typed_files, str(work / "pq_t_st"))
        # The relay's own capture rate over the same binlog: a fresh relay from the start.
        captured, capture_s = relay_catch_up(db, start, target)
        conn.close()
    return {
        "events": events,
        "sluice_arrow_events_per_s": round(events / arrow_s),
        "sluice_tuples_events_per_s": round(events / tuples_s),
        "spark_parquet_events_per_s": round(events / parquet_s),
        "bootstrap_log_events_per_s": round(events / store_s),
        "spark_parquet_log_events_per_s": round(events / log_parquet_s),
        "bootstrap_log_vs_spark_parquet": round(log_parquet_s / store_s, 2),
        "relay_capture_events_per_s": round(captured / capture_s),
        "bootstrap_log_vs_relay_capture": round((events / store_s) / (captured / capture_s), 2),
        "bootstrap_log_steady_events_per_s": round(store_steady),
        "spark_parquet_steady_events_per_s": round(parquet_steady),
        "bootstrap_log_steady_vs_spark_parquet": round(store_steady / parquet_steady, 2),
        "bootstrap_log_steady_vs_relay_capture": round(store_steady / (captured / capture_s), 2),
        "arrow_vs_tuples": round(tuples_s / arrow_s, 2),
        "sluice_arrow_vs_spark_parquet": round(parquet_s / arrow_s, 2),
        "sluice_scn_split_events_per_s": round(events / scn_s),
        "sluice_scn_split_vs_spark_parquet": round(parquet_s / scn_s, 2),
        "sluice_typed_events_per_s": round(events / typed_s),
        "spark_parquet_typed_events_per_s": round(events / typed_parquet_s),
        "sluice_typed_vs_spark_parquet": round(typed_parquet_s / typed_s, 2),
        "sluice_generic_steady_events_per_s": round(generic_steady),
        "spark_parquet_generic_steady_events_per_s": round(parquet_generic_steady),
        "sluice_generic_steady_vs_spark_parquet": round(generic_steady / parquet_generic_steady, 2),
        "sluice_typed_steady_events_per_s": round(typed_steady),
        "spark_parquet_typed_steady_events_per_s": round(parquet_typed_steady),
        "sluice_typed_steady_vs_spark_parquet": round(typed_steady / parquet_typed_steady, 2),
        "sluice_typed_vs_relay_capture": round((events / typed_s) / (captured / capture_s), 2),
        "connect": connect,
    }


def _connect_bench(relay: str, work: Path, events: int, classic_s: float) -> dict[str, Any]:
    """The same relay -> Parquet (generic columns, Arrow) from a Spark Connect client against
    a private Connect server (``local[2]``, its own JVM), against the classic session's run."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from sluice.testing.spark_connect import PrivateConnectServer

    with PrivateConnectServer() as server:
        remote = ConnectSession.builder.remote(server.url).getOrCreate()
        register(remote)
        # Warm its JVM and Python workers as the classic session was.
        remote.read.format("sluice").option("relay", relay).load().count()
        connect_s = _relay_to_parquet(remote, relay, str(work / "connect"), True, split="scn")
        remote.stop()
    return {
        "sluice_connect_events_per_s": round(events / connect_s),
        "sluice_classic_events_per_s": round(events / classic_s),
        "connect_vs_classic": round(classic_s / connect_s, 2),
    }


def _get(base: str, path: str) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("GET", path)
    body = conn.getresponse().read()
    conn.close()
    return body


def _synthetic_store(spark: Any, work: Path, changes: int, keys: int) -> BootstrapStore:
    """A store whose log holds ``changes`` events over ``keys`` keys (valid Avro payloads)."""
    schema = TableSchema(
        "bench.t",
        1,
        (Column("id", "int", False, "int"), Column("v", "string", True, "varchar")),
        ("id",),
    )
    payload = RowCodec(schema).encode(None, [1, "value"])
    store = BootstrapStore(str(work / "store"))
    store.create(0, ("bench.t",))
    store.write_json({"bench.t": [schema.to_avro()]}, "schemas.json")
    from pyspark.sql import functions as F  # noqa: N812

    ops = F.when(F.col("id") % 10 == 0, "d").when(F.col("id") < keys, "c").otherwise("u")
    df = (
        spark.range(changes)
        .withColumn("scn", F.lit(1 << 32) + F.col("id") * 10)
        .withColumn("seq", F.lit(0))
        .withColumn("source", F.lit("bench.t"))
        .withColumn("op", ops)
        .withColumn("ts", F.current_timestamp())
        .withColumn("key", F.format_string('{"id":%d}', F.col("id") % keys))
        .withColumn("before", F.lit(None).cast("string"))
        .withColumn("after", F.format_string('{"id":%d,"v":"value"}', F.col("id") % keys))
        .withColumn("schema_version", F.lit(1))
        .withColumn("key_hash", F.crc32(F.encode(F.col("key"), "utf-8")))
        .withColumn("payload", F.lit(payload))
        # one folder, as the log writer's first run of batches (after the store's start, 0)
        .withColumn("after_scn", F.lit(0).cast("long"))
        .drop("id")
    )
    # Through a streaming sink, as the log writer commits: the fold reads only a log that
    # has its ``_spark_metadata`` (``BootstrapStore.has_log``).
    staged = str(work / "staged-log")
    df.select(*[c.split()[0] for c in LOG_DDL.split(", ")]).write.parquet(staged)
    (
        spark.readStream.schema(LOG_DDL)
        .parquet(staged)
        .writeStream.partitionBy("source", "after_scn")
        .format("parquet")
        .option("path", store.spark_path("log"))
        .option("checkpointLocation", str(work / "staged-ckpt"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
    return store


def _fold_bench(
    spark: Any, work: Path, changes: int, keys: int
) -> tuple[dict[str, Any], BootstrapStore]:
    store = _synthetic_store(spark, work, changes, keys)
    full_s = _timed(lambda: fold(spark, store, full=True))
    again_s = _timed(lambda: fold(spark, store, full=True))
    rows = spark.read.parquet(
        store.spark_path(store.snapshot_dir(store.current_snapshot() or 0))
    ).count()
    return {
        "changes": changes,
        "keys": keys,
        "snapshot_rows": rows,
        "fold_full_s_cold": round(full_s, 2),
        "fold_full_s_warm": round(again_s, 2),
        "changes_per_s_warm": round(changes / again_s),
    }, store


def _serve_bench(store: BootstrapStore, rows: int) -> dict[str, Any]:
    with ServiceThread(BootstrapServer(store.uri, port=0)) as server:
        host, port = server.url.removeprefix("http://").split(":")
        began = time.perf_counter()
        conn = http.client.HTTPConnection(host, int(port), timeout=600)
        conn.request("GET", "/snapshot?max_bytes=268435456")
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"/snapshot answered {resp.status}: {resp.read()[:300]!r}")
        size = 0
        while chunk := resp.read1(1 << 20):
            size += len(chunk)
        conn.close()
        seconds = time.perf_counter() - began
    return {
        "rows": rows,
        "seconds": round(seconds, 2),
        "rows_per_s": round(rows / seconds),
        "mb_per_s": round(size / seconds / 1e6, 1),
    }


def run(events: int = 1_000_000, changes: int = 3_000_000, keys: int = 1_000_000) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="sluice-spark-bench-"))
    spark = spark_session("local[2]", "sluice-bench")
    register(spark)
    try:
        stream = _stream_bench(spark, work, events)
        # Batch mode on rows of its own: compare it with its own Parquet figure only.
        stream["ceiling"] = ceiling(spark, work, events)
        folded, store = _fold_bench(spark, work, changes, keys)
        serving = _serve_bench(store, folded["snapshot_rows"])
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    results = {"relay_to_parquet": stream, "fold": folded, "snapshot_serving": serving}
    print(
        table(
            [
                ("measure", "value"),
                (
                    "relay->Parquet, sluice source, Arrow",
                    f"{stream['sluice_arrow_events_per_s']} ev/s",
                ),
                (
                    "relay->Parquet, sluice source, tuples",
                    f"{stream['sluice_tuples_events_per_s']} ev/s",
                ),
                (
                    "Parquet->Parquet, Spark's own source",
                    f"{stream['spark_parquet_events_per_s']} ev/s",
                ),
                (
                    "relay->bootstrap log (`run`'s log writer: raw payload + key)",
                    f"{stream['bootstrap_log_events_per_s']} ev/s",
                ),
                (
                    "bootstrap log vs Spark Parquet",
                    f"{stream['bootstrap_log_vs_spark_parquet']}x",
                ),
                (
                    "relay->bootstrap log, steady (batches after the first)",
                    f"{stream['bootstrap_log_steady_events_per_s']} ev/s (Spark's Parquet source "
                    f"alike: {stream['spark_parquet_steady_events_per_s']} ev/s, "
                    f"{stream['bootstrap_log_steady_vs_spark_parquet']}x)",
                ),
                (
                    "relay capture of the same binlog (a fresh relay)",
                    f"{stream['relay_capture_events_per_s']} ev/s (bootstrap log "
                    f"{stream['bootstrap_log_vs_relay_capture']}x)",
                ),
                (
                    "ceiling: a Python data source yielding pre-built Arrow -> Parquet",
                    f"{stream['ceiling']['python_source_rows_per_s']} rows/s "
                    f"({stream['ceiling']['python_source_vs_spark_parquet']}x Spark's "
                    "Parquet -> Parquet, batch)",
                ),
                ("Arrow vs tuples", f"{stream['arrow_vs_tuples']}x"),
                ("sluice (Arrow) vs Spark Parquet", f"{stream['sluice_arrow_vs_spark_parquet']}x"),
                (
                    "relay->Parquet, sluice source, Arrow, split=scn",
                    f"{stream['sluice_scn_split_events_per_s']} ev/s "
                    f"({stream['sluice_scn_split_vs_spark_parquet']}x Spark's Parquet)",
                ),
                (
                    "relay->Parquet, sluice source, typed columns, split=scn",
                    f"{stream['sluice_typed_events_per_s']} ev/s "
                    f"({stream['sluice_typed_vs_spark_parquet']}x Spark's Parquet of the same "
                    f"rows, {stream['spark_parquet_typed_events_per_s']} ev/s)",
                ),
                (
                    "relay->Parquet over Spark Connect",
                    f"{stream['connect']['sluice_connect_events_per_s']} ev/s "
                    f"({stream['connect']['connect_vs_classic']}x classic)",
                ),
                (
                    f"fold {changes:,} changes / {keys:,} keys (warm)",
                    f"{folded['fold_full_s_warm']} s",
                ),
                (
                    "snapshot serving",
                    f"{serving['rows_per_s']} rows/s ({serving['mb_per_s']} MB/s)",
                ),
            ]
        )
    )
    print("wrote", write_results("spark", results))
    asyncio.set_event_loop(None)
    return results


def stream_only(events: int = 1_000_000) -> dict[str, Any]:
    """Only the relay -> Parquet measures (``python -m benchmarks.spark_path stream``)."""
    work = Path(tempfile.mkdtemp(prefix="sluice-spark-bench-"))
    spark = spark_session("local[2]", "sluice-bench")
    register(spark)
    try:
        stream = _stream_bench(spark, work, events)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(stream, indent=2))
    return stream


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--source-vs-ceiling"]:
        from benchmarks import spark_source

        spark_source.run()
    else:
        stream_only() if sys.argv[1:] == ["stream"] else run()
