"""AUTO CDC flows from ``changes`` (only with ``sluice.autoCdc: "true"``): ``current_scd1``
(the current row per key) and ``history_scd2`` (every version, with __START_AT/__END_AT).

Their targets must take MERGE through Spark's row-level operations (DSv2), which neither the
default catalog's Parquet tables nor Delta Lake 4.4's tables implement: the run then fails
with AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE. Iceberg's tables do, but no Iceberg runtime
exists for Spark 4.2 or 4.3. ``sluice lake run`` merges into Delta tables instead.
AUTO CDC has no truncate: a truncate (op ``t``) is left out here; ``current_state`` applies it.
"""

import pyspark
from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

# spark-pipelines puts its session (Spark Connect) in this module before running it
spark: SparkSession = globals()["spark"]

KEYS = ["source", "key"]
SEQUENCE = "struct(scn, seq)"  # the SCN orders events; seq orders those of one SCN
DELETES = "op = 'd'"
METADATA = ["op", "scn", "seq", "ts"]  # not copied into the targets: they keep source, key, row


def _enabled() -> bool:
    return (spark.conf.get("sluice.autoCdc", None) or "false").strip().lower() == "true"


if _enabled():

    @dp.temporary_view
    def keyed_changes() -> DataFrame:
        return (
            spark.readStream.table("changes")
            .where("key IS NOT NULL")
            .selectExpr("source", "key", "after AS row", "op", "scn", "seq", "ts")
        )

    dp.create_streaming_table("current_scd1", comment="Current row per key (SCD type 1).")
    dp.create_auto_cdc_flow(
        target="current_scd1",
        source="keyed_changes",
        keys=KEYS,
        sequence_by=SEQUENCE,
        apply_as_deletes=DELETES,
        except_column_list=METADATA,
        stored_as_scd_type=1,
    )

    # SCD type 2 flows exist from PySpark 4.3 on (4.2 takes type 1 only); sluice pins 4.2.0,
    # the newest Spark Delta Lake supports, so this one is defined only on a newer Spark
    if tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 3):
        dp.create_streaming_table("history_scd2", comment="Every version per key (SCD type 2).")
        dp.create_auto_cdc_flow(
            target="history_scd2",
            source="keyed_changes",
            keys=KEYS,
            sequence_by=SEQUENCE,
            apply_as_deletes=DELETES,
            except_column_list=METADATA,
            stored_as_scd_type=2,
        )
