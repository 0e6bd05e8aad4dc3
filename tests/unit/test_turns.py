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


def test_a_streams_first_chunk_goes_before_streams_catching_up() -> None:
    async def main() -> list[str]:
        turns = Turns(per_tick=1)
        got: list[str] = []

        async def take(name: str, first: bool) -> None:
            await turns.take(first)
            got.append(name)

        # In one iteration: the hog takes the tick's only turn, two bulk chunks queue, then
        # two streams ask for their first chunk: they go next, in their order.
        tasks = [
            asyncio.create_task(take(name, name.startswith("new")))
            for name in ("hog", "bulk1", "bulk2", "new1", "new2")
        ]
        await asyncio.sleep(0)
        assert turns.waiting == 4
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return got

    assert asyncio.run(main()) == ["hog", "new1", "new2", "bulk1", "bulk2"]
