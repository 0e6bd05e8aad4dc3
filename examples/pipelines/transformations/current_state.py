"""``current_state``: each source table's current rows, folded from ``changes``.

The fold is Sluice's own (``sluice.bootstrap.fold``): per (source, key) the event with the
highest (scn, seq) wins and a delete removes the key; a truncate (op ``t``, no key) removes
every row of its source older than it, by (scn, seq).

Only ``select``/``where``/``join``/``groupBy`` here, no ``withColumn`` or ``drop``: Spark
Connect analyzes those two when the view is defined, and once ``changes`` exists in the catalog
(any run after the first) that binds the read to the catalog table instead of the pipeline's
dataset: the view would then no longer wait for this run's changes.
"""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812

# spark-pipelines puts its session (Spark Connect) in this module before running it
spark: SparkSession = globals()["spark"]

ORDER = F.struct("scn", "seq")  # an event's place in the log


def _after_truncates(changes: DataFrame) -> DataFrame:
    """Keyed events newer than their source's last truncate."""
    truncated = (
        changes.where(F.col("op") == "t").groupBy("source").agg(F.max(ORDER).alias("_truncated"))
    )
    return (
        changes.where(F.col("key").isNotNull())
        .join(F.broadcast(truncated), "source", "left")
        .where(F.col("_truncated").isNull() | (F.col("_truncated") < ORDER))
    )


@dp.materialized_view(comment="Current row (JSON) of each key of each source table.")
def current_state() -> DataFrame:
    newest_first = Window.partitionBy("source", "key").orderBy(
        F.col("scn").desc(), F.col("seq").desc()
    )
    return (
        _after_truncates(spark.read.table("changes"))
        .select("*", F.row_number().over(newest_first).alias("_rank"))
        .where((F.col("_rank") == 1) & (F.col("op") != "d"))
        .select("source", "key", F.col("after").alias("row"), "scn", "seq", "ts")
    )
