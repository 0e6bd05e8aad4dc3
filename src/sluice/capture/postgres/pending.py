"""What PostgreSQL capture's thread read but has not delivered (``Pending``), and how a run of
one relation's change messages becomes events at once (``bulk_events``)."""

from __future__ import annotations

from typing import Any

from sluice.capture.postgres.runs import MIN_RUN
from sluice.capture.postgres.tables import PgTable

# Longer runs cost more per row (cache misses) and hold more memory; shorter ones less often
# take the bulk path.
MAX_RUN = 4096
# Committed windows held back while more messages wait to be read, so that many small
# transactions of one table make one run: bounds the delay this adds (a few ms at most).
MAX_WINDOWS = 512


class Pending:
    """What the capture thread read but has not delivered: committed windows, the open
    transaction's events, and the run of one relation's change messages not yet transcoded,
    which may span windows (``parts`` says where each ends)."""

    def __init__(self) -> None:
        self.windows: list[tuple[int, int, list[bytes]]] = []  # end LSN, time (us), events
        self.events: list[bytes] = []  # the open transaction's
        self.run: list[Any] = []
        self.relid = b""  # the run's relation, as the message's 4 bytes
        self._cuts: list[tuple[int, list[bytes]]] = []  # (end in run, its window's events)
        self._bytes = self._counted = 0  # of the open transaction's events: see open_bytes
        self._handed = False  # the open transaction's first events went to the sink in parts
        self.parted: set[int] = set()  # committed windows whose first events did so

    def commit(self, end_lsn: int, ts_micros: int) -> None:
        if self.run:  # (a window with none of the run's messages: an empty part, harmless)
            self._cuts.append((len(self.run), self.events))
        self.windows.append((end_lsn, ts_micros, self.events))
        if self._handed:
            self.parted.add(end_lsn)
        self.events = []
        self._bytes = self._counted = 0
        self._handed = False

    def hand_over(self) -> None:
        """The open transaction's events so far went to the sink as a part (no run is
        pending: ``_changes`` took it)."""
        self.events = []
        self._bytes = self._counted = 0
        self._handed = True

    def open_bytes(self) -> int:
        """The size of the open transaction's events so far (counted as they come)."""
        events = self.events
        if len(events) < self._counted:  # a stopped source's events were dropped
            self._bytes = self._counted = 0
        if len(events) > self._counted:
            self._bytes += sum(map(len, events[self._counted :]))
            self._counted = len(events)
        return self._bytes

    def take_run(self, committed: bool) -> tuple[list[Any], list[tuple[int, list[bytes]]]]:
        """The run (``committed``: its committed windows' part; the open transaction's part
        stays pending), and where each window's part of it ends, with its window's events."""
        if not committed:
            run, parts = self.run, [*self._cuts, (len(self.run), self.events)]
            self.run = []
        elif self._cuts:
            parts = self._cuts
            run, self.run = self.run[: parts[-1][0]], self.run[parts[-1][0] :]
        else:
            return [], []
        self._cuts = []
        return run, parts


def bulk_events(table: PgTable, run: list[Any]) -> list[bytes] | None:
    """A run's events at once, one per message: by the compiled transcoder (any length), else
    the numpy path (``runs.py``); None when neither takes the run (short, the relation's
    columns, a value they refuse): the row path decides."""
    if table.compiled is None and (len(run) < MIN_RUN or table.runs is None):
        return None
    payloads = [message.payload for message in run]
    out = None if table.compiled is None else table.compiled.events(payloads)
    table.compiled_refused = table.compiled is not None and out is None
    if out is None and len(run) >= MIN_RUN and table.runs is not None:
        out = table.runs.events(payloads)
    return out
