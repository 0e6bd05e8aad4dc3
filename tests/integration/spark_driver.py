"""A Spark driver for the SIGKILL test: stream a relay into a Parquet sink until killed."""

from __future__ import annotations

import sys

from sluice.bootstrap.job import spark_session
from sluice.spark import register


def main(relay: str, out: str, mode: str) -> None:
    spark = spark_session("local[2]", "sluice-kill-test")
    register(spark)
    stream = (
        spark.readStream.format("sluice")
        .option("relay", relay)
        .option("maxEventsPerTrigger", "50")
        .load()
    )
    writer = (
        stream.writeStream.format("parquet")
        .option("path", f"{out}/data")
        .option("checkpointLocation", f"{out}/checkpoint")
    )
    if mode == "once":
        writer.trigger(availableNow=True).start().awaitTermination()
    else:
        print("started", flush=True)
        writer.trigger(processingTime="200 milliseconds").start().awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:4])
