"""``sluice lake run | as-of``: Delta Lake tables merged from a relay with Spark."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sluice.cli.common import scn_arg
from sluice.core.names import canonical_source
from sluice.errors import ConfigError

MASTER = "Spark master: local[N] (default local[2]), spark://HOST:PORT"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("lake", help="Delta Lake tables kept merged with a relay (SCD1/SCD2)")
    lake = p.add_subparsers(dest="lake_command", required=True)

    run_p = lake.add_parser(
        "run",
        help="stream a relay's tables into Delta tables with Spark, exactly once",
        description="A Spark Structured Streaming job: one query per source, each micro-batch "
        "MERGEd into its Delta table (SCD1: the current row per key; SCD2: a version per "
        "change) with Delta's transaction identifiers, so a batch run again after a crash "
        "applies once.",
    )
    run_p.add_argument("--relay", action="append", required=True, metavar="URL")
    run_p.add_argument(
        "--source", action="append", dest="sources", required=True, metavar="DB.TABLE"
    )
    run_p.add_argument(
        "--to", required=True, metavar="delta:PATH",
        help="the tables' path template: {db}, {table}, {source} (e.g. delta:/lake/{db}/{table})",
    )  # fmt: skip
    run_p.add_argument(
        "--checkpoint", required=True, metavar="DIR",
        help="Spark's checkpoints (one folder per source); keep it with the tables",
    )  # fmt: skip
    run_p.add_argument("--mode", choices=("scd1", "scd2"), default="scd1")
    run_p.add_argument(
        "--name", default="lake",
        help="the writer's name in Delta's transaction identifiers (default lake)",
    )  # fmt: skip
    run_p.add_argument(
        "--bootstrap", metavar="URL",
        help="a bootstrap server: a new table starts from its snapshot, then the log",
    )  # fmt: skip
    run_p.add_argument(
        "--key", action="append", default=[], metavar="DB.TABLE=COL[,COL]",
        help="key columns (default: the table's primary key)",
    )  # fmt: skip
    run_p.add_argument("--master", help=MASTER)
    run_p.add_argument("--trigger-seconds", type=float, default=2.0)
    run_p.add_argument("--max-events-per-trigger", type=int, default=1_000_000, metavar="N")
    run_p.add_argument(
        "--partitions", type=int, default=2, metavar="N", help="tasks reading each micro-batch"
    )
    run_p.add_argument(
        "--once", action="store_true", help="merge what the relay holds now, then exit"
    )
    run_p.set_defaults(run=_run)

    as_of = lake.add_parser(
        "as-of",
        help="print a Delta table as it was after an SCN (JSON lines)",
        description="SCD2 tables answer at any SCN; SCD1 tables from Delta's time travel, at "
        "the newest version whose batch ended at or before the SCN.",
    )
    as_of.add_argument("--table", required=True, metavar="PATH")
    as_of.add_argument("--scn", required=True, type=scn_arg)
    as_of.add_argument("--master", help=MASTER)
    as_of.set_defaults(run=_as_of)


def _keys(values: list[str]) -> dict[str, tuple[str, ...]]:
    keys = {}
    for text in values:
        source, sep, cols = text.partition("=")
        names = tuple(c.strip() for c in cols.split(",") if c.strip())
        if not sep or not names:
            raise ConfigError(f"--key {text!r}: DB.TABLE=COL[,COL]")
        keys[canonical_source(source)] = names
    return keys


def _delta_conf(master: str | None) -> dict[str, str]:
    from sluice.spark.lake import delta_settings  # noqa: PLC0415 - Spark is heavy

    conf = delta_settings()
    if master is None or master.startswith("local"):
        conf["spark.databricks.delta.snapshotPartitions"] = "2"  # 50 tasks per read otherwise
    return conf


def _run(args: argparse.Namespace) -> int:
    from sluice.bootstrap.lake_job import LakeConfig, LakeJob  # noqa: PLC0415
    from sluice.bootstrap.spark_run import run_spark_command  # noqa: PLC0415

    if not args.to.startswith("delta:"):
        raise ConfigError(f"--to {args.to!r}: a Delta table path, delta:PATH (Iceberg: not yet)")
    if args.max_events_per_trigger < 1 or args.partitions < 1:
        raise ConfigError("--max-events-per-trigger and --partitions must be at least 1")
    config = LakeConfig(
        relays=tuple(args.relay),
        sources=tuple(canonical_source(s) for s in args.sources),
        target=args.to,
        checkpoint=args.checkpoint,
        mode=args.mode,
        name=args.name,
        bootstrap=args.bootstrap,
        trigger_s=args.trigger_seconds,
        max_events_per_trigger=args.max_events_per_trigger,
        once=args.once,
        partitions=args.partitions,
        keys=_keys(args.key),
    )
    job = LakeJob(config)  # a template naming one table twice fails here, before Spark
    # A signal lets the batches being merged finish, then stops the queries: a batch cut off
    # would be run again next time anyway (and skipped by Delta if it had committed)
    done = run_spark_command(
        "the lake job failed", args.master, "sluice-lake", job.run,
        conf=_delta_conf(args.master), graceful=job.stop,
    )  # fmt: skip
    for source, batch in done.items():
        print(f"{source} -> {config.path(source)}: batches up to {batch}")
    return 0


def _as_of(args: argparse.Namespace) -> int:
    from sluice.bootstrap.spark_run import run_spark_command  # noqa: PLC0415
    from sluice.spark.lake import read_as_of  # noqa: PLC0415

    def body(spark: Any) -> int:
        rows = read_as_of(spark, args.table, args.scn).toJSON().collect()
        for row in sorted(rows):
            sys.stdout.write(row + "\n")
        return len(rows)

    count = run_spark_command(
        "reading the Delta table failed", args.master, "sluice-lake-as-of", body,
        conf=_delta_conf(args.master),
    )  # fmt: skip
    print(f"{count} rows as of SCN {args.scn}", file=sys.stderr)
    return 0


__all__ = ["add_parser"]
