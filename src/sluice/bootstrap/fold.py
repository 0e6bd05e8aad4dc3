"""Folding the change log into a snapshot per source (latest row per key, deletes removed).

A snapshot generation is consistent at one SCN for every source, so catch-up from that SCN
never hands a consumer an older row state after a newer one. Incremental: the new generation
folds the previous one with the log after its SCN.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql import Window
from pyspark.sql import functions as F  # noqa: N812

from sluice.bootstrap.store import BootstrapStore
from sluice.spark.rows import GENERIC_DDL, RAW_DDL

log = logging.getLogger(__name__)
LOG_DDL = GENERIC_DDL + RAW_DDL + ", log_file long"
SNAPSHOT_COLUMNS = ("source", "key", "key_hash", "scn", "seq", "schema_version", "payload", "after")


def fold(spark: Any, store: BootstrapStore, *, full: bool = False) -> int | None:
    """Publish a new snapshot generation; returns its SCN (None if the log is empty)."""
    if not store.has_log():
        return store.current_snapshot()
    started = time.monotonic()
    changes = spark.read.schema(LOG_DDL).parquet(store.spark_path("log"))
    newest = changes.agg(F.max("scn")).first()[0]
    previous = None if full else store.current_snapshot()
    if newest is None or (previous is not None and newest <= previous):
        return previous
    changes = changes.where((F.col("scn") <= newest) & F.col("key").isNotNull())
    if previous is not None:
        changes = changes.where((F.col("log_file") >= previous >> 32) & (F.col("scn") > previous))
    rows = changes.select(*SNAPSHOT_COLUMNS, "op")
    if previous is not None:
        base = spark.read.parquet(store.spark_path(store.snapshot_dir(previous)))
        rows = rows.unionByName(base.select(*SNAPSHOT_COLUMNS).withColumn("op", F.lit("r")))
    latest = Window.partitionBy("source", "key").orderBy(F.col("scn").desc(), F.col("seq").desc())
    snapshot = (
        rows.withColumn("_rank", F.row_number().over(latest))
        .where((F.col("_rank") == 1) & (F.col("op") != "d"))
        .select(*SNAPSHOT_COLUMNS)
    )
    (
        snapshot.repartition("source")
        .sortWithinPartitions("key")
        .write.mode("overwrite")
        .partitionBy("source")
        .parquet(store.spark_path(store.snapshot_dir(newest)))
    )
    store.publish(newest)
    log.info(
        "snapshot at SCN %d published in %.1f s (%s)",
        newest,
        time.monotonic() - started,
        "full fold" if previous is None else f"incremental from {previous}",
    )
    return int(newest)
