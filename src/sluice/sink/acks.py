"""What the sink's target acknowledged, apart from what the sink read (pure: no I/O).

A target that holds windows (a replica's grouped transaction, a broker's held group) takes a
window before it has it: the window counts as delivered only once the target commits a
checkpoint at or after it. Counting at ``deliver`` counted every window read again after a
lost group (a 20 s outage once showed 18,526 events delivered against 5,356 at the relay).
``Acks`` keeps the windows taken and not yet acknowledged, in order, and moves them to the
counters when the target's committed checkpoint reaches one of them; a loss drops them (they
are read again, and counted as re-reads).
"""

from __future__ import annotations

import time
from collections import deque
from typing import NamedTuple

from sluice.core.checkpoint import Checkpoint


class Rate:
    """Events per second over the last ``span_s`` seconds."""

    def __init__(self, span_s: float = 10.0) -> None:
        self.span_s = span_s
        self._marks: deque[tuple[float, int]] = deque()

    def add(self, total: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._marks.append((now, total))
        while len(self._marks) > 2 and now - self._marks[0][0] > self.span_s:
            self._marks.popleft()

    def per_second(self, now: float | None = None) -> float:
        if len(self._marks) < 2:
            return 0.0
        now = time.monotonic() if now is None else now
        (t0, n0), (t1, n1) = self._marks[0], self._marks[-1]
        if now - t1 > self.span_s:  # nothing acknowledged for a while: not the old rate
            return 0.0
        return 0.0 if t1 <= t0 else (n1 - n0) / (t1 - t0)


class _Taken(NamedTuple):
    checkpoint: Checkpoint | None
    scn: int
    ts_ms: int
    events: int
    seq: int  # its place among the windows taken


class Acks:
    """Counters of acknowledged windows and events, of reads and re-reads."""

    def __init__(self) -> None:
        self.events = 0  # acknowledged by the target
        self.windows = 0
        self.last_scn = 0  # of the newest acknowledged window
        self.last_ts_ms = 0
        self.read_events = 0  # every event handed to the target, re-reads included
        self.reread_events = 0  # events of windows read again (after a rewind or a retry)
        self.lost_events = 0  # taken, then lost with the target's uncommitted group
        self.rate = Rate()
        self._taken: deque[_Taken] = deque()
        self._seq = 0
        self._places: dict[Checkpoint, int] = {}  # a taken window's checkpoint -> its seq
        self._piece_events = 0  # a big window's pieces so far
        self._top_scn = -1  # the newest window read, and how many of its events
        self._top_events = 0
        self._cursor = 0  # events of the current window read before this batch
        self._oldest_ts_ms: int | None = None  # commit time of the oldest unacknowledged window

    def read(self, scn: int, ts_ms: int, events: int, *, first: bool = True) -> None:
        """A batch is about to go to the target (once per batch read, not per retry): what of
        it was read before (the same window, or its same pieces) is a re-read."""
        start = 0 if first else self._cursor
        self._cursor = end = start + events
        self.read_events += events
        if scn < self._top_scn:
            self.reread_events += events
        elif scn == self._top_scn:
            self.reread_events += max(0, min(end, self._top_events) - start)
            self._top_events = max(self._top_events, end)
        else:
            self._top_scn, self._top_events = scn, end
        if self._oldest_ts_ms is None and ts_ms:
            self._oldest_ts_ms = ts_ms

    def taken(
        self, scn: int, ts_ms: int, events: int, checkpoint: Checkpoint | None, *, last: bool
    ) -> None:
        """The target took a batch (it may still hold it uncommitted)."""
        self._piece_events += events
        if last:
            self._taken.append(_Taken(checkpoint, scn, ts_ms, self._piece_events, self._seq))
            if checkpoint is not None:
                self._places[checkpoint] = self._seq
            self._seq += 1
            self._piece_events = 0

    def settle(self, committed: Checkpoint | None, *, all_done: bool = False) -> None:
        """Acknowledge what the target's committed checkpoint covers (``all_done``: the target
        has everything it took: it holds nothing and acknowledged the last delivery)."""
        taken = self._taken
        if all_done:
            upto = taken[-1].seq if taken else -1
        else:  # one lookup: the FIFO may hold thousands of small windows
            upto = self._places.get(committed, -1) if committed is not None else -1
        while taken and taken[0].seq <= upto:
            self._ack(taken.popleft())
        if not taken and not self._piece_events:
            self._oldest_ts_ms = None
        elif taken:
            self._oldest_ts_ms = taken[0].ts_ms or self._oldest_ts_ms

    def _ack(self, window: _Taken) -> None:
        if window.checkpoint is not None and self._places.get(window.checkpoint) == window.seq:
            del self._places[window.checkpoint]
        self.events += window.events
        self.windows += 1
        self.last_scn, self.last_ts_ms = window.scn, window.ts_ms
        self.rate.add(self.events)

    def lost(self) -> None:
        """What the target held uncommitted went with its transaction: read again later."""
        self.lost_events += sum(w.events for w in self._taken) + self._piece_events
        self._taken.clear()
        self._places.clear()
        self._piece_events = 0

    @property
    def unacknowledged(self) -> int:
        return sum(w.events for w in self._taken) + self._piece_events

    def lag_s(self, lag_scn: int | None, now_ms: float | None = None) -> float | None:
        """Seconds behind the source, from what the target acknowledged: 0 when it holds the
        relay's newest SCN; else the age of the oldest window read and not acknowledged (the
        newest acknowledged one's when none is read yet)."""
        if lag_scn == 0:
            return 0.0
        ts_ms = self._oldest_ts_ms or self.last_ts_ms
        if not ts_ms:
            return None
        now_ms = time.time() * 1000 if now_ms is None else now_ms
        return round(max(0.0, (now_ms - ts_ms) / 1000), 3)
