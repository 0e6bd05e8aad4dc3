"""``python -m benchmarks`` (``make bench``): capture throughput and delivery latency."""

from __future__ import annotations

import subprocess
import sys

from benchmarks import (
    big_txn,
    capture,
    chain,
    kafka,
    lake,
    latency,
    pg_capture,
    pg_latency,
    query,
    report,
    serving,
    sink_brokers,
    sinks,
    spark_path,
    spark_source,
)


def main() -> int:
    print("== capture: rows/s over the same binlog ==")
    capture.run()
    print("\n== PostgreSQL capture: rows/s over the same WAL ==")
    pg_capture.run()
    print("\n== PostgreSQL capture vs Debezium's PostgreSQL connector ==")
    # Its own process: JPype starts the JVM in the process, with Debezium's jars.
    subprocess.run([sys.executable, "-m", "benchmarks.pg_debezium"], check=True)
    print("\n== PostgreSQL latency: commit to consumer at 100 commits/s ==")
    pg_latency.run()
    print("\n== end to end and serving ==")
    serving.run()
    print("\n== load: a normal client while 200 catch up and 1,000 long polls wait ==")
    subprocess.run([sys.executable, "-m", "benchmarks.load"], check=True)
    print("\n== one 1,000,000-row transaction vs 1,000-row ones through a relay ==")
    big_txn.run()
    print("\n== latency: commit to consumer at 100 commits/s ==")
    latency.run()
    print("\n== relay chaining: a second tier of relays (sluice://) ==")
    chain.run()
    print("\n== Spark: relay into Parquet, fold, snapshot serving ==")
    spark_path.run()
    print("\n== Spark: the sluice source vs a do-nothing Python source on the same rows ==")
    spark_source.run()
    print("\n== Delta Lake: apply_changes (SCD1) vs Spark's MERGE of the same staged batches ==")
    lake.run()
    print("\n== seeding: sluice bootstrap seed vs spark.read.jdbc and mariadb-dump ==")
    # Its own process: the JDBC baseline needs the driver jar on a JVM started with it.
    subprocess.run([sys.executable, "-m", "benchmarks.seed"], check=True)
    print("\n== query source: first pass and steady polling vs a plain SELECT ==")
    query.run()
    print("\n== sinks: database replicas vs a batched loop of the same driver ==")
    sinks.run()
    print("\n== sinks: NATS, Redis, RabbitMQ, webhooks vs a loop of the same client ==")
    sink_brokers.run()
    print("\n== Kafka: Sluice vs Debezium in Kafka Connect, the sink vs a confluent_kafka loop ==")
    kafka.run()
    print("\n== targets ==")
    report.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
