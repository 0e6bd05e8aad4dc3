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
