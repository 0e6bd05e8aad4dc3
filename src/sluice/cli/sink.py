"""``sluice sink``: deliver a relay's changes to a database, a broker or a webhook."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path
from typing import Any

from sluice.cli.common import scn_arg
from sluice.core.process import long_lived
from sluice.core.requests import DEBEZIUM_OPTIONS
from sluice.errors import ConfigError
from sluice.sink import Sink, load_sink_config
from sluice.sink.group import GroupSink
from sluice.sink.server import run_sink


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "sink",
        help="deliver changes to a database replica, NATS, Redis, RabbitMQ or a webhook",
        description="Follow relays and deliver every change to one target, named by URL: "
        "postgresql://, mariadb:// (mysql://), sqlite:///, nats://HOST:PORT/STREAM, "
        "redis://HOST:PORT/DB, amqp://, http(s)://. Database replicas and NATS/Redis get "
        "each change exactly once; RabbitMQ and webhooks at least once, with a stable id.",
    )
    p.add_argument("--to", metavar="URL", help="the target (required here or in --config)")
    p.add_argument(
        "--relay",
        action="append",
        dest="relays",
        metavar="URL",
        help="relay URL (repeat for failover)",
    )
    p.add_argument(
        "--bootstrap",
        metavar="URL",
        help="bootstrap server: a new sink starts from its snapshot (with "
        "--since-scn 0, the default when one is given), and a sink that fell "
        "behind the relay catches up from it",
    )
    p.add_argument(
        "--source",
        action="append",
        dest="sources",
        metavar="DB.TABLE",
        help="only these sources (repeat; default all)",
    )
    p.add_argument(
        "--since-scn", type=scn_arg, help="start after this SCN when the sink has no checkpoint"
    )
    p.add_argument(
        "--checkpoint-dir",
        type=Path,
        help="where the checkpoint lives (brokers and webhooks; database "
        "targets keep it in a table sluice_sink_checkpoint)",
    )
    p.add_argument(
        "--schema-registry",
        metavar="URL",
        help="Kafka with --format avro: the Confluent-compatible schema registry its schemas "
        "are registered in (sluice registry, or Confluent's)",
    )
    p.add_argument("--name", help="the sink's name: its checkpoint's and [[sinks]] entry's")
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE.toml",
        help="read settings from the [[sinks]] entry named --name",
    )
    p.add_argument(
        "--format",
        choices=("json", "debezium", "avro"),
        help="message bodies: Sluice JSON (default; Debezium JSON to kafka://), Debezium JSON, "
        "Avro payloads",
    )
    p.add_argument(
        "--debezium-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Debezium option for --format debezium; repeat",
    )
    p.add_argument(
        "--include-column",
        action="append",
        dest="include_columns",
        metavar="DB.TABLE.COLUMN",
        help="send only these columns of their table (* and ? allowed; key "
        "columns are always sent); repeat",
    )
    p.add_argument(
        "--exclude-column",
        action="append",
        dest="exclude_columns",
        metavar="DB.TABLE.COLUMN",
        help="never send these columns; repeat",
    )
    p.add_argument(
        "--filter",
        metavar="EXPR",
        help="only rows matching, e.g. \"status != 'draft' and amount > 100\"",
    )
    p.add_argument(
        "--filter-table",
        nargs=2,
        action="append",
        metavar=("DB.TABLE", "EXPR"),
        help="a filter for one source (instead of --filter); repeat",
    )
    p.add_argument(
        "--route",
        metavar="TEMPLATE",
        help="subject, stream, routing key or table name from {source} {db} {table} {op}",
    )
    p.add_argument("--origin", help="the message ids' origin (default: from the relay's source)")
    p.add_argument("--host", help="serve /healthz, /stats, /metrics on this address")
    p.add_argument("--port", type=int, help="... and port (default 7071; 0: any)")
    p.add_argument(
        "--dead-letter-dir",
        type=Path,
        help="webhooks: batches that failed --max-attempts times go here",
    )
    p.add_argument("--max-attempts", type=int, help="webhooks: tries per batch (default 8)")
    p.add_argument("--batch-events", type=int, help="webhooks: events per POST (default 1000)")
    p.add_argument(
        "--retry-max",
        type=float,
        dest="retry_max_s",
        metavar="SECONDS",
        help="longest wait between retries of a target that is down (default 30)",
    )
    p.add_argument(
        "--retry-initial",
        type=float,
        dest="retry_initial_s",
        metavar="SECONDS",
        help="first wait before retrying a target that is down (default 0.5)",
    )
    p.add_argument(
        "--target-timeout",
        type=float,
        dest="timeout_s",
        metavar="SECONDS",
        help="one request to the target (default 30)",
    )
    p.add_argument(
        "--commit-interval",
        type=float,
        dest="commit_interval_s",
        metavar="SECONDS",
        help="database targets: commit held windows at least this often (default 0.1)",
    )
    p.add_argument(
        "--commit-rows",
        type=int,
        metavar="N",
        help="database targets: ... or once this many rows are held (default 20000)",
    )
    p.add_argument(
        "--give-up-after",
        type=float,
        dest="give_up_after_s",
        metavar="SECONDS",
        help="exit 1 when no relay answered for this long (default: never)",
    )
    p.add_argument(
        "--partition",
        metavar="I/N",
        help="only key partition I of N of the stream (fixed by hand; see --group)",
    )
    p.add_argument(
        "--group",
        metavar="NAME",
        help="share the stream's partitions with the other members of this group "
        "(with --coordinator and --partitions): a member that dies hands its partitions on",
    )
    p.add_argument(
        "--coordinator",
        metavar="zk://HOST:PORT[,...]/PATH",
        help="the group's ZooKeeper ensemble and the path its groups live under",
    )
    p.add_argument(
        "--partitions", type=int, metavar="N", help="the group's key partitions (fixed per group)"
    )
    p.add_argument(
        "--quorum",
        type=int,
        metavar="Q",
        help="a group delivers nothing while it has fewer than Q members (default 1)",
    )
    p.add_argument(
        "--session-timeout",
        type=float,
        dest="session_timeout_s",
        metavar="SECONDS",
        help="a member silent this long is dead and its partitions move (default 10)",
    )
    p.add_argument(
        "--until-caught-up",
        action="store_true",
        help="exit 0 once everything up to the relay's max SCN is delivered",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = load_sink_config(
        args.config,
        args.name,
        to=args.to,
        relays=args.relays,
        bootstrap=args.bootstrap,
        sources=args.sources,
        since_scn=args.since_scn,
        checkpoint_dir=args.checkpoint_dir,
        schema_registry=args.schema_registry,
        format=args.format,
        debezium_options=_debezium_options(args.debezium_option),
        include_columns=args.include_columns,
        exclude_columns=args.exclude_columns,
        filter=args.filter,
        filters=dict(args.filter_table or []) or None,
        route=args.route,
        origin=args.origin,
        host=args.host,
        port=args.port,
        dead_letter_dir=args.dead_letter_dir,
        max_attempts=args.max_attempts,
        batch_events=args.batch_events,
        retry_max_s=args.retry_max_s,
        retry_initial_s=args.retry_initial_s,
        timeout_s=args.timeout_s,
        commit_interval_s=args.commit_interval_s,
        commit_rows=args.commit_rows,
        give_up_after_s=args.give_up_after_s,
        partition=args.partition,
        group=args.group,
        coordinator=args.coordinator,
        partitions=args.partitions,
        quorum=args.quorum,
        session_timeout_s=args.session_timeout_s,
    )
    if config.bootstrap and config.since_scn is None:
        config = config.model_copy(update={"since_scn": 0})  # a new sink: snapshot first
    sink: Sink | GroupSink = GroupSink(config) if config.group else Sink(config)
    if config.group and args.until_caught_up:
        raise ConfigError("--until-caught-up is for one sink; a group member runs until stopped")
    long_lived()  # the process is the sink: see core/process.py
    return asyncio.run(_run(sink, args.until_caught_up))


def _debezium_options(items: list[str]) -> dict[str, str] | None:
    options = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or key not in DEBEZIUM_OPTIONS:
            raise ConfigError(
                f"--debezium-option must be KEY=VALUE with KEY one of "
                f"{', '.join(sorted(DEBEZIUM_OPTIONS))}; got {item!r}"
            )
        options[key] = value
    return options or None


async def _run(sink: Sink | GroupSink, until_caught_up: bool) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, sink.stop)
    await run_sink(sink, until_caught_up=until_caught_up)
    return 0
