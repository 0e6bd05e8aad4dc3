"""``sluice demo``: a private MariaDB (or PostgreSQL), a workload, a relay and consumers,
checked at the end."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline on a private MariaDB or PostgreSQL and check it",
        description="Start a private MariaDB (or PostgreSQL), run a workload through a relay "
        "into a consumer's replica, seed a Spark bootstrap store beside it, and check every "
        "replica equals the source.",
    )
    p.add_argument(
        "--source",
        choices=("mariadb", "postgresql"),
        default="mariadb",
        help="the database the demo starts and captures (default mariadb)",
    )
    p.add_argument("--duration", type=float, default=20.0, help="workload seconds (default 20)")
    p.add_argument("--rate", type=int, default=200, help="transactions per second (default 200)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (for a look)")
    p.add_argument(
        "--no-spark", action="store_true", help="skip the Spark bootstrap job and the late consumer"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sluice.cli.demo_pipeline import run as run_demo  # noqa: PLC0415 - keeps `tail` quick

    return run_demo(args)
