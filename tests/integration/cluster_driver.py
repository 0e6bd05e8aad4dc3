"""A Spark driver for the cluster test: the relay's events through the ``sluice`` source into
a Parquet sink (``availableNow``); prints one JSON line saying where it ran. Run it with
``spark-submit`` (which sets the master)::

    spark-submit --master URL tests/integration/cluster_driver.py RELAY SOURCES OUT

The test runs ``stream_to_parquet`` in its own ``local[2]`` session too, for the comparison.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sluice.bootstrap.job import spark_session
from sluice.spark import register


def stream_to_parquet(spark: Any, relay: str, sources: str, out: str) -> int:
    """Read what the relay holds into ``OUT/log`` (checkpoint ``OUT/checkpoint``) in a few
    micro-batches; how many."""
    stream = (
        spark.readStream.format("sluice")
        .option("relay", relay)
        .option("sources", sources)
        .option("startingScn", "earliest")
        .option("partitions", "2")  # two read tasks per batch: one per worker's core
        .option("maxEventsPerTrigger", "80")  # a few batches, each committed on its own
        .load()
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", f"{out}/log")
        .option("checkpointLocation", f"{out}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return len(query.recentProgress)


def main(relay: str, sources: str, out: str) -> None:
    spark = spark_session(None, "sluice-cluster-stream")
    register(spark)
    batches = stream_to_parquet(spark, relay, sources, out)
    context = spark.sparkContext
    print(
        json.dumps(
            {
                "master": context.master,
                "app_id": context.applicationId,
                # the driver's entry included
                "executors": len(context._jsc.sc().statusTracker().getExecutorInfos()),
                "batches": batches,
            }
        ),
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
