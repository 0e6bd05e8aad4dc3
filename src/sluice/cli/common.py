"""Helpers shared by the commands."""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Callable

from sluice.core.component import AsyncComponent
from sluice.core.scn import parse_scn
from sluice.errors import ConfigError


async def serve_until_signal(component: AsyncComponent, banner: Callable[[], str]) -> int:
    """Run ``component`` until SIGINT/SIGTERM, printing ``banner()`` once it listens."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with component:
        print(banner(), flush=True)
        await stop.wait()
    return 0


def scn_arg(text: str) -> int:
    try:
        return parse_scn(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
