"""A replica's held groups reach the database in the order they were taken (a real SQLite
file): a commit() that takes a group while a background commit waits to start must not get
its newer rows overwritten by the older group (the race behind the replica that lost two
``items`` rows after SIGKILLs)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from pydantic import SecretStr

from sluice.core.checkpoint import Online
from sluice.schemas import Column, TableSchema
from sluice.sink.config import SinkConfig
from sluice.sink.sql import open_target
from sluice.sink.target import Batch, Change

SCHEMA = TableSchema(
    "shop.t", 1, (Column("id", "int", False, "int"), Column("v", "string", True, "text")), ("id",)
)


def _window(scn: int, value: str) -> Batch:
    change = Change(scn, 0, "shop.t", "c", 0, 1, SCHEMA, '{"id":1}', None, [1, value], "t", "x")
    return Batch(scn, 0, (change,), checkpoint=Online(scn))


def test_a_commit_taken_meanwhile_never_overtakes_the_group_before_it(tmp_path: Path) -> None:
    path = tmp_path / "replica.db"
    config = SinkConfig(
        to=SecretStr(f"sqlite:///{path}"), relays=["http://127.0.0.1:1"], commit_rows=1
    )

    async def main() -> None:
        target = open_target(config)
        await target.start()
        await target.deliver(_window(1, "created"))  # the table's DDL: on its own
        timer = asyncio.create_task(target.commit())  # the commit timer, queued first
        await target.deliver(_window(2, "older"))  # held, a group to commit in background
        await target.deliver(_window(3, "newer"))  # waits for it; the timer takes window 3
        await timer
        await target.commit()
        assert target.held == 0
        assert target.committed == Online(3)
        await target.stop()
        again = open_target(config)  # what a restarted sink resumes from
        await again.start()
        assert await again.load_checkpoint() == Online(3)
        await again.stop()

    asyncio.run(main())
    with sqlite3.connect(path) as conn:
        assert conn.execute('SELECT "v" FROM "t"').fetchall() == [("newer",)]


def test_a_group_cancelled_before_its_commit_ran_is_counted_out(tmp_path: Path) -> None:
    """A background group whose task is cancelled (the sink stopping) before it first ran
    leaves ``held``: counted in a running commit no more (its finally never ran)."""
    config = SinkConfig(
        to=SecretStr(f"sqlite:///{tmp_path / 'replica.db'}"),
        relays=["http://127.0.0.1:1"],
        commit_rows=1,
    )

    async def main() -> None:
        target = open_target(config)
        await target.start()
        await target.deliver(_window(1, "created"))
        await target.deliver(_window(2, "held"))  # commit_rows=1: committed in background
        task = target._inflight  # type: ignore[attr-defined]
        assert task is not None and target.held == 1
        task.cancel()  # before it first ran: the coroutine never starts
        await asyncio.wait([task])
        assert target.held == 0
        await target.stop()

    asyncio.run(main())
