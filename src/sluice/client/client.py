"""The client: pulls windows from relays, calls the consumer, persists the checkpoint."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sluice.client.checkpoints import CheckpointStore, MemoryCheckpointStore
from sluice.client.consumer import Consumer, ConsumerFailed
from sluice.client.transport import RelayConnection, check_relay_url
from sluice.core.checkpoint import Checkpoint, Online
from sluice.core.event import Window
from sluice.core.wire import Heartbeat, decode_events
from sluice.errors import BootstrapRequired, ConfigError, RelayUnavailable, SluiceError
from sluice.schemas import RowCodec, SchemaRegistry
from sluice.schemas.events import decode_window

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff for a failing consumer window and for unreachable relays."""

    initial_s: float = 0.1
    max_s: float = 5.0
    max_window_attempts: int = 10  # then ConsumerFailed; the checkpoint stays put
    give_up_after_s: float | None = None  # no relay answering this long: RelayUnavailable

    def delay(self, attempt: int) -> float:
        return float(min(self.max_s, self.initial_s * (2 ** max(attempt - 1, 0))))


@dataclass(frozen=True, slots=True)
class ClientConfig:
    relays: tuple[str, ...]
    sources: tuple[str, ...] = ()
    partition: str | None = None
    since_scn: int | None = None  # without a checkpoint; None: the oldest SCN the relay holds
    poll_timeout_ms: int = 10_000
    checkpoint_interval_s: float = 0.1  # saves are batched; replays stay at-least-once
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if not self.relays:
            raise ConfigError("give at least one relay URL")
        for url in self.relays:
            check_relay_url(url)


async def _call(result: Any) -> None:
    if inspect.isawaitable(result):
        await result


