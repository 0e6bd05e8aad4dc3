"""Changes merged into Delta Lake tables from Spark, exactly once: SCD type 1 or 2.

``apply_changes(batch, batch_id, target, keys=..., mode=...)`` is for ``foreachBatch`` over
the ``sluice`` source's typed rows of one table (``.option("typed", "true")``): one MERGE per
micro-batch, made idempotent by Delta's transaction identifiers (``txnAppId`` = ``app_id``,
``txnVersion`` = the batch id: a batch run again after a crash is skipped by Delta itself),
with the highest SCN it applies in the commit's ``userMetadata`` (``{"sluice.scn": N}``).
``read_as_of(spark, target, scn)`` reads a table as it was after an SCN.

Delta's runtime must be on the session's classpath: ``delta_settings()`` says how (the jars
``make delta-jars`` fetched, else Maven coordinates for ``spark.jars.packages``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sluice.errors import ConfigError
from sluice.spark import lake_sql
from sluice.spark.lake_sql import CURRENT, END_SCN, SCD2_COLUMNS, START_SCN, MergePlan, quote

log = logging.getLogger(__name__)

DELTA_VERSION = "4.4.0"  # java/delta/pom.xml's
DELTA_PACKAGE = f"io.delta:delta-spark_4.2_2.13:{DELTA_VERSION}"
Mode = Literal["scd1", "scd2"]
_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_SCN_KEY = "sluice.scn"


def delta_libs() -> Path:
    """Where ``make delta-jars`` puts Delta's jars: ``$SLUICE_CACHE/delta-VERSION/libs``."""
    cache = os.environ.get("SLUICE_CACHE") or Path.home() / ".cache" / "sluice" / "maven"
    return Path(cache) / f"delta-{DELTA_VERSION}" / "libs"


def delta_jars(libs: Path | None = None) -> list[Path]:
    """Delta's jars in ``libs`` minus those pyspark ships (same artifact, any version)."""
    libs = libs or delta_libs()
    if not (libs / ".pom.sha256").is_file():
        return []
    import pyspark  # noqa: PLC0415  (only a Spark job asks)

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(p for p in libs.glob("*.jar") if _artifact(p.name) not in shipped)


def _artifact(jar: str) -> str:
    return re.sub(r"-\d[^-]*(-\d+)?\.jar$", "", jar)


def delta_settings(libs: Path | None = None) -> dict[str, str]:
    """A session's settings for Delta: its SQL extension and catalog, and its jars (those
    ``make delta-jars`` fetched, else ``spark.jars.packages``: Spark fetches them from Maven
    Central at start). Deletion vectors stay off, so delta-rs readers read the tables too."""
    jars = delta_jars(libs)
    settings = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
    }
    if jars:
        settings["spark.jars"] = ",".join(str(j) for j in jars)
    else:
        settings["spark.jars.packages"] = DELTA_PACKAGE
    return settings


# This process's own knowledge of its tables, to spare a Spark job per batch: the last batch
# each writer committed to a table, and the columns a table is known to have.
_committed: dict[tuple[str, str], int] = {}
_columns: dict[str, set[str]] = {}


@dataclass(frozen=True)
class LakeCommit:
    """What one ``apply_changes`` did: the changes it read, the SCN it reached."""

    changes: int
    scn: int
    truncates: int


