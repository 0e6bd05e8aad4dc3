"""The relay component: capture thread -> bounded queue -> event buffer -> HTTP."""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sluice.capture import (
    CapturedWindow,
    CaptureSettings,
    CaptureSource,
    open_capture,
    source_info,
)
from sluice.core import wire
from sluice.core.buffer import EventBuffer
from sluice.core.component import AsyncComponent
from sluice.core.rates import CounterHistory
from sluice.errors import ConfigError, SluiceError, WindowTooLarge
from sluice.relay.config import RelayConfig
from sluice.relay.handoff import Handoff
from sluice.relay.observe import Observed
from sluice.relay.overview import Followers
from sluice.relay.server import make_app
from sluice.relay.store import STATE_FILE, BufferStore
from sluice.relay.turns import Turns
from sluice.relay.windows import OpenWindow, WindowFiles
from sluice.schemas import SchemaRegistry
from sluice.web import SERVER_LOG, start_site

log = logging.getLogger(__name__)
# Failures a background task retries: they pass when the disk or the descriptors free up.
_TRANSIENT = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE, errno.EIO})
# Capture hands a transaction over in parts of this size; one bigger than a quarter of the
# ring (or delivered in parts) is held in a file of its own (relay/windows.py).
PART_BYTES = 1 << 20


