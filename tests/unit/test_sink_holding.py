"""``Holding`` (pure logic, a recording target): windows delivered together, the checkpoint
file never ahead of what the target took, a failed group loses everything after it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sluice.client.checkpoints import FileCheckpointStore
from sluice.core.checkpoint import Online
from sluice.sink.holding import Holding
from sluice.sink.target import Batch, Change, HeldWindowsLost, TargetUnavailable


class Recorder:
    kind, delivery, wants_bodies, keeps_checkpoint, held = "x", "exactly-once", True, False, 0
    committed = None

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.fail = 0
        self.gate: asyncio.Event | None = None

    async def deliver(self, batch: Batch) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            self.fail -= 1
            raise TargetUnavailable("down")
        self.batches.append(batch)

    async def rollback(self) -> None:
        return None

    def describe(self) -> str:
        return "recorder"

    def stats(self) -> dict[str, Any]:
        return {}


def _window(scn: int, events: int = 1) -> Batch:
    changes = tuple(
        Change(scn, i, "db.t", "c", 0, 1, None, None, None, None, "r", f"o-{scn}-{i}", b"{}")
        for i in range(events)
    )
    return Batch(scn, 0, changes, checkpoint=Online(scn))


def test_windows_go_together_and_the_file_follows(tmp_path: Path) -> None:
    async def main() -> None:
        inner, store = Recorder(), FileCheckpointStore(tmp_path, "s")
        holding = Holding(inner, store, commit_rows=5)  # type: ignore[arg-type]
        for scn in (1, 2):
            await holding.deliver(_window(scn))
        assert holding.held == 2 and not inner.batches and store.load() is None
        await holding.deliver(_window(3, 3))  # 5 changes: they go (in flight)
        await holding.commit()  # ... and are settled here
        assert [len(b.changes) for b in inner.batches] == [5] and holding.held == 0
        assert inner.batches[0].checkpoint == Online(3) == store.load() == holding.committed
        await holding.deliver(_window(4))
        await holding.save_checkpoint(Online(9))  # held: not written ahead of window 4
        assert store.load() == Online(3)
        await holding.commit()
        assert store.load() == Online(4)

    asyncio.run(main())


def test_a_failed_group_loses_what_came_after_it(tmp_path: Path) -> None:
    async def main() -> None:
        inner, store = Recorder(), FileCheckpointStore(tmp_path, "s")
        holding = Holding(inner, store, commit_rows=100)  # type: ignore[arg-type]
        await holding.deliver(_window(1))
        inner.gate, inner.fail = asyncio.Event(), 1
        first = asyncio.create_task(holding.commit())  # in flight, will fail
        await asyncio.sleep(0)
        await holding.deliver(_window(2))
        second = asyncio.create_task(holding.commit())  # queued behind it
        await asyncio.sleep(0)
        inner.gate.set()
        with pytest.raises(HeldWindowsLost):
            await first
        with pytest.raises(HeldWindowsLost):
            await second
        assert not inner.batches and store.load() is None
        await holding.save_checkpoint(Online(2))  # poisoned until the rewind's rollback
        assert store.load() is None
        await holding.rollback()
        await holding.deliver(_window(1))
        await holding.commit()
        assert store.load() == Online(1) and len(inner.batches) == 1

    asyncio.run(main())
