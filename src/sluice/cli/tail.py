"""``sluice tail``: one JSON event per line on stdout, flushed after every window."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from sluice.cli.common import scn_arg
from sluice.cli.progress import ProgressDisplay, Sample, terminal_bar
from sluice.client import AsyncClient, ClientConfig, FileCheckpointStore, RetryPolicy
from sluice.client.checkpoints import CheckpointStore, MemoryCheckpointStore
from sluice.client.transport import newest_scn
from sluice.cluster import AsyncGroupClient, GroupSettings, parse_coordinator_url
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
        help="exit 0 once everything up to the relay's max SCN is printed (with progress "
        "on stderr: a bar on a terminal, else a line every 5 s)",
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
        "--group",
        metavar="NAME",
        help="share the stream's partitions with the other members of this group (with "
        "--coordinator and --partitions); checkpoints per partition in ZooKeeper",
    )
    p.add_argument(
        "--coordinator", metavar="zk://HOST:PORT[,...]/PATH", help="the group's ZooKeeper"
    )
    p.add_argument("--partitions", type=int, metavar="N", help="the group's key partitions")
    p.add_argument("--quorum", type=int, default=1, metavar="Q", help="members before any reads")
    p.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="a member silent this long is dead and its partitions move (default 10)",
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
    """Writes each window's JSON lines (decoded by the client straight from Avro to text);
    ``printed`` is told each window once it is written."""

    def __init__(self, out: TextIO, printed: Callable[[JsonWindow], None] | None = None) -> None:
        self.out = out
        self.printed = printed

    def on_json_window(self, window: JsonWindow) -> None:
        if window.lines:  # a window of skipped events only (a TRUNCATE) prints nothing
            self.out.write("\n".join(window.lines) + "\n")
            self.out.flush()
        if self.printed is not None:
            self.printed(window)

    def on_rollback(self, scn: int, error: BaseException) -> None:
        return None


def run(args: argparse.Namespace) -> int:
    if args.group or args.coordinator or args.partitions:
        return _run_group(args)
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
    if not args.until_caught_up:
        return asyncio.run(_run(AsyncClient(config, JsonLinesConsumer(sys.stdout), store)))
    display = ProgressDisplay(
        "tail", "events", bar=terminal_bar(sys.stderr, data=sys.stdout), hold_s=HOLD_S
    )
    progress = TailProgress(display)
    client = AsyncClient(config, JsonLinesConsumer(sys.stdout, progress.printed), store)
    return asyncio.run(progress.follow(client))


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


def _run_group(args: argparse.Namespace) -> int:
    """``--group``: this process is one member; its partitions' checkpoints live in ZooKeeper."""
    if not (args.group and args.coordinator and args.partitions):
        raise ConfigError("a group needs --group NAME, --coordinator zk://HOST:PORT/PATH and "
                          "--partitions N together")  # fmt: skip
    for flag, given in (("--partition", args.partition), ("--checkpoint-dir", args.checkpoint_dir),
                        ("--until-caught-up", args.until_caught_up)):  # fmt: skip
        if given:
            raise ConfigError(f"{flag} is for one tail; a --group deals partitions and keeps "
                              "their checkpoints in ZooKeeper")  # fmt: skip
    settings = GroupSettings(
        parse_coordinator_url(args.coordinator),
        args.group,
        args.partitions,
        args.quorum,
        args.session_timeout,
    )
    config = ClientConfig(
        relays=tuple(args.relay),
        sources=tuple(canonical_source(s) for s in args.sources or ()),
        since_scn=args.since_scn,
        bootstrap=args.bootstrap,
        retry=RetryPolicy(give_up_after_s=args.give_up_after),
        debezium=_debezium_options(args) if args.format == "debezium" else None,
        name=args.group,
    )

    async def main() -> int:
        client = AsyncGroupClient(config, JsonLinesConsumer(sys.stdout), settings)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, client.stop)
        return await client.run()

    return asyncio.run(main())


async def _run(client: AsyncClient) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, client.stop)
    await client.run()
    return 0


# A tail refused at once (a checkpoint from the future, no relay) is its error line alone.
HOLD_S = 1.0


class TailProgress:
    """``tail --until-caught-up`` on a progress display: the SCN printed so far against the
    relay's max SCN when the tail began (the bar and the ETA), and the events printed. The
    bar starts at the first window's SCN: the checkpoint before it may be far below (SCN 0,
    a relay's empty start), which would put the first window at 99%."""

    def __init__(self, display: ProgressDisplay) -> None:
        self.display = display
        self.client: AsyncClient | None = None
        self.target: int | None = None
        self.first: int | None = None
        self.scn: int | None = None
        self.events = 0
        self.stopped = False

    async def follow(self, client: AsyncClient) -> int:
        """Run ``client`` until caught up (or a signal), the display on meanwhile."""
        self.client = client
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop)
        self.display.update(tail_sample(None, None, None, 0))
        self.display.start()
        caught_up = False
        try:
            # The bar's end: asked first, so it is known before the first window is printed.
            self.target = await relay_max_scn(client.config.relays)
            started = asyncio.create_task(self._started(client))
            try:
                self.scn = await client.run(until_caught_up=True)
            finally:
                started.cancel()
            self._show()
            caught_up = not self.stopped
        finally:
            self.display.stop(completed=caught_up)
        return 0

    def _stop(self) -> None:
        self.stopped = True
        if self.client is not None:
            self.client.stop()

    def printed(self, window: JsonWindow) -> None:
        if self.first is None:
            self.first = window.scn
        self.scn = window.scn if self.scn is None else max(self.scn, window.scn)
        self.events += len(window.lines)
        self._show()

    def _show(self) -> None:
        start = self.first
        if start is None and self.client is not None and self.client.started_at is not None:
            start = self.client.started_at.scn
        self.display.update(tail_sample(start, self.scn, self.target, self.events))

    async def _started(self, client: AsyncClient) -> None:
        """Once the client knows where it starts: the rate's start (so the first window's
        events count too)."""
        while client.started_at is None:  # noqa: ASYNC110 - the client has no event for it
            await asyncio.sleep(0.05)
        self._show()


def tail_sample(start: int | None, scn: int | None, target: int | None, events: int) -> Sample:
    """SCNs past ``start`` are the steps done, up to ``target`` (None: not known)."""
    if start is None:
        return Sample(count=events, phase="connecting")
    if scn is None:  # started, nothing printed yet: "starting"
        return Sample(count=events)
    scn = max(scn, start)
    position = f"SCN {scn}" if target is None else f"SCN {scn}/{target}"
    total = None if target is None else max(target - start, 0)
    return Sample(scn - start, total, events, position)


async def relay_max_scn(relays: tuple[str, ...]) -> int | None:
    """The max SCN of the first relay that answers; None when none does (the client then
    says why, and the bar has no end)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        return (await newest_scn(session, relays))[0]