def apply_changes(
    batch: Any,
    batch_id: int,
    target: str,
    *,
    keys: Sequence[str],
    mode: Mode = "scd1",
    app_id: str | None = None,
) -> LakeCommit | None:
    """MERGE one micro-batch of typed changes into the Delta table at path ``target``
    (created when missing). Pass the source's batch as it is (filters and projections are
    fine, no shuffle before): a key's changes are ordered by SCN and their place in it.
    ``app_id`` names the writer for Delta's idempotence (default: ``sluice:`` + the path);
    a new query (a new checkpoint) on the same table needs a new one. None: an empty batch,
    or one ``app_id`` committed already (a batch run again after a crash)."""
    if mode not in ("scd1", "scd2"):
        raise ConfigError(f"mode {mode!r}: scd1 or scd2")
    path = _absolute(target)
    columns = [c for c in batch.columns if c not in ("_scn", "_op", "_ts")]
    _check_keys(keys, columns, path)
    from pyspark.sql import functions as F  # noqa: PLC0415, N812

    spark = batch.sparkSession
    app = app_id or f"sluice:{path}"
    # what this process committed is known; the table's history is read once (a Spark job)
    done = _committed[(path, app)] if (path, app) in _committed else app_version(spark, path, app)
    if done is not None and done >= batch_id:  # committed before a crash: Delta would skip it
        log.warning(
            "Delta table %s: batch %d of %s was committed before (a run again after a crash): "
            "skipped", path, batch_id, app,
        )  # fmt: skip
        return None
    prepared = batch.withColumn("_seq", F.monotonically_increasing_id()).persist()
    view = f"sluice_batch_{uuid.uuid4().hex}"
    try:
        summary = prepared.agg(
            F.count(F.lit(1)).alias("n"),
            F.max("_scn").alias("scn"),
            F.min("_scn").alias("first"),
            F.sum(F.when(F.col("_op") == "t", 1).otherwise(0)).alias("t"),
        ).first()
        if summary is None or not summary["n"]:
            return None
        _ensure_table(spark, path, batch.schema, mode, keys)
        truncates = (
            prepared.where("_op = 't'").orderBy("_scn", "_seq")
            .selectExpr("_scn", "_seq", "unix_micros(_ts) AS micros").collect()
            if summary["t"] else []
        )  # fmt: skip
        plan = MergePlan(lake_sql.table_ref(path), tuple(columns), tuple(keys), bool(truncates))
        if mode == "scd1":
            _scd1_source(prepared, keys, truncates).createOrReplaceTempView(view)
            text = lake_sql.scd1_merge(plan, view)
        else:
            _scd2_source(prepared, keys, columns, truncates).createOrReplaceTempView(view)
            first = (truncates[0]["_scn"], truncates[0]["micros"]) if truncates else None
            text = lake_sql.scd2_merge(plan, view, first)
        metadata = json.dumps({
            _SCN_KEY: summary["scn"], "sluice.first_scn": summary["first"],
            "sluice.batch": batch_id, "sluice.app": app,
        })  # fmt: skip
        with _session_conf(spark, {
            _TXN_APP: app, _TXN_VERSION: str(batch_id),
            _USER_METADATA: metadata,
        }):  # fmt: skip
            spark.sql(text)
        _committed[(path, app)] = batch_id
        return LakeCommit(int(summary["n"]), int(summary["scn"]), int(summary["t"]))
    finally:
        spark.catalog.dropTempView(view)
        prepared.unpersist()


def _absolute(target: str) -> str:
    path = target.removeprefix("delta:")
    if "://" in path:
        return path  # s3a://, abfss://...: as given
    return str(Path(path).absolute())


def _check_keys(keys: Sequence[str], columns: Sequence[str], path: str) -> None:
    if not keys:
        raise ConfigError(
            f"Delta table {path}: no key columns: SCD1 and SCD2 match rows by key (a table "
            "without a primary key cannot be merged; give keys=...)"
        )
    missing = [k for k in keys if k not in columns]
    if missing:
        raise ConfigError(f"Delta table {path}: key columns {missing} are not in the batch")


def _scd1_source(prepared: Any, keys: Sequence[str], truncates: list[Any]) -> Any:
    from pyspark.sql import Window  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415, N812

    rows = prepared.where("_op <> 't'")
    if truncates:  # only what follows the last truncate survives it
        last = truncates[-1]
        rows = rows.where(
            (F.col("_scn") > last["_scn"])
            | ((F.col("_scn") == last["_scn"]) & (F.col("_seq") > last["_seq"]))
        )
    order = Window.partitionBy(*keys).orderBy(F.col("_scn").desc(), F.col("_seq").desc())
    return rows.withColumn("_rn", F.row_number().over(order)).where("_rn = 1").drop("_rn")