class AsyncClient:
    """``await client.run()``; ``stop()`` ends it after the current window."""

    def __init__(
        self, config: ClientConfig, consumer: Consumer, store: CheckpointStore | None = None
    ) -> None:
        self.config = config
        self.consumer = consumer
        self.store: CheckpointStore = store or MemoryCheckpointStore()
        self.registry = SchemaRegistry()
        self.scn = 0
        self.windows = 0
        self.events = 0
        self._saved_scn = -1
        self._last_save = 0.0
        self._stop = asyncio.Event()
        self._relay_index = 0
        self._connections: list[RelayConnection] = []

    def stop(self) -> None:
        self._stop.set()

    async def run(self, *, until_caught_up: bool = False) -> int:
        """Consume until stopped (or caught up); returns the checkpoint SCN."""
        async with aiohttp.ClientSession() as session:
            self._connections = [RelayConnection(u, session) for u in self.config.relays]
            self.scn = await self._initial_scn()
            try:
                await self._loop(until_caught_up)
            finally:
                self._save(force=True)
        return self.scn

    async def _initial_scn(self) -> int:
        checkpoint = self.store.load()
        if checkpoint is not None:
            return checkpoint.scn
        if self.config.since_scn is not None:
            return self.config.since_scn
        for attempt in range(1, 1_000_000):
            conn = self._connections[self._relay_index]
            try:
                return int((await conn.get_json("/stats"))["min_scn"])
            except RelayUnavailable as exc:
                if attempt * self.config.retry.max_s > (self.config.retry.give_up_after_s or 60):
                    raise
                log.warning("%s; retrying", exc)
                self._next_relay()
                await self._sleep(self.config.retry.delay(attempt))
        raise RelayUnavailable("no relay answered")

    async def _loop(self, until_caught_up: bool) -> None:
        failing_since: float | None = None
        attempt = 0
        gone: set[int] = set()
        while not self._stop.is_set():
            conn = self._connections[self._relay_index]
            try:
                caught_up = await self._pull(conn, until_caught_up)
                failing_since, attempt = None, 0
                gone.clear()
                if caught_up and until_caught_up:
                    return
            except BootstrapRequired:
                gone.add(self._relay_index)
                if len(gone) == len(self._connections):
                    raise
                self._next_relay()
            except RelayUnavailable as exc:
                now = time.monotonic()
                failing_since = failing_since or now
                attempt += 1
                limit = self.config.retry.give_up_after_s
                if limit is not None and now - failing_since >= limit:
                    raise
                log.warning("%s; retrying", exc)
                self._next_relay()
                await self._sleep(self.config.retry.delay(attempt))

    def _next_relay(self) -> None:
        self._relay_index = (self._relay_index + 1) % len(self._connections)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _pull(self, conn: RelayConnection, until_caught_up: bool) -> bool:
        """One ``/stream`` request; True when the relay said we are caught up."""
        stream = conn.stream(
            self.scn, self.config.sources, self.config.partition, self.config.poll_timeout_ms
        )
        async with contextlib.aclosing(stream):
            return await self._frames(conn, stream, until_caught_up)

    async def _frames(
        self,
        conn: RelayConnection,
        stream: AsyncGenerator[bytes | Heartbeat, None],
        until_caught_up: bool,
    ) -> bool:
        caught_up = False
        async for frame in stream:
            if isinstance(frame, Heartbeat):
                self.scn = max(self.scn, frame.scn)
                self._save(force=True)
                caught_up = True
                if until_caught_up or self._stop.is_set():
                    break
            elif self._stop.is_set():
                break
            else:
                await self._window(conn, frame)
        return caught_up

    async def _window(self, conn: RelayConnection, record: bytes) -> None:
        window = await self._decode(conn, record)
        if window.scn <= self.scn:
            return  # a replay we already processed
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._deliver(window)
                break
            except Exception as exc:
                await _call(self.consumer.on_rollback(window.scn, exc))
                if attempt >= self.config.retry.max_window_attempts:
                    raise ConsumerFailed(
                        f"consumer failed {attempt} times on window {window.scn}: {exc!r}; "
                        f"the checkpoint stays at {self.scn}",
                        scn=window.scn,
                    ) from exc
                log.warning("consumer failed on window %d (%r); retrying", window.scn, exc)
                await self._sleep(self.config.retry.delay(attempt))
                if self._stop.is_set():
                    return
        self.scn = window.scn
        self.windows += 1
        self.events += len(window.events)
        self._save()

    async def _deliver(self, window: Window) -> None:
        consumer = self.consumer
        await _call(consumer.on_window_start(window.scn))
        for event in window.events:
            await _call(consumer.on_event(event))
        await _call(consumer.on_window_end(window))

    async def _decode(self, conn: RelayConnection, record: bytes) -> Window:
        try:
            return decode_window(record, self._codec)
        except SluiceError:
            pass
        # An unknown schema version: fetch the sources' schemas, then decode again.
        for source in {raw.source for raw in decode_events(record)}:
            for schema in await conn.schemas(source):
                self.registry.add(schema)
        return decode_window(record, self._codec)

    def _codec(self, source: str, version: int) -> RowCodec:
        return self.registry.codec(source, version)

    def _save(self, force: bool = False) -> None:
        if self.scn == self._saved_scn:
            return
        now = time.monotonic()
        if not force and now - self._last_save < self.config.checkpoint_interval_s:
            return
        self.store.save(Online(self.scn))
        self._saved_scn, self._last_save = self.scn, now

    @property
    def checkpoint(self) -> Checkpoint:
        return Online(self.scn)


class Client:
    """The same client for plain threads: ``run()`` blocks; ``stop()`` from any thread."""

    def __init__(
        self, config: ClientConfig, consumer: Consumer, store: CheckpointStore | None = None
    ) -> None:
        self._async = AsyncClient(config, consumer, store)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()

    @property
    def scn(self) -> int:
        return self._async.scn

    def run(self, *, until_caught_up: bool = False) -> int:
        async def main() -> int:
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            return await self._async.run(until_caught_up=until_caught_up)

        try:
            return asyncio.run(main())
        finally:
            self._loop = None

    def stop(self) -> None:
        self._ready.wait(timeout=10)
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(self._async.stop)