class Relay(Observed, AsyncComponent):
    """``async with Relay(config) as relay:`` serves until the block ends."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.tables = tuple(config.tables)
        self.registry = SchemaRegistry(config.data_dir / "schemas")
        self.capture_error: SluiceError | None = None
        self.clients = 0
        self.cold_reads = 0
        self.bytes_served = 0
        self.port = config.port
        self.changed = asyncio.Event()
        self._started = False
        self.stopping = False
        self._store: BufferStore | None = None
        self._capture: CaptureSource | None = None
        self._runner: web.AppRunner | None = None
        self._queue: Handoff[CapturedWindow] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._started_at = time.time()
        self.rejected_clients = 0
        self.turns = Turns()  # bulk chunks share the loop fairly (relay/turns.py)
        self.history = CounterHistory()  # captured events over the last minutes (console)
        self.followers = Followers()  # clients that said who they are (console links)
        self.source_info: dict[str, Any] = {}  # how event formats name the source
        # requests streaming now, by id (for the bytes queued to them)
        self.streams: dict[int, web.Request] = {}
        self.task_errors: dict[str, str] = {}  # a background task failing now, and why
        self.persisted_scn = 0
        self.persist_failures = 0
        self._windows: WindowFiles | None = None
        self._open: OpenWindow | None = None  # a big transaction arriving in parts
        self._parts: list[bytes] = []  # parts of a transaction not (yet) big enough for a file
        self._parts_bytes = 0
        self._capturing = False  # capture started: stop() saves where it got to

    @property
    def buffer(self) -> EventBuffer:
        assert self._store is not None, "relay not started"
        return self._store.buffer

    @property
    def windows(self) -> WindowFiles:
        assert self._windows is not None, "relay not started"
        return self._windows

    @property
    def source_end_scn(self) -> int:
        return self._capture.stats.source_end_scn if self._capture else 0

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> Relay:
        if self._started:
            raise SluiceError("relay already started")
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._queue = Handoff(self._loop, self.config.capture_queue)
        store = self._store = BufferStore(self.config.data_dir, self.config.buffer_size)
        try:
            self._windows = WindowFiles(self.config.data_dir, self.config.window_files_limit)
            url = self.config.source.get_secret_value()
            capture = self._capture = open_capture(url, self.capture_settings(self._sink))
            self.source_info = source_info(url)
            info = await asyncio.to_thread(capture.check)
            start = self._start_scn(store, info.end_scn)
            self._record_start(store, start)
            self._tidy_windows()
            store.check_schemas(self.registry, self.windows.sub_windows)
            capture.start(start)
            self._capturing = True
            log.info("relay capturing %s after SCN %d", ", ".join(self.tables), start)
            await self._serve()
        except BaseException:
            await self.stop()
            raise
        self.persisted_scn = store.persisted_scn() or 0
        self._note_rate()
        self._tasks = [
            asyncio.create_task(self._supervised("ingest", self._ingest)),
            asyncio.create_task(self._supervised("persist", self._persist)),
        ]
        return self

    async def _supervised(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        """Run a background task for the relay's life: a transient failure (a full disk, out of
        descriptors) is retried with backoff while ``/healthz`` says 503; anything else stops
        capture (the relay then serves what it holds, ``/healthz`` 503)."""
        delay = 0.1
        while not self.stopping:
            try:
                await body()
                return
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                if exc.errno not in _TRANSIENT:
                    await self._fail(name, exc)
                    return
                self.task_errors[name] = f"{exc.strerror or exc} ({name})"
                if name == "persist":
                    self.persist_failures += 1
                log.error("%s failed: %s; retrying in %.1f s", name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            except Exception as exc:
                await self._fail(name, exc)
                return

    async def _fail(self, name: str, exc: BaseException) -> None:
        log.error("%s failed: %r; capture stops, the relay serves what it holds", name, exc)
        self.task_errors[name] = f"{exc!r} ({name}, not retried)"
        self.capture_error = SluiceError(f"{name} failed: {exc!r}")
        if self._capture is not None:
            await asyncio.to_thread(self._capture.stop)

    def capture_settings(self, sink: Callable[[CapturedWindow], None]) -> CaptureSettings:
        assert self._store is not None
        return CaptureSettings(
            self.tables,
            self.registry,
            sink,
            on_fatal=self._on_fatal,
            part_bytes=min(PART_BYTES, self._store.buffer.capacity // 8),
            on_decode_error=self.config.on_decode_error,
            table_options=self.config.table_options,
            state_dir=self.config.data_dir,
            name=self.config.name,
        )

    def _start_scn(self, store: BufferStore, end_scn: int) -> int:
        buffer = store.buffer
        since = self.config.since_scn
        if since is not None:
            if not store.restored or since != buffer.max_scn:
                buffer.format(since)
            return since
        persisted = store.persisted_scn()
        if store.restored and (buffer.window_count or persisted is not None):
            if persisted is not None and persisted > buffer.max_scn:
                if buffer.window_count:
                    # The state is written after the buffer is flushed, so it cannot be
                    # ahead of intact windows: trust the buffer (capture reads the rest again).
                    log.warning(
                        "%s says SCN %d, ahead of the buffer's newest window %d: keeping the "
                        "buffer and capturing after %d",
                        STATE_FILE,
                        persisted,
                        buffer.max_scn,
                        buffer.max_scn,
                    )
                else:
                    buffer.format(persisted)  # the buffer file was lost; the SCN was not
            log.info(
                "resuming after SCN %d (%d windows restored)", buffer.max_scn, buffer.window_count
            )
            return buffer.max_scn
        if persisted is not None:
            buffer.format(persisted)
            return persisted
        buffer.format(end_scn)
        return end_scn

    def _record_start(self, store: BufferStore, start: int) -> None:
        """The SCN capture starts after is saved before capture starts, or the relay does
        not start: a later restart must resume from it, never from the source's end."""
        if self.config.since_scn is None and store.persisted_scn() == store.buffer.max_scn:
            return
        try:
            store.persist(store.buffer.max_scn, self.registry.fingerprints())
        except OSError as exc:
            raise ConfigError(
                f"cannot save the starting SCN {start} in {self.config.data_dir}: "
                f"{exc.strerror or exc}; free some space (or fix the folder's permissions) "
                "and start again: capture does not start until it is saved"
            ) from None

    def _tidy_windows(self) -> None:
        """Files of held windows after a restart: leftovers go; a missing or damaged one
        drops the history up to it (clients older than it bootstrap), never served broken."""
        buffer = self.buffer
        bad = self.windows.tidy(dict(buffer.external()))
        if not bad:
            return
        while buffer.window_count and buffer.start_scn < max(bad):
            buffer.evict_oldest()
        self.windows.delete(buffer.take_evicted())
        log.warning(
            "the files of %d windows held outside the buffer are missing or damaged (SCNs "
            "%s): history up to SCN %d dropped; clients older than it need a bootstrap",
            len(bad),
            ", ".join(map(str, bad[:5])),
            buffer.start_scn,
        )

    async def _serve(self) -> None:
        # handler_cancellation: a long-poll whose client went away stops at once.
        runner = self._runner = web.AppRunner(
            make_app(self),
            access_log=None,
            logger=SERVER_LOG,  # a client's mistake is an INFO line (web.py)
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=5,
            # aiohttp closes a connection idle in wait for a request after this long,
            # counted from its start: a request that never completes its headers included
            keepalive_timeout=self.config.header_timeout_s,
        )
        self.port = await start_site(runner, self.config.host, self.config.port)
        log.info("relay listening on http://%s:%d", self.config.host, self.port)

    async def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self._capture is not None:
            await asyncio.to_thread(self._capture.stop)
        self._wake_streams()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception:  # release everything below even so
                log.exception("a relay task failed")
        if self._runner is not None:
            await self._runner.cleanup()
        if self._open is not None:
            self._open.abort()
            self._open = None
        if self._store is not None:
            try:
                if self._capturing and (
                    self._store.buffer.window_count or self._store.persisted_scn() is not None
                ):
                    self._store.persist(self._store.buffer.max_scn, self.registry.fingerprints())
            except OSError as exc:  # the last save: the next start reads again from the last
                log.error("could not save the relay's state at stop: %s", exc)
            self._store.close()
        log.info("relay stopped")

    # -- capture thread -> loop --------------------------------------------------------------
    def _sink(self, window: CapturedWindow) -> None:
        """Runs in the capture thread; blocks while the queue is full (backpressure)."""
        assert self._queue is not None
        self._queue.put(window, lambda: self.stopping, window.more)

    def _on_fatal(self, error: SluiceError) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._set_error, error)

    def _set_error(self, error: SluiceError) -> None:
        self.capture_error = error

    async def _ingest(self) -> None:
        assert self._queue is not None
        while True:
            for window in await self._queue.get_all():
                try:
                    await self._take(window)
                except WindowTooLarge as exc:
                    log.error("capture stopped: %s", exc)
                    self.capture_error = exc
                    self._abort_open()
                    if self._capture is not None:
                        await asyncio.to_thread(self._capture.stop)
                    return
            self.windows.delete(self.buffer.take_evicted())
            self._note_rate()
            self._dirty.set()
            self._wake_streams()

    def _note_rate(self) -> None:
        if self._capture is not None:
            self.history.note(time.time(), self._capture.stats.events, self.buffer.max_scn)

    async def _take(self, window: CapturedWindow) -> None:
        """One window, or a part of one, into the buffer. Parts wait in memory up to a
        quarter of the buffer; a window bigger than that goes to a file of its own."""
        if window.aborts:
            self._abort_open()  # capture reads that transaction again
            return
        if window.more:
            await self._hold(window.events)
            return
        buffer = self.buffer
        if window.scn <= buffer.max_scn:
            self._abort_open()
            return  # replayed after a restart: already held
        events = window.events
        if self._open is None:
            events = self._parts + events if self._parts else events
            self._parts, self._parts_bytes = [], 0
            if _record_size(events) <= buffer.capacity // 4:
                buffer.append(window.scn, window.ts_ms, events)
                return
        opened = self._open
        if opened is None:
            opened = await asyncio.to_thread(self.windows.open_window)
        self._open = None
        try:
            await self._add(opened, events)
            dest = self.windows.path(window.scn)
            length = await asyncio.to_thread(
                opened.finish, window.scn, buffer.max_scn, window.ts_ms, dest
            )
        except BaseException:
            opened.abort()
            raise
        buffer.append_reference(window.scn, window.ts_ms, opened.n_events, length)
        log.info(
            "window %d (%d events, %d bytes) held in %s", window.scn, opened.n_events, length, dest
        )

    async def _hold(self, events: list[bytes]) -> None:
        """A part of a transaction: kept while all its parts fit a quarter of the buffer,
        then written (with those before it) to the file of an open window."""
        if self._open is None:
            self._parts += events
            self._parts_bytes += sum(map(len, events))
            if self._parts_bytes + 64 <= self.buffer.capacity // 4:
                return
            events, self._parts, self._parts_bytes = self._parts, [], 0
            self._open = await asyncio.to_thread(self.windows.open_window)
        await self._add(self._open, events)

    async def _add(self, opened: OpenWindow, events: list[bytes]) -> None:
        """Events into the open window's file, evicting older held windows while the files
        would pass their limit."""
        buffer = self.buffer
        need = _record_size(events)
        while buffer.external_count and (
            buffer.external_bytes + opened.length + need > self.windows.limit
        ):
            buffer.evict_oldest()
        self.windows.delete(buffer.take_evicted())
        await asyncio.to_thread(opened.add, events)

    def _abort_open(self) -> None:
        self._parts, self._parts_bytes = [], 0
        if self._open is not None:
            self._open.abort()
            self._open = None

    def _wake_streams(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    async def _persist(self) -> None:
        assert self._store is not None
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            scn = self.buffer.max_scn
            try:
                await asyncio.to_thread(self._store.persist, scn, self.registry.fingerprints())
            except BaseException:
                self._dirty.set()  # persist it on the retry
                raise
            self.persisted_scn = scn
            self.task_errors.pop("persist", None)
            if self._capture is not None:  # the source may release its log up to here
                await asyncio.to_thread(self._capture.on_persisted, scn)
            await asyncio.sleep(self.config.persist_interval_ms / 1000)


def _record_size(events: list[bytes]) -> int:
    return wire.WINDOW_HEADER_SIZE + sum(map(len, events)) + 8