def _scd2_source(
    prepared: Any, keys: Sequence[str], columns: Sequence[str], truncates: list[Any]
) -> Any:
    """Every version the batch makes (ended by its key's next change or a later truncate),
    and one closing row per key for the version current before the batch."""
    from pyspark.sql import Window  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415, N812

    # a transaction's changes of one key are one version: only its last was ever visible
    last_in_scn = Window.partitionBy(*keys, "_scn").orderBy(F.col("_seq").desc())
    rows = (
        prepared.where("_op <> 't'")
        .withColumn("_rn", F.row_number().over(last_in_scn)).where("_rn = 1").drop("_rn")
    )  # fmt: skip
    order = Window.partitionBy(*keys).orderBy("_scn", "_seq")
    rows = rows.withColumn("_next_scn", F.lead("_scn").over(order)).withColumn(
        "_next_at", F.lead("_ts").over(order)
    )
    end_scn, end_at = F.col("_next_scn"), F.col("_next_at")
    for t in reversed(truncates):  # the first truncate after a change ends it, if sooner
        after = (F.col("_scn") < t["_scn"]) | (
            (F.col("_scn") == t["_scn"]) & (F.col("_seq") < t["_seq"])
        )
        sooner = after & (end_scn.isNull() | (end_scn > t["_scn"]))
        end_at = F.when(sooner, F.timestamp_micros(F.lit(t["micros"]))).otherwise(end_at)
        end_scn = F.when(sooner, F.lit(t["_scn"])).otherwise(end_scn)
    versions = rows.where("_op <> 'd'").select(
        *[F.col(c) for c in columns],
        *[F.lit(None).cast(rows.schema[k].dataType).alias("_mk_" + k) for k in keys],
        "_scn", "_ts", "_op",
        end_scn.alias("_end_scn"), end_at.alias("_end_at"),
        F.lit(False).alias("_closing"),
    )  # fmt: skip
    first = Window.partitionBy(*keys).orderBy("_scn", "_seq")
    firsts = rows.withColumn("_rn", F.row_number().over(first)).where("_rn = 1")
    close_scn, close_at = F.col("_scn"), F.col("_ts")
    if truncates:
        t = truncates[0]
        earlier = F.col("_scn") > t["_scn"]
        close_at = F.when(earlier, F.timestamp_micros(F.lit(t["micros"]))).otherwise(close_at)
        close_scn = F.when(earlier, F.lit(t["_scn"])).otherwise(close_scn)
    closing = firsts.select(
        *[F.lit(None).cast(rows.schema[c].dataType).alias(c) for c in columns],
        *[F.col(k).alias("_mk_" + k) for k in keys],
        "_scn", "_ts", "_op",
        close_scn.alias("_end_scn"), close_at.alias("_end_at"),
        F.lit(True).alias("_closing"),
    )  # fmt: skip
    return versions.unionByName(closing)


def _ensure_table(spark: Any, path: str, schema: Any, mode: Mode, keys: Sequence[str]) -> None:
    """Create the table when missing; add the batch's new columns (the source's schema
    evolved) when it exists."""
    fields = [f for f in schema.fields if f.name not in ("_scn", "_op", "_ts")]
    ref = lake_sql.table_ref(path)
    if not _is_delta(spark, path):
        ddl = [f"{quote(f.name)} {f.dataType.simpleString()}" for f in fields]
        if mode == "scd2":
            ddl += [f"{quote(START_SCN)} bigint", f"{quote(END_SCN)} bigint",
                    "`__start_at` timestamp", "`__end_at` timestamp", "`__op` string",
                    f"{quote(CURRENT)} boolean"]  # fmt: skip
        spark.sql(lake_sql.create_table(path, ", ".join(ddl)))
        _columns[path] = {f.name for f in fields}
        log.info("Delta table %s created (%s, keys %s)", path, mode, ", ".join(keys))
        return
    if _columns.get(path, set()) >= {f.name for f in fields}:
        return  # seen in this process: no new column since
    have = {f.name for f in spark.read.format("delta").load(path).schema.fields}
    new = [f for f in fields if f.name not in have]
    _columns[path] = have | {f.name for f in new}
    if new:
        added = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in new)
        spark.sql(f"ALTER TABLE {ref} ADD COLUMNS ({added})")
        log.warning("Delta table %s: columns added: %s", path, ", ".join(f.name for f in new))


def _is_delta(spark: Any, path: str) -> bool:
    jvm = getattr(spark, "_jvm", None)
    if jvm is not None:
        return bool(jvm.io.delta.tables.DeltaTable.isDeltaTable(spark._jsparkSession, path))
    return Path(path, "_delta_log").is_dir()


