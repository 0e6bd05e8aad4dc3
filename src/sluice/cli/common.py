"""Helpers shared by the commands."""

from __future__ import annotations

import argparse
import asyncio
import os
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


def add_password_file(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--password-file",
        metavar="FILE",
        help="read the source's password from FILE (its first line), instead of the URL",
    )


def apply_password_file(args: argparse.Namespace) -> None:
    """Make ``--password-file``'s password the one every source URL without a password uses
    (``SLUICE_SOURCE_PASSWORD``, inherited by Spark's workers too)."""
    path = getattr(args, "password_file", None)
    if not path:
        return
    try:
        with open(path, encoding="utf-8") as handle:
            password = handle.readline().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"cannot read --password-file {path}: {exc.strerror}") from None
    if not password:
        raise ConfigError(f"--password-file {path} is empty: put the password on its first line")
    os.environ["SLUICE_SOURCE_PASSWORD"] = password


def scn_arg(text: str) -> int:
    try:
        return parse_scn(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
