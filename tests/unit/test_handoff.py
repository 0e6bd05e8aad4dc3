"""The capture thread -> event loop handoff: order, backpressure, and stopping while full."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sluice.errors import SluiceError
from sluice.relay.handoff import Handoff


def test_items_arrive_in_order_and_a_full_handoff_holds_the_producer() -> None:
    async def main() -> tuple[list[int], int]:
        handoff: Handoff[int] = Handoff(asyncio.get_running_loop(), capacity=3)
        produced: list[int] = []
        three = threading.Event()

        def produce() -> None:
            for n in range(10):
                handoff.put(n, lambda: False)
                produced.append(n)
                if n == 2:
                    three.set()

        thread = threading.Thread(target=produce)
        thread.start()
        assert await asyncio.to_thread(three.wait, 10)  # the first three fit...
        held = len(produced)  # ...and no more until the loop takes some
        got: list[int] = []
        while len(got) < 10:
            got += await asyncio.wait_for(handoff.get_all(), 10)
        await asyncio.to_thread(thread.join, 10)
        return got, held

    got, held = asyncio.run(main())
    assert got == list(range(10))
    assert held == 3


def test_a_producer_blocked_on_a_full_handoff_gives_up_when_stopping() -> None:
    async def main() -> BaseException | None:
        handoff: Handoff[int] = Handoff(asyncio.get_running_loop(), capacity=1)
        stopping = threading.Event()
        handoff.put(0, stopping.is_set)
        error: list[BaseException] = []

        def produce() -> None:
            try:
                handoff.put(1, stopping.is_set)
            except SluiceError as exc:
                error.append(exc)

        thread = threading.Thread(target=produce)
        thread.start()
        stopping.set()
        await asyncio.to_thread(thread.join, 10)
        assert not thread.is_alive()
        return error[0] if error else None

    error = asyncio.run(main())
    assert isinstance(error, SluiceError)
    with pytest.raises(SluiceError, match="stopping"):
        raise error
