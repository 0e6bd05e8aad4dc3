"""Consumers for tests and demos: record what arrives, or keep a replica of the tables."""

from __future__ import annotations

import json
import threading
from typing import Any

from sluice.client.consumer import BaseConsumer
from sluice.core.event import Event, Window


def key_text(key: dict[str, Any] | None) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


class RecordingConsumer(BaseConsumer):
    """Keeps every delivered window (including replays) in order."""

    def __init__(self) -> None:
        self.windows: list[Window] = []
        self.rollbacks: list[int] = []

    def on_window_end(self, window: Window) -> None:
        self.windows.append(window)

    def on_rollback(self, scn: int, error: BaseException) -> None:
        self.rollbacks.append(scn)

    @property
    def events(self) -> list[Event]:
        return [e for w in self.windows for e in w.events]


class ReplicaConsumer(BaseConsumer):
    """Applies events to an in-memory copy: ``rows[source][key_text] = after image``.

    A window is applied all at once at its end, so a failed window leaves nothing behind.
    """

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, dict[str, Any]]] = {}
        self.scn = 0
        self.events = 0
        self._pending: list[Event] = []
        self._lock = threading.Lock()

    def on_window_start(self, scn: int) -> None:
        self._pending = []

    def on_event(self, event: Event) -> None:
        self._pending.append(event)

    def on_window_end(self, window: Window) -> None:
        with self._lock:
            for event in self._pending:
                table = self.rows.setdefault(event.source, {})
                if event.op == "t":  # every row of the source is gone
                    table.clear()
                    continue
                key = key_text(event.key)
                if event.op == "d":
                    table.pop(key, None)
                else:
                    assert event.after is not None
                    table[key] = event.after
            self.events += len(self._pending)
            self.scn = window.scn
        self._pending = []

    def on_rollback(self, scn: int, error: BaseException) -> None:
        self._pending = []

    def snapshot(self, source: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self.rows.get(source, {}))
