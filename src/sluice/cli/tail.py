"""``sluice tail``: one JSON event per line on stdout, flushed after every window."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

from sluice.cli.common import scn_arg
from sluice.client import AsyncClient, ClientConfig, FileCheckpointStore, RetryPolicy
from sluice.client.checkpoints import CheckpointStore, MemoryCheckpointStore
from sluice.core.event import JsonWindow
from sluice.core.names import canonical_source
from sluice.core.requests import DEBEZIUM_OPTIONS
from sluice.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "tail",
        help="print a relay's events as JSON lines",
        description="Print events as JSON lines, one window at a time.",
    )
    p.add_argument(
        "--relay",
        action="append",
        required=True,
        metavar="URL",
        help="relay URL, e.g. http://127.0.0.1:7070 (repeat for failover)",
    )
    p.add_argument(
        "--source",
        action="append",
        dest="sources",
        metavar="DB.TABLE",
        help="only these sources (repeat; default all)",
    )
    p.add_argument(
        "--since-scn",
        type=scn_arg,
        help="start after this SCN when there is no checkpoint "
        "(default: the oldest SCN the relay holds)",
    )
    p.add_argument("--checkpoint-dir", type=Path, help="keep a checkpoint here and resume from it")
    p.add_argument("--name", default="tail", help="checkpoint name (default tail)")
    p.add_argument("--partition", metavar="I/N", help="only key partition I of N")
    p.add_argument(
        "--bootstrap",
        metavar="URL",
        help="bootstrap server: snapshot + catch-up when the relay no longer holds "
        "the checkpoint; with --since-scn 0, the snapshot first",
    )
    p.add_argument(
        "--until-caught-up",
        action="store_true",
        help="exit 0 once everything up to the relay's max SCN is printed",
    )
    p.add_argument(
        "--format",
        choices=("json", "debezium"),
        default="json",
        help="Sluice's JSON events (default), or Debezium's JSON value envelope",
    )
    p.add_argument(
        "--debezium-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Debezium option for --format debezium (decimal.handling.mode=string, "
        "time.precision.mode=connect, binary.handling.mode=hex, schemas.enable=true, "
        "topic.prefix=NAME); repeat",
    )
    p.add_argument(
        "--give-up-after",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="exit 1 when no relay answered for this long (default 300)",
    )
    p.set_defaults(run=run)


class JsonLinesConsumer:
    """Writes each window's JSON lines (decoded by the client straight from Avro to text)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def on_json_window(self, window: JsonWindow) -> None:
        self.out.write("\n".join(window.lines) + "\n")
        self.out.flush()

    def on_rollback(self, scn: int, error: BaseException) -> None:
        return None


def run(args: argparse.Namespace) -> int:
    store: CheckpointStore = (
        FileCheckpointStore(args.checkpoint_dir, args.name)
        if args.checkpoint_dir
        else MemoryCheckpointStore()
    )
    config = ClientConfig(
        relays=tuple(args.relay),
        sources=tuple(canonical_source(s) for s in args.sources or ()),
        partition=args.partition,
        since_scn=args.since_scn,
        bootstrap=args.bootstrap,
        retry=RetryPolicy(give_up_after_s=args.give_up_after),
        debezium=_debezium_options(args) if args.format == "debezium" else None,
    )
    client = AsyncClient(config, JsonLinesConsumer(sys.stdout), store)
    return asyncio.run(_run(client, args.until_caught_up))


def _debezium_options(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    options = []
    for item in args.debezium_option:
        key, eq, value = item.partition("=")
        if not eq or key not in DEBEZIUM_OPTIONS:
            raise ConfigError(
                f"--debezium-option must be KEY=VALUE with KEY one of "
                f"{', '.join(sorted(DEBEZIUM_OPTIONS))}; got {item!r}"
            )
        options.append((key, value))
    return tuple(options)


async def _run(client: AsyncClient, until_caught_up: bool) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, client.stop)
    await client.run(until_caught_up=until_caught_up)
    return 0
