"""Folding the change log (and seeded rows) into a snapshot per source: the newest row per key
by SCN, deletes removed.

A snapshot generation is published at one SCN for every source: catch-up from that SCN gives
every change the generation may lack. Incremental: the new generation folds the previous one
with the log after its SCN. A source with a new seed generation is folded from its seeded rows
(each stamped with its chunk's SCN) and every logged change after the seed's oldest chunk, and
its rows in the previous generation are dropped: that is exact when the log covers every SCN
after the oldest chunk, which ``check_coverage`` makes sure of.

A ``t`` (TRUNCATE) event drops every row of its source with an older (SCN, seq), whether
from the previous generation, a seed or the log.

A gap in the log (op ``g`` markers: the job fell behind and the source had purged the binlogs)
blocks every source whose base (the previous generation, or its fresh seed's oldest chunk) is
older than the gap's end: no generation is published until those sources are seeded again
(``bootstrap run --seed`` does it by itself).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pyspark.sql import Column, Window
from pyspark.sql import functions as F  # noqa: N812

from sluice.bootstrap import logparts
from sluice.bootstrap.reader import log_buckets
from sluice.bootstrap.seed.records import Seeded, SeedRecords
from sluice.bootstrap.store import BootstrapStore, Gap, StoreMeta, gaps_after, partition_dir
from sluice.errors import ConfigError
from sluice.spark.rows import GENERIC_DDL, RAW_DDL

log = logging.getLogger(__name__)
LOG_DDL = GENERIC_DDL + RAW_DDL + f", {logparts.COLUMN} long"
# The payload is the row (Avro, its schema version's); no JSON copy of it is kept: the server
# and the Spark source decode payloads, and `reader.snapshot_rows` does for direct readers.
SNAPSHOT_COLUMNS = ("source", "key", "key_hash", "scn", "seq", "schema_version", "payload")
SNAPSHOT_DDL = (
    "source string, key string, key_hash long, scn long, seq int, schema_version int, "
    "payload binary"
)


def check_coverage(store: BootstrapStore, seeded: Seeded) -> None:
    """Refuse seeded rows older than the log: changes between them and the log's start are in
    neither, so a snapshot built from them could be stale."""
    start = store.meta().start_of(seeded.source)
    if seeded.min_scn < start:
        raise ConfigError(
            f"seeded rows of {seeded.source} are at SCN {seeded.min_scn}, older than this "
            f"store's log (it starts after SCN {start}): the changes in between are in neither; "
            "seed again now (the new chunks will be newer than the log's start)",
            source=seeded.source,
        )


def fold(spark: Any, store: BootstrapStore, *, full: bool = False) -> int | None:
    """Publish a new snapshot generation; returns its SCN (None if there is nothing yet)."""
    with store.fold_lock():
        return _fold(spark, store, full)


def read_log(spark: Any, store: BootstrapStore) -> Any:
    """The committed log as a DataFrame (None before the first commit); a log in the old
    layout is refused."""
    if not store.has_log():
        return None
    log_buckets(store)
    return spark.read.schema(LOG_DDL).parquet(store.spark_path("log"))


def log_gaps(changes: Any) -> list[Gap]:
    if changes is None:
        return []
    markers = changes.where(F.col("op") == "g").select("source", "scn", "after").collect()
    return sorted(Gap.from_marker(r[0], r[1], r[2]) for r in markers)


def blocked_sources(
    meta: StoreMeta, previous: int | None, fresh: dict[str, Seeded], gaps: list[Gap]
) -> dict[str, Gap]:
    """Sources whose next generation would be built across a gap, with the gap."""
    blocked: dict[str, Gap] = {}
    for source in meta.sources:
        if source in fresh:
            base = fresh[source].min_scn
        else:
            base = meta.start_of(source) if previous is None else previous
        for gap in gaps_after(gaps, base, [source]):
            blocked.setdefault(source, gap)
    return blocked


def blocked_by_gaps(spark: Any, store: BootstrapStore) -> dict[str, Gap]:
    """The sources that need a new seed before the next generation can be published."""
    meta = store.meta()
    current = store.current()
    previous = None if current is None else int(current["scn"])
    done_seeds: dict[str, int] = {} if current is None else dict(current["seeds"])
    seeds = SeedRecords(store).all_seeded(meta.sources)
    fresh = {s: r for s, r in seeds.items() if done_seeds.get(s) != r.generation}
    return blocked_sources(meta, previous, fresh, log_gaps(read_log(spark, store)))


def _fold(spark: Any, store: BootstrapStore, full: bool) -> int | None:
    started = time.monotonic()
    meta = store.meta()
    current = store.current()
    previous = None if full or current is None else int(current["scn"])
    done_seeds: dict[str, int] = {} if full or current is None else dict(current["seeds"])
    seeds = SeedRecords(store).all_seeded(meta.sources)
    fresh = {s: r for s, r in seeds.items() if done_seeds.get(s) != r.generation}
    for seeded in fresh.values():
        check_coverage(store, seeded)
    changes = read_log(spark, store)
    blocked = blocked_sources(meta, previous, fresh, log_gaps(changes))
    if blocked:
        log.warning(
            "no new snapshot: the log has a gap (%s); seed %s again to publish one",
            "; ".join(
                f"{s}: after SCN {g.after_scn} up to {g.until_scn}" for s, g in blocked.items()
            ),
            ", ".join(blocked),
        )
        return None if current is None else int(current["scn"])
    newest = max(meta.log_start_scn, _max_scn(changes) if changes is not None else 0)
    if previous is not None and newest <= previous and not fresh:
        return previous
    newest = max(newest, previous or 0)  # new seeds on an idle log: a new folder, same SCN
    if changes is None and not fresh and previous is None:
        return None
    changed = truncates = None
    adopted = dict(fresh)
    if changes is not None:
        window = _log_window(previous, fresh, log_buckets(store))
        in_range = changes.where((F.col("scn") <= newest) & window)
        changed = in_range.where(F.col("key").isNotNull()).select(*SNAPSHOT_COLUMNS, "op")
        # TRUNCATE: every row of the source older than it is gone.
        truncates = (
            in_range.where(F.col("op") == "t")
            .groupBy("source")
            .agg(F.max(F.struct("scn", "seq")).alias("_truncated"))
        )
        adopted = _quiet(in_range, fresh)
    bases = []  # rows already one per key: the previous generation's and fresh seeds'
    if previous is not None:
        base = spark.read.schema(SNAPSHOT_DDL).parquet(
            store.spark_path(store.snapshot_dir(previous))
        )
        if fresh:
            base = base.where(~F.col("source").isin(list(fresh)))
        bases.append(base.select(*SNAPSHOT_COLUMNS))
    records = SeedRecords(store)
    for source, seeded in fresh.items():
        if source not in adopted:
            paths = records.chunk_paths(seeded)
            bases.append(spark.read.schema(SNAPSHOT_DDL).parquet(*paths).select(*SNAPSHOT_COLUMNS))
    folder = store.new_snapshot_dir(newest)
    rows = _latest(changed, bases, truncates)
    if rows is not None:
        _write(rows, store.spark_path("snapshots", folder))
    for seeded in adopted.values():
        _adopt(store, records, seeded, folder)
    store.publish(newest, {**done_seeds, **{s: r.generation for s, r in fresh.items()}}, folder)
    log.info(
        "snapshot at SCN %d published in %.1f s (%s%s)",
        newest,
        time.monotonic() - started,
        "full fold" if previous is None else f"incremental from {previous}",
        f"; seeded: {', '.join(sorted(fresh))}" if fresh else "",
    )
    return int(newest)


def _quiet(in_range: Any, fresh: dict[str, Seeded]) -> dict[str, Seeded]:
    """The fresh seeds whose source has no logged event (change, TRUNCATE) after its oldest
    chunk: their rows are the newest there is, and their chunk files (disjoint key ranges,
    one row per key) are taken into the generation as they are, not read and rewritten."""
    if not fresh:
        return {}
    logged = in_range.where(F.col("source").isin(list(fresh))).select("source").distinct()
    touched = {r[0] for r in logged.collect()}
    return {s: r for s, r in fresh.items() if s not in touched}


def _adopt(store: BootstrapStore, records: SeedRecords, seeded: Seeded, folder: str) -> None:
    """Copy a seed's chunk files into the generation's folder of its source, in chunk order
    (primary-key order: a row's position counts across the files in name order). Readers
    take ``source`` from the folder, as for the files Spark writes."""
    target = ("snapshots", folder, partition_dir("source", seeded.source))
    store.fs.create_dir(store.path(*target))
    for index in range(seeded.chunks):
        chunk = store.path(*records.chunk_file(seeded.source, seeded.generation, index))
        name = f"seed-{seeded.generation:05d}-chunk-{index:05d}.parquet"
        store.fs.copy_file(chunk, store.path(*target, name))


def _max_scn(changes: Any) -> int:
    newest = changes.agg(F.max("scn")).first()[0]
    return int(newest or 0)


def _log_window(
    previous: int | None, fresh: dict[str, Seeded], buckets: list[int] | None
) -> Column:
    """Which logged changes the new generation needs: after the previous generation, and for
    a freshly seeded source everything after its oldest chunk. Folders of the log that hold
    only older SCNs are not read (``logparts.first_needed``)."""
    stale = F.lit(True) if previous is None else F.col("scn") > previous
    lowest = min([previous or 0, *(r.min_scn for r in fresh.values())])
    condition = (~F.col("source").isin(list(fresh)) & stale) if fresh else stale
    for source, seeded in fresh.items():
        condition = condition | ((F.col("source") == source) & (F.col("scn") > seeded.min_scn))
    first = None if buckets is None else logparts.first_needed(buckets, lowest)
    if first is None:
        return condition
    return (F.col(logparts.COLUMN) >= first) & condition


# Parquet row group size of snapshot files (Spark's default is 128 MiB).
SNAPSHOT_ROW_GROUP_BYTES = 16 << 20


def _latest(changed: Any, bases: list[Any], truncates: Any) -> Any:
    """The newest row per key, deletes removed. Each base holds one row per key and the bases
    hold disjoint sources, so only keys the log changed need ranking: the other base rows
    pass through without the window's shuffle (a seed or an idle table is not re-sorted twice).
    """
    base = None
    for part in bases:
        base = part if base is None else base.unionByName(part)
    if truncates is not None:
        changed = _not_truncated(changed, truncates)
        base = None if base is None else _not_truncated(base, truncates)
    if changed is None:
        return base
    if base is None:
        return _rank(changed)
    touched = changed.select("source", "key").distinct()
    untouched = base.join(touched, ["source", "key"], "left_anti")
    contested = base.join(touched, ["source", "key"], "left_semi").withColumn("op", F.lit("r"))
    return untouched.unionByName(_rank(contested.unionByName(changed)))


def _not_truncated(rows: Any, truncates: Any) -> Any:
    """Rows newer than their source's last TRUNCATE."""
    kept = rows.join(F.broadcast(truncates), "source", "left").where(
        F.col("_truncated").isNull() | (F.struct("scn", "seq") > F.col("_truncated"))
    )
    return kept.drop("_truncated")


def _rank(rows: Any) -> Any:
    latest = Window.partitionBy("source", "key").orderBy(F.col("scn").desc(), F.col("seq").desc())
    return (
        rows.withColumn("_rank", F.row_number().over(latest))
        .where((F.col("_rank") == 1) & (F.col("op") != "d"))
        .select(*SNAPSHOT_COLUMNS)
    )


def _write(snapshot: Any, path: str) -> None:
    """Each task writes its rows sorted by (source, key), without a shuffle: rows that pass
    through (a seed, the previous generation) stay in the tasks that read them, so a big
    table is written by every core, not by one task per source. A source's files are each
    in key order (an adopted seed's chunks: in primary-key order); the files, in name order,
    give every row a stable position."""
    (
        # (source, key), not key alone: the writer needs rows ordered by its partition column
        # and would otherwise add its own sort by source, which drops the sort by key
        snapshot.sortWithinPartitions("source", "key")
        .write.mode("overwrite")
        # small row groups: the server reads a snapshot a row group at a time
        .option("parquet.block.size", SNAPSHOT_ROW_GROUP_BYTES)
        .partitionBy("source")
        .parquet(path)
    )
