"""``KafkaTarget``'s turns (pure logic, a recording stand-in for its producer): a window that
waited for its turn behind a commit that failed was read before the loss, and must not be
produced, or committed after the rewind's windows it would be read again (CI saw it twice)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from sluice.core.checkpoint import Checkpoint, Online
from sluice.sink.config import SinkConfig
from sluice.sink.kafka import KafkaTarget
from sluice.sink.target import Batch, Change, HeldWindowsLost, TargetUnavailable


class Producer:
    """What ``KafkaIo`` does, recorded: produced scns, commits with their checkpoint."""

    def __init__(self) -> None:
        self.open: list[int] = []
        self.committed: list[tuple[list[int], Checkpoint | None]] = []
        self.fail_commit = False
        self.commit_entered = threading.Event()
        self.commit_may_go = threading.Event()
        self.commit_may_go.set()

    def produce(self, changes: Sequence[Change]) -> None:
        self.open.extend(c.scn for c in changes)

    def commit(self, checkpoint: Checkpoint | None) -> None:
        self.commit_entered.set()
        self.commit_may_go.wait(10)
        if self.fail_commit:
            self.open = []
            raise TargetUnavailable("Kafka: commit timed out")
        self.committed.append((self.open, checkpoint))
        self.open = []

    def abort(self) -> bool:
        had, self.open = bool(self.open), []
        return had

    def connect(self) -> None:
        return None

    def close(self) -> None:
        return None


def _target() -> tuple[KafkaTarget, Producer]:
    config = SinkConfig(to="kafka://127.0.0.1:9", relays=["http://127.0.0.1:1"], name="t")
    target = KafkaTarget(config)
    producer = Producer()
    target._io = producer  # type: ignore[assignment]
    return target, producer


def _window(scn: int) -> Batch:
    change = Change(scn, 0, "db.t", "c", 0, 1, None, None, None, None, "r", f"o-{scn}", b"{}")
    return Batch(scn, 0, (change,), checkpoint=Online(scn))


def test_a_window_waiting_behind_a_failed_commit_is_refused_until_the_rollback() -> None:
    async def main() -> None:
        target, producer = _target()
        await target.deliver(_window(1))
        producer.fail_commit = True
        producer.commit_may_go.clear()
        commit = asyncio.create_task(target.commit())
        await asyncio.to_thread(producer.commit_entered.wait, 10)
        stale = asyncio.create_task(target.deliver(_window(2)))  # waits for its turn
        await asyncio.sleep(0)
        producer.commit_may_go.set()
        with pytest.raises(HeldWindowsLost):
            await commit
        with pytest.raises(HeldWindowsLost):
            await stale  # read before the loss: the sink reads it again after the rewind
        assert producer.open == [] and producer.committed == []
        # a retry of it before the sink rolled back is refused too
        with pytest.raises(HeldWindowsLost):
            await target.deliver(_window(2))
        await target.rollback()  # the sink has rewound: windows from here on are taken
        producer.fail_commit = False
        for scn in (1, 2):
            await target.deliver(_window(scn))
        await target.commit()
        assert producer.committed == [([1, 2], Online(2))]
        assert target.committed == Online(2)

    asyncio.run(main())

