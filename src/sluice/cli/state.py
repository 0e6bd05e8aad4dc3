"""``sluice state serve``: each key's current row, kept from the relays, answered over HTTP."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

from sluice.cli.common import scn_arg
from sluice.cluster import GroupSettings, parse_coordinator_url
from sluice.core.names import canonical_source
from sluice.core.process import long_lived
from sluice.errors import ConfigError
from sluice.state import StateConfig, StateServer, StateService
from sluice.state.group import StateGroup

log = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("state", help="current state by key, from the relays")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="serve")
    s = verbs.add_parser(
        "serve",
        help="keep each key's current row and answer GET /state/DB.TABLE?COLUMN=VALUE",
        description="Follow relays for the chosen tables and keep each key's current row in a "
        "SQLite file (--store), window by window with its checkpoint; answer lookups over HTTP.",
    )
    s.add_argument("--relay", action="append", required=True, metavar="URL", help="relay URL")
    s.add_argument("--source", action="append", dest="sources", metavar="DB.TABLE",
                   help="only these sources (repeat; default all)")  # fmt: skip
    s.add_argument("--store", type=Path, required=True, metavar="FILE",
                   help="the SQLite file the state lives in (made when missing)")  # fmt: skip
    s.add_argument("--bootstrap", metavar="URL",
                   help="bootstrap server: a new store restores from its snapshot")  # fmt: skip
    s.add_argument("--since-scn", type=scn_arg,
                   help="a new store without --bootstrap starts after this SCN")  # fmt: skip
    s.add_argument("--name", default="state", help="the name relays list it by")
    s.add_argument("--host", default="127.0.0.1", help="serve on this address")
    s.add_argument("--port", type=int, default=7072, help="... and port (default 7072; 0: any)")
    s.add_argument("--group", metavar="NAME",
                   help="share the keys' partitions with this group's other members "
                   "(with --coordinator, --partitions); --store is a directory then")  # fmt: skip
    s.add_argument("--coordinator", metavar="zk://HOST:PORT[,...]/PATH",
                   help="the group's ZooKeeper")  # fmt: skip
    s.add_argument("--partitions", type=int, metavar="N", help="the group's key partitions")
    s.add_argument("--session-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="a member silent this long is dead and its partitions move")  # fmt: skip
    s.add_argument("--standby", type=int, default=0, metavar="N",
                   help="a group keeps N more warm copies of each partition")  # fmt: skip
    s.add_argument("--advertise", metavar="URL",
                   help="where members forward lookups (default http://HOST:PORT)")  # fmt: skip
    s.add_argument("--give-up-after", type=float, metavar="SECONDS",
                   help="exit 1 when no relay answered for this long (default: never)")  # fmt: skip
    s.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    grouped = args.group or args.coordinator or args.partitions
    if grouped and not (args.group and args.coordinator and args.partitions):
        raise ConfigError("a group needs --group NAME, --coordinator zk://HOST:PORT/PATH and "
                          "--partitions N together")  # fmt: skip
    if not grouped and args.store.is_dir():
        raise ConfigError(f"--store {args.store} is a directory; name the SQLite file")
    config = StateConfig(
        relays=tuple(args.relay),
        store=args.store,
        sources=tuple(canonical_source(s) for s in args.sources or ()),
        bootstrap=args.bootstrap,
        since_scn=args.since_scn,
        name=args.name,
        host=args.host,
        port=args.port,
        give_up_after_s=args.give_up_after,
    )
    if grouped:
        settings = GroupSettings(parse_coordinator_url(args.coordinator), args.group,
                                 args.partitions, 1, args.session_timeout)  # fmt: skip
        group = StateGroup(config, settings, args.advertise or "", args.standby)
        long_lived()
        return asyncio.run(_serve_group(group, args.advertise))
    service = StateService(config)
    long_lived()
    return asyncio.run(_serve(service))


async def _serve_group(group: StateGroup, advertise: str | None) -> int:
    stop = _stopper()
    c = group.config
    async with StateServer(None, c.host, c.port, group=group, config=c) as server:
        group.url = advertise or f"http://{c.host}:{server.port}"
        group.membership.info["url"] = group.url
        log.info("state %s: member of %s, lookups on %s/state/", c.name,
                 group.settings.group, group.url)  # fmt: skip
        try:
            await group.membership.run_until(stop)
        finally:
            await group.stop()  # the standby copies
        if group.membership.failure is not None:
            raise group.membership.failure
    return 0


def _stopper() -> asyncio.Event:
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _serve(service: StateService) -> int:
    stop = _stopper()
    c = service.config
    async with StateServer(service, c.host, c.port) as server, service:
        log.info("state %s: lookups on http://%s:%d/state/", c.name, server.host, server.port)
        done = service.done
        assert done is not None
        waiter = asyncio.create_task(stop.wait())
        await asyncio.wait((waiter, done), return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if done.done() and not done.cancelled() and done.exception() is not None:
            raise done.exception()  # type: ignore[misc]
    return 0
