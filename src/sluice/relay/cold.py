"""Cold reads: a range older than the event buffer, read again from the source's log.

A consumer that opts in (``/stream?...&cold=true``, the bootstrap job does) and asks for
``since_scn`` older than the buffer gets the windows ``(since_scn, buffer start]`` from a
short-lived capture of its own (``open_capture`` with ``CaptureSettings.cold``), in the same
wire format; then a heartbeat at the buffer's start so it continues from the buffer. Any
``rereadable`` kind can do it (a MySQL binlog, whose files written with
``binlog_row_metadata=FULL`` describe their own columns so old events decode as they were
written; a chained relay, whose upstreams serve the range); the answer is 410 for a kind that
cannot read again (a replication slot, polled queries) and when the source no longer holds
the range (purged binlog files): the consumer must bootstrap or re-seed. Cold reads are few
at a time (each is one more reader on the source).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import replace

from sluice.capture import CapturedWindow, open_capture
from sluice.core import wire
from sluice.core.requests import HttpProblem
from sluice.errors import SluiceError
from sluice.relay.handoff import Handoff
from sluice.relay.view import RelayView

log = logging.getLogger(__name__)
MAX_COLD_READS = 2


class ColdRead:
    """One cold range: ``async for record in cold.windows()``; ``close()`` always."""

    def __init__(self, relay: RelayView, since: int, until: int) -> None:
        self.relay, self.since, self.until = relay, since, until
        loop = asyncio.get_running_loop()
        self._queue: Handoff[CapturedWindow | SluiceError] = Handoff(loop, 64)
        self._closed = False
        self.reached = False
        # ``cold``: the kind gives this reader an identity of its own (a binlog dump id), so
        # the relay's own reader keeps running.
        settings = replace(relay.capture_settings(self._sink), on_fatal=self._fatal, cold=True)
        self._capture = open_capture(relay.config.source.get_secret_value(), settings)

    def _sink(self, window: CapturedWindow) -> None:
        self._queue.put(window, lambda: self._closed)

    def _fatal(self, error: SluiceError) -> None:
        if not self._closed:
            self._queue.put(error, lambda: self._closed)

    async def start(self) -> None:
        if not self._capture.rereadable:
            raise HttpProblem(
                410,
                f"since_scn {self.since} is older than this relay holds (oldest {self.until}), "
                "and this kind of source cannot be read again from an older point",
                oldest_scn=self.until,
            )
        try:
            await asyncio.to_thread(self._capture.check)
            await asyncio.to_thread(self._capture.start, self.since)
        except SluiceError as exc:
            raise HttpProblem(
                410,
                f"since_scn {self.since} is older than this relay holds (oldest "
                f"{self.until}) and cannot be read again from the source: {exc}",
                oldest_scn=self.until,
            ) from None
        log.info("cold read of SCNs %d..%d from the source's log", self.since, self.until)

    async def windows(self) -> AsyncIterator[bytes]:
        """Windows after ``since`` up to ``until``; ``reached`` tells whether it got there."""
        prev = self.since
        parts: list[bytes] = []  # of a transaction capture hands over in parts
        held = 0
        while not self.reached:
            try:
                items = await asyncio.wait_for(self._queue.get_all(), 0.5)
            except TimeoutError:
                # No captured window may end exactly at ``until`` (a relay's first SCN is
                # where it started): the binlog reader having passed it is enough.
                self.reached = self._capture.stats.last_scn >= self.until
                continue
            for item in items:
                if isinstance(item, SluiceError):
                    raise item
                if item.aborts:
                    parts, held = [], 0
                    continue
                if item.more:
                    # A cold read holds a big transaction whole to frame it: bounded by the
                    # disk the relay may use for held windows.
                    parts += item.events
                    held += sum(map(len, item.events))
                    if held > self.relay.windows.limit:
                        raise SluiceError(
                            f"a transaction of more than {held:,} bytes cannot be read cold "
                            "(window_files_bytes); bootstrap the consumer instead"
                        )
                    continue
                events, parts, held = parts + item.events, [], 0
                if item.scn <= self.since:
                    continue
                if item.scn > self.until:
                    self.reached = True
                    return
                yield wire.encode_window(item.scn, prev, item.ts_ms, events)
                prev = item.scn
                if item.scn == self.until:
                    self.reached = True
                    return

    async def close(self) -> None:
        self._closed = True
        await asyncio.to_thread(self._capture.stop)
