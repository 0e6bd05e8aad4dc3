"""Turns (relay/turns.py): chunks of work granted a few per loop iteration, a stream's first
before the others, in arrival order."""

from __future__ import annotations

import asyncio

from sluice.bootstrap.reader import _runs
from sluice.relay.turns import Turns


async def _ticks(counter: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        counter[0] += 1
        await asyncio.sleep(0)  # one loop iteration


def test_turns_are_granted_per_tick_in_arrival_order() -> None:
    asks: list[int] = []
    grants: list[tuple[int, int]] = []

    async def main() -> Turns:
        turns = Turns(per_tick=2)
        tick, stop = [0], asyncio.Event()
        ticker = asyncio.create_task(_ticks(tick, stop))

        async def reader(n: int) -> None:
            for _ in range(3):
                asks.append(n)
                await turns.take()
                grants.append((tick[0], n))
                await asyncio.sleep(0)  # the write, between two chunks

        await asyncio.gather(*(reader(n) for n in range(10)))
        stop.set()
        await ticker
        return turns

    turns = asyncio.run(main())
    assert len(grants) == 30
    per_tick: dict[int, int] = {}
    for tick, _n in grants:
        per_tick[tick] = per_tick.get(tick, 0) + 1
    assert max(per_tick.values()) <= 2  # never more than per_tick in one iteration
    assert len(per_tick) >= 15
    assert [n for _t, n in grants] == asks  # first come, first served
    assert turns.waits > 0 and turns.waiting == 0


def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    async def main() -> list[str]:
        turns = Turns(per_tick=1)
        got: list[str] = []

        async def take(name: str) -> None:
            await turns.take()
            got.append(name)

        # In one iteration: the hog takes the tick's only turn, the other two queue.
        hog, quitter, stayer = (asyncio.create_task(take(n)) for n in ("hog", "quitter", "stayer"))
        await asyncio.sleep(0)
        assert turns.waiting == 2
        quitter.cancel()
        await asyncio.wait_for(asyncio.gather(hog, stayer), 5)
        return got

    assert asyncio.run(main()) == ["hog", "stayer"]


def test_log_files_group_into_runs_where_their_scns_overlap() -> None:
    ranges = {"a": (10, 20), "b": (15, 30), "c": (31, 40), "d": (35, 36), "e": (50, 50)}
    runs = _runs(ranges)
    assert [(r.files, r.min_scn, r.max_scn) for r in runs] == [
        (("a", "b"), 10, 30),
        (("c", "d"), 31, 40),
        (("e",), 50, 50),
    ]
    assert _runs({}) == []


def test_first_chunks_do_not_queue_behind_bulk_ones_and_are_granted_per_tick_too() -> None:
    async def main() -> list[tuple[int, str]]:
        turns = Turns(per_tick=1)
        tick, stop = [0], asyncio.Event()
        ticker = asyncio.create_task(_ticks(tick, stop))
        got: list[tuple[int, str]] = []

        async def take(name: str) -> None:
            await turns.take(first=name.startswith("new"))
            got.append((tick[0], name))

        # In one iteration: the hog takes the tick's bulk turn, two bulk chunks queue; new1
        # takes the tick's first-chunk turn at once, new2 and new3 queue for theirs.
        names = ("hog", "bulk1", "bulk2", "new1", "new2", "new3")
        tasks = [asyncio.create_task(take(name)) for name in names]
        await asyncio.sleep(0)
        assert turns.waiting == 4
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        stop.set()
        await ticker
        return got

    got = asyncio.run(main())
    assert [name for _t, name in got][:2] == ["hog", "new1"]
    order = {name: tick for tick, name in got}
    assert order["new2"] == order["bulk1"] < order["new3"] == order["bulk2"]
