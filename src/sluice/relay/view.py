"""What the HTTP API sees of a relay (``server.py`` and ``cold.py`` never import
``relay.py``, which builds the app: no import circle)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from sluice.capture import CapturedWindow, CaptureSettings
from sluice.core.buffer import EventBuffer
from sluice.relay.config import RelayConfig
from sluice.relay.overview import Followers
from sluice.relay.turns import Turns
from sluice.relay.windows import WindowFiles
from sluice.schemas import SchemaRegistry


class RelayView(Protocol):
    config: RelayConfig
    tables: tuple[str, ...]
    registry: SchemaRegistry
    changed: asyncio.Event
    stopping: bool
    clients: int
    rejected_clients: int
    cold_reads: int
    bytes_served: int
    streams: dict[int, web.Request]
    turns: Turns
    followers: Followers
    source_info: dict[str, Any]

    @property
    def buffer(self) -> EventBuffer: ...

    @property
    def source_end_scn(self) -> int: ...

    @property
    def windows(self) -> WindowFiles: ...

    def capture_settings(self, sink: Callable[[CapturedWindow], None]) -> CaptureSettings: ...

    def stats(self, tables: bool = False) -> dict[str, Any]: ...

    def health_problem(self) -> dict[str, Any] | None: ...

    def metrics(self) -> list[tuple[str, str, int | float]]: ...
