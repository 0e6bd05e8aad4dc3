"""What a relay says of itself: ``/stats``, ``/healthz`` and ``/metrics`` (a mixin of
``Relay``, kept apart so the component's module holds its work, not its reporting)."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from sluice.capture import CaptureSource
from sluice.core.buffer import EventBuffer
from sluice.core.rates import CounterHistory
from sluice.errors import SluiceError
from sluice.relay.config import RelayConfig
from sluice.relay.overview import Followers, buffer_span, links, source_summary, table_rates
from sluice.relay.store import BufferStore
from sluice.relay.turns import Turns
from sluice.relay.windows import OpenWindow, WindowFiles
from sluice.web import rss_bytes

SILENT_MS = 5_000  # /healthz turns 503 after this long without a word from the source


class Observed:
    """The reporting half of ``Relay``; these are the relay's attributes it reads."""

    config: RelayConfig
    tables: tuple[str, ...]
    history: CounterHistory  # captured events, with the newest SCN as the mark
    followers: Followers
    capture_error: SluiceError | None
    clients: int
    rejected_clients: int
    cold_reads: int
    bytes_served: int
    turns: Turns
    streams: dict[int, web.Request]
    task_errors: dict[str, str]
    persisted_scn: int
    persist_failures: int
    _capture: CaptureSource | None
    _store: BufferStore | None
    _open: OpenWindow | None
    _parts_bytes: int
    _started_at: float

    @property
    def buffer(self) -> EventBuffer:
        raise NotImplementedError

    @property
    def windows(self) -> WindowFiles:
        raise NotImplementedError

    def stats(self, tables: bool = False) -> dict[str, Any]:
        """``tables``: with events per second by table (it reads the newest windows)."""
        now = time.time()
        out = self._counters()
        out["role"] = "relay"
        out["name"] = self.config.name
        out["source"] = source_summary(self.config.source.get_secret_value())
        out["span"] = buffer_span(self.buffer)
        out["throughput"] = self.history.rates(now)
        if tables:
            out["table_rates"] = table_rates(self.buffer, self.history, now)
        out["followers"] = self.followers.to_json()
        out["links"] = links(self.config.links, self.config.sinks)
        return out

    def _counters(self) -> dict[str, Any]:
        buffer = self.buffer
        cap = self._capture.stats if self._capture else None
        lag = (cap.last_receive_ms - cap.last_commit_ms) if cap and cap.windows else 0
        return {
            "min_scn": buffer.start_scn,
            "max_scn": buffer.max_scn,
            "windows": buffer.window_count,
            "events": buffer.event_count,
            "bytes": buffer.bytes_held,
            "buffer_capacity": buffer.capacity,
            # a restart with another buffer size: what moved over to the new one
            "resized": self._resized(),
            # the buffer file was damaged or truncated at start: why its history was dropped
            "buffer_lost": self._store.lost if self._store else None,
            # windows too big for the buffer, held in files beside it (relay/windows.py)
            "window_files": {
                "windows": buffer.external_count,
                "bytes": buffer.external_bytes,
                "limit": self.windows.limit,
                # a transaction arriving in parts: in memory, then in windows/open.tmp
                "receiving_bytes": self._open.length if self._open else self._parts_bytes,
            },
            "clients": self.clients,
            "rejected_clients": self.rejected_clients,
            "queued_bytes": self.queued_bytes(),
            # streams catching up that wait for their turn now, and turns waited in all
            "catching_up": self.turns.waiting,
            "turn_waits": self.turns.waits,
            "rss_bytes": rss_bytes(),
            "persist": {
                "persisted_scn": self.persisted_scn,
                "error": self.task_errors.get("persist"),
                "failures": self.persist_failures,
            },
            "cold_reads": self.cold_reads,
            "bytes_served": self.bytes_served,
            "sources": list(self.tables),
            "uptime_s": round(time.time() - self._started_at, 1),
            "capture": {
                "connected": bool(cap and cap.connected),
                "last_scn": cap.last_scn if cap else 0,
                "source_end_scn": cap.source_end_scn if cap else 0,
                "lag_ms": lag,
                # how long the source has said nothing at all (it sends heartbeats when idle)
                "silent_ms": self._silent_ms(cap),
                "windows": cap.windows if cap else 0,
                "events": cap.events if cap else 0,
                "reconnects": cap.reconnects if cap else 0,
                "error": str(self.capture_error) if self.capture_error else None,
                # a local failure (a full disk) capture waits out, reading again from the
                # last commit
                "paused": cap.local_error if cap and not cap.connected else None,
                "stopped_sources": dict(cap.stopped_sources) if cap else {},
                "skipped_events": cap.skipped_events if cap else 0,
                "source": dict(cap.details) if cap else {},
                "tables": {k: dict(v) for k, v in cap.tables.items()} if cap else {},
            },
        }

    def _resized(self) -> dict[str, int] | None:
        resized = self._store.resized if self._store else None
        if resized is None:
            return None
        return {"from_bytes": resized[0], "kept_windows": resized[1], "dropped_windows": resized[2]}

    def queued_bytes(self) -> int:
        """Bytes written to streams that their clients have not read yet (kernel buffers
        aside): bounded by a chunk per stream, as the streams wait for their clients."""
        total = 0
        for request in self.streams.values():
            transport = request.transport
            if transport is not None:
                total += transport.get_write_buffer_size()
        return total

    def _silent_ms(self, cap: Any) -> int:
        if cap is None:
            return 0
        since = cap.last_seen_ms or int(self._started_at * 1000)
        return max(0, int(time.time() * 1000) - since)

    def health_problem(self) -> dict[str, Any] | None:
        """Why ``/healthz`` is not 200, or None: capture stopped, tables stopped, or a source
        that has been unreachable or silent for more than ``SILENT_MS``."""
        if self.capture_error is not None:
            return {"status": "capture stopped", "error": str(self.capture_error)}
        if self.task_errors:
            return {
                "status": "failing: " + ", ".join(sorted(self.task_errors)),
                "error": "; ".join(self.task_errors.values()),
                "persisted_scn": self.persisted_scn,
                "max_scn": self.buffer.max_scn,
            }
        capture = self._counters()["capture"]  # not the console's extras: probed often
        if capture["paused"]:
            return {"status": "capture paused", "error": capture["paused"]}
        if capture["stopped_sources"]:
            return {
                "status": "capture of some sources stopped",
                "stopped_sources": capture["stopped_sources"],
            }
        if capture["silent_ms"] > SILENT_MS:
            status = "source silent" if capture["connected"] else "source unreachable"
            return {
                "status": status,
                "silent_ms": capture["silent_ms"],
                "error": f"no word from the source for {capture['silent_ms']} ms (heartbeats "
                "come every second): is the database down, frozen or unreachable?",
            }
        return None

    def metrics(self) -> list[tuple[str, str, int | float]]:
        s = self._counters()
        cap = s["capture"]
        return [
            ("min_scn", "gauge", s["min_scn"]),
            ("max_scn", "gauge", s["max_scn"]),
            ("buffer_windows", "gauge", s["windows"]),
            ("buffer_events", "gauge", s["events"]),
            ("buffer_bytes", "gauge", s["bytes"]),
            ("buffer_capacity_bytes", "gauge", s["buffer_capacity"]),
            ("resize_dropped_windows", "gauge", (s["resized"] or {}).get("dropped_windows", 0)),
            ("buffer_lost", "gauge", int(s["buffer_lost"] is not None)),
            ("window_files", "gauge", s["window_files"]["windows"]),
            ("window_files_bytes", "gauge", s["window_files"]["bytes"]),
            ("window_files_limit_bytes", "gauge", s["window_files"]["limit"]),
            ("clients", "gauge", s["clients"]),
            ("rejected_clients_total", "counter", s["rejected_clients"]),
            ("queued_bytes", "gauge", s["queued_bytes"]),
            ("catching_up_streams", "gauge", s["catching_up"]),
            ("turn_waits_total", "counter", s["turn_waits"]),
            ("rss_bytes", "gauge", s["rss_bytes"]),
            ("persisted_scn", "gauge", s["persist"]["persisted_scn"]),
            ("persist_failures_total", "counter", s["persist"]["failures"]),
            ("served_bytes_total", "counter", s["bytes_served"]),
            ("captured_windows_total", "counter", cap["windows"]),
            ("captured_events_total", "counter", cap["events"]),
            ("capture_lag_ms", "gauge", cap["lag_ms"]),
            ("capture_reconnects_total", "counter", cap["reconnects"]),
            ("capture_up", "gauge", int(cap["connected"] and not cap["error"])),
            ("capture_stopped_sources", "gauge", len(cap["stopped_sources"])),
            ("capture_skipped_events_total", "counter", cap["skipped_events"]),
            # what the source kind reports of its own, where it is a number (PostgreSQL: the
            # slot's retained WAL and positions)
            *(
                (f"capture_source_{key}", "gauge", value)
                for key, value in sorted(cap["source"].items())
                if isinstance(value, int | float) and not isinstance(value, bool)
            ),
        ]