@contextmanager
def _session_conf(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """Set for one statement: Delta reads its transaction identifiers from the session, and
    they would stay set for the next write (which would then be skipped as a repeat)."""
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in settings:
            spark.conf.unset(key)


# -- reading --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableVersion:
    version: int
    scn: int | None  # None: a version sluice did not write (its creation, a user's change)
    app: str | None = None
    batch: int | None = None
    first_scn: int | None = None  # the lowest SCN of the batch's changes


def versions(spark: Any, target: str) -> list[TableVersion]:
    """The table's versions, oldest first, with the SCN each reflects, the writer and its
    batch id (from the commit's ``userMetadata``, which only sluice's commits carry)."""
    path = _absolute(target)
    rows = spark.sql(f"DESCRIBE HISTORY {lake_sql.table_ref(path)}").select(
        "version", "userMetadata"
    ).collect()  # fmt: skip
    out = []
    for row in sorted(rows, key=lambda r: r["version"]):
        meta: dict[str, Any] = {}
        if row["userMetadata"]:
            try:
                loaded = json.loads(row["userMetadata"])
            except ValueError:
                loaded = None
            meta = loaded if isinstance(loaded, dict) else {}
        scn, batch, first = (meta.get(k) for k in (_SCN_KEY, "sluice.batch", "sluice.first_scn"))
        out.append(TableVersion(
            int(row["version"]), scn if isinstance(scn, int) else None,
            meta.get("sluice.app"), batch if isinstance(batch, int) else None,
            first if isinstance(first, int) else None,
        ))  # fmt: skip
    return out


def read_as_of(spark: Any, target: str, scn: int) -> Any:
    """The table as it was after SCN ``scn``. An SCD2 table answers exactly at any SCN (from
    its versions' ``__start_scn``/``__end_scn``); an SCD1 table from Delta's time travel, at
    the newest version whose batch ended at or before ``scn`` (batches end at window
    boundaries). Raises ``ConfigError`` for an SCN before the table's first batch, or inside
    a batch (the SCD1 table never held that state)."""
    path = _absolute(target)
    if not _is_delta(spark, path):
        raise ConfigError(f"{path} is not a Delta table")
    table = spark.read.format("delta").load(path)
    if START_SCN in table.columns:
        live = table.where(
            f"{quote(START_SCN)} <= {int(scn)} AND "
            f"({quote(END_SCN)} IS NULL OR {quote(END_SCN)} > {int(scn)})"
        )
        return live.drop(*SCD2_COLUMNS)
    known = [(v.scn, v) for v in versions(spark, path) if v.scn is not None]
    at = [v for reached, v in known if reached <= scn]
    inside = [v for reached, v in known if reached > scn and (v.first_scn or reached) <= scn]
    if inside:  # the table never held that state: the batch applied its changes at once
        v = inside[0]
        raise ConfigError(
            f"Delta table {path} (SCD1) has no version as of SCN {scn}: it falls inside batch "
            f"{v.batch} (SCNs {v.first_scn} to {v.scn}), applied at once. An SCD1 table "
            "answers between batches; an SCD2 table (--mode scd2) answers at any SCN"
        )
    if not at:
        first = known[0][0] if known else None
        raise ConfigError(
            f"Delta table {path} holds no state as of SCN {scn}: its first batch reached "
            f"SCN {first}" if first is not None else f"Delta table {path} has no batch yet"
        )
    return spark.read.format("delta").option("versionAsOf", at[-1].version).load(path)


def table_scn(spark: Any, target: str) -> int | None:
    """The SCN the table's newest sluice commit reflects (None: none yet)."""
    known = [v.scn for v in versions(spark, target) if v.scn is not None]
    return known[-1] if known else None


def app_version(spark: Any, target: str, app_id: str) -> int | None:
    """The last batch id ``app_id`` committed to the table (None: none, or no table)."""
    path = _absolute(target)
    if not _is_delta(spark, path):
        return None
    mine = [v.batch for v in versions(spark, path) if v.app == app_id and v.batch is not None]
    return max(mine) if mine else None


__all__ = [
    "DELTA_PACKAGE",
    "LakeCommit",
    "TableVersion",
    "app_version",
    "apply_changes",
    "delta_jars",
    "delta_settings",
    "read_as_of",
    "table_scn",
    "versions",
]
