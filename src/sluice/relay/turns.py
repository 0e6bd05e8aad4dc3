"""Fair shares of the event loop for streams that read a lot (issue 11: fairness).

One asyncio loop serves every client. A client far behind the head asks for megabytes; left
alone, 200 of them copy and write a chunk each per loop iteration, and a client at the head
waits behind all of them for its few bytes. So every chunk of work waits for a turn: at most
``per_tick`` turns are granted per loop iteration, in arrival order, and as many again for
streams' first chunks, which do not queue behind the others (a client at the head rarely
needs more than one, and is answered at once). Bulk readers still share the whole relay
between them, but an iteration never holds more than ``2 * per_tick`` chunks of work, whatever
their number: not even when 200 streams arrive at once (their first chunks were free, 200 in
one iteration: ``/stats`` waited 150 ms; issue 40).
"""

from __future__ import annotations

import asyncio
from collections import deque

# Turns per loop iteration: a few 256 KiB chunks (~0.1 ms each to copy and write) keep an
# iteration short while keeping throughput (measured in benchmarks/load.py).
TURNS_PER_TICK = 1


class Turns:
    """``await turns.take()`` before a chunk of work (``first=True``: a stream's first);
    granted ``per_tick`` per loop iteration, first chunks before the others."""

    def __init__(self, per_tick: int = TURNS_PER_TICK) -> None:
        self.per_tick = per_tick
        self.granted = 0  # in the current tick
        self.first_granted = 0  # first chunks, in the current tick
        self.waits = 0  # turns that had to wait (for /stats)
        self._first: deque[asyncio.Future[None]] = deque()  # streams' first chunks
        self._queue: deque[asyncio.Future[None]] = deque()
        self._tick_scheduled = False

    async def take(self, first: bool = False) -> None:
        if first and self.first_granted < self.per_tick and not self._first:
            self.first_granted += 1
            self._schedule_tick()
            return
        if not first and self.granted < self.per_tick and not self._queue:
            self.granted += 1
            self._schedule_tick()
            return
        future = asyncio.get_running_loop().create_future()
        (self._first if first else self._queue).append(future)
        self.waits += 1
        self._schedule_tick()
        await future  # a cancelled waiter is skipped by _tick (future.done())

    @property
    def waiting(self) -> int:
        return len(self._first) + len(self._queue)

    def _schedule_tick(self) -> None:
        if not self._tick_scheduled:
            self._tick_scheduled = True
            asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        """Once per loop iteration while there is demand: fresh budgets, handed to waiters
        first (arrival order), the rest left for whoever asks during the iteration."""
        self._tick_scheduled = False
        self.first_granted = _grant(self._first, self.per_tick)
        self.granted = _grant(self._queue, self.per_tick)
        if self._first or self._queue or self.granted or self.first_granted:
            self._schedule_tick()


def _grant(queue: deque[asyncio.Future[None]], budget: int) -> int:
    """Wake up to ``budget`` waiters of ``queue`` (a cancelled one is skipped); how many."""
    granted = 0
    while queue and granted < budget:
        future = queue.popleft()
        if not future.done():
            future.set_result(None)
            granted += 1
    return granted
