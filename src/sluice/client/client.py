"""The client: pulls windows from relays (or a bootstrap server), calls the consumer, and
persists the checkpoint after each window.

Phases follow the checkpoint: ``Online`` reads a relay; when every relay answers 410 and a
bootstrap server is configured, ``CatchUp`` replays its log (if it still reaches back to the
checkpoint) or ``Snapshot`` reads its snapshot and then catches up from the snapshot's SCN.
Then the client returns to the relay by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace
from typing import Any, cast

import aiohttp

from sluice.client.checkpoints import CheckpointStore, MemoryCheckpointStore
from sluice.client.config import ClientConfig
from sluice.client.consumer import (
    Consumer,
    ConsumerFailed,
    JsonConsumer,
    RecordConsumer,
    RecordWindow,
)
from sluice.client.transport import RelayConnection
from sluice.core.checkpoint import CatchUp, Checkpoint, Online, Snapshot
from sluice.core.event import JsonWindow, Window
from sluice.core.pieces import Piece
from sluice.core.requests import CLIENT_HEADER, CONSOLE_HEADER
from sluice.core.wire import Heartbeat, decode_events, event_spans, read_window_header
from sluice.errors import BootstrapRequired, RelayUnavailable, SluiceError
from sluice.schemas import RowCodec, SchemaRegistry
from sluice.schemas.debezium import DebeziumOptions, DebeziumWindows
from sluice.schemas.events import decode_window, window_json

log = logging.getLogger(__name__)
AnyConsumer = Consumer | JsonConsumer | RecordConsumer
Delivered = Window | JsonWindow | RecordWindow


# A window bigger than this reaches a JSON consumer in pieces (several ``on_json_window``
# calls with its SCN, the checkpoint moved after the last): the client never holds it whole.
PIECE_BYTES = 8 << 20


class _Again(Exception):
    """A piece of a big window failed: read the window again from its start."""


async def _call(result: Any) -> None:
    if result is not None and inspect.isawaitable(result):  # plain hooks return None
        await result


class AsyncClient:
    """``await client.run()``; ``stop()`` ends it after the current window."""

    def __init__(
        self,
        config: ClientConfig,
        consumer: AnyConsumer,
        store: CheckpointStore | None = None,
    ) -> None:
        self.config = config
        self.consumer = consumer
        self._decoder: Callable[[bytes, Callable[[str, int], RowCodec]], Delivered]
        self._decoder = decode_window
        if isinstance(consumer, JsonConsumer):
            self._decoder = window_json
        elif isinstance(consumer, RecordConsumer):
            self._decoder = _record_window
        self._pieces = isinstance(consumer, JsonConsumer | RecordConsumer)
        self.store: CheckpointStore = store or MemoryCheckpointStore()
        self.registry = SchemaRegistry()
        self.checkpoint: Checkpoint = Online(0)
        self.windows = 0
        self.events = 0
        self._saved: Checkpoint | None = None
        self._last_save = 0.0
        self._stop = asyncio.Event()
        self._relay_index = 0
        self._connections: list[RelayConnection] = []
        self._bootstrap: RelayConnection | None = None
        self._caught_up_at = -1
        self._lag_warned = -1
        self._piece_failures = 0  # of the big window being delivered in pieces
        self._rewind: Checkpoint | None = None
        self.started_at: Checkpoint | None = None  # the checkpoint this run started from
        # stop or a rewind ends a long poll at once (it waited for the relay's next frame,
        # up to poll_timeout_ms on a quiet stream): the run's task, cancelled only while it
        # waits for a frame (``_idle``), never inside a delivery
        self._task: asyncio.Task[Any] | None = None
        self._idle = False
        self._woken = False

    @property
    def scn(self) -> int:
        return self.checkpoint.scn

    def stop(self) -> None:
        self._stop.set()
        self._wake()

    def rewind(self, checkpoint: Checkpoint) -> None:
        """Read again from ``checkpoint``: the consumer lost windows it had already taken
        (a sink whose target transaction went away). The stream in progress is dropped and
        the window being delivered is abandoned; nothing after it is delivered first."""
        self._rewind = checkpoint
        self._wake()

    def _wake(self) -> None:
        """End a wait for the relay's next frame (a delivery in progress ends by itself)."""
        task = self._task
        if self._idle and not self._woken and task is not None and task is not _current():
            self._woken = True
            task.cancel()

    @property
    def rewinding(self) -> bool:
        return self._rewind is not None

    def _who(self) -> dict[str, str]:
        headers = {}
        if self.config.name:
            headers[CLIENT_HEADER] = self.config.name
        if self.config.console:
            headers[CONSOLE_HEADER] = self.config.console
        return headers

    async def run(self, *, until_caught_up: bool = False) -> int:
        """Consume until stopped (or caught up with a relay); returns the checkpoint SCN."""
        self._task = asyncio.current_task()
        async with aiohttp.ClientSession(headers=self._who()) as session:
            self._connections = [RelayConnection(u, session) for u in self.config.relays]
            if self.config.bootstrap:
                self._bootstrap = RelayConnection(self.config.bootstrap, session)
            if self.config.debezium is not None and isinstance(self.consumer, JsonConsumer):
                self._decoder = await self._retrying(self._debezium_decoder)
            self.checkpoint = await self._retrying(self._initial)
            self.started_at = self.checkpoint
            self._saved = self.store.load()
            try:
                await self._loop(until_caught_up)
            finally:
                self._save(force=True)
        return self.scn

    async def _debezium_decoder(self) -> DebeziumWindows:
        """Debezium envelopes need to know the source database (the relay's ``/sources``)."""
        assert self.config.debezium is not None
        body = await self._relay().get_json("/sources")
        options = DebeziumOptions.parse(dict(self.config.debezium))
        return DebeziumWindows(dict(body.get("source") or {}), options)

    # -- where to start ----------------------------------------------------------------------
    async def _initial(self) -> Checkpoint:
        checkpoint = self.store.load()
        if checkpoint is not None:
            return checkpoint
        since = self.config.since_scn
        if since == 0 and self._bootstrap is not None:
            return Snapshot(await self._snapshot_scn())
        if since is not None:
            return Online(since)
        return Online(int((await self._relay().get_json("/stats"))["min_scn"]))

    async def _snapshot_scn(self) -> int:
        assert self._bootstrap is not None
        scn = (await self._bootstrap.get_json("/stats")).get("snapshot_scn")
        if scn is None:
            raise RelayUnavailable("the bootstrap server has no snapshot yet")
        return int(scn)

    async def _retrying(self, action: Any) -> Any:
        started, attempt = time.monotonic(), 0
        while True:
            try:
                return await action()
            except RelayUnavailable as exc:
                attempt += 1
                await self._retry_relay(exc, started, attempt)
                if self._stop.is_set():
                    raise

    async def _retry_relay(self, exc: RelayUnavailable, since: float, attempt: int) -> None:
        """Retry ``attempt`` of an outage that began at ``since`` (monotonic): ``exc`` again
        once it has lasted the give-up time, else a log line, then the next relay after the
        backoff."""
        lasted = time.monotonic() - since
        limit = self.config.retry.give_up_after_s
        if limit is not None and lasted >= limit:
            raise exc
        log.log(self.config.retry.outage_level(lasted), "%s; retrying", exc)
        self._next_relay()
        await self._sleep(self.config.retry.delay(attempt))

    # -- the phases --------------------------------------------------------------------------
    async def _loop(self, until_caught_up: bool) -> None:
        failing_since: float | None = None
        attempt = 0
        gone: set[int] = set()
        while not self._stop.is_set():
            if self._rewind is not None:
                log.warning("reading again from %s", self._rewind)
                self.checkpoint, self._rewind = self._rewind, None
                self._save(force=True)
            try:
                if isinstance(self.checkpoint, Snapshot):
                    await self._read_snapshot(self.checkpoint)
                    continue
                if isinstance(self.checkpoint, CatchUp):
                    await self._catch_up()
                    continue
                caught_up = await self._pull(self._relay(), until_caught_up)
                failing_since, attempt = None, 0
                gone.clear()
                if caught_up and until_caught_up:
                    return
            except _Again:
                continue  # a big window a consumer failed on: read it again from its start
            except BootstrapRequired:
                gone.add(self._relay_index)
                if len(gone) < len(self._connections):
                    self._next_relay()
                    continue
                gone.clear()
                await self._fall_back()
            except RelayUnavailable as exc:
                failing_since = failing_since or time.monotonic()
                attempt += 1
                await self._retry_relay(exc, failing_since, attempt)

    async def _fall_back(self) -> None:
        """Every relay answered 410: catch up from the bootstrap log, or take its snapshot."""
        if self._bootstrap is None:
            raise BootstrapRequired(
                f"the relay no longer holds SCN {self.scn}: this consumer needs a bootstrap "
                "(configure a bootstrap server, or restart it from the relay's oldest SCN)",
                scn=self.scn,
            )
        stats = await self._bootstrap.get_json("/stats")
        if self.scn >= int(stats["log_start_scn"]):
            if self.scn == self._caught_up_at:
                # Back from catch-up, and the relay still does not reach down to us: the
                # bootstrap log lags the relay's oldest SCN. Wait instead of spinning.
                if self._lag_warned != self.scn:
                    self._lag_warned = self.scn
                    log.warning(
                        "the bootstrap log ends at SCN %d, before the oldest SCN the relays "
                        "hold: waiting for the bootstrap job to catch up (is `sluice bootstrap "
                        "run` running, and is the relay's buffer large enough for it?)",
                        self.scn,
                    )
                await self._sleep(1.0)
            else:
                log.info(
                    "relay no longer holds SCN %d: catching up from the bootstrap log", self.scn
                )
            self.checkpoint = CatchUp(self.scn)
        else:
            log.info("SCN %d is older than the bootstrap log: reading its snapshot", self.scn)
            self.checkpoint = Snapshot(await self._snapshot_scn())
        self._save(force=True)

    async def _catch_up(self) -> None:
        assert self._bootstrap is not None
        caught_up = await self._pull(self._bootstrap, until_caught_up=True)
        if caught_up:
            log.info("caught up from the bootstrap log at SCN %d; back to the relay", self.scn)
            self._caught_up_at = self.scn
            self.checkpoint = Online(self.scn)
            self._save(force=True)

    async def _read_snapshot(self, start: Snapshot) -> None:
        assert self._bootstrap is not None
        after = f"{start.source}:{start.row}" if start.source is not None else None
        stream = self._bootstrap.snapshot(
            start.scn, after, self.config.sources, self.config.partition
        )
        try:
            async with contextlib.aclosing(stream):
                async for frame in stream:
                    if isinstance(frame, Heartbeat):
                        log.info("snapshot at SCN %d read; catching up", start.scn)
                        self.checkpoint = CatchUp(start.scn)
                        self._save(force=True)
                        return
                    if self._stop.is_set() or self._rewind is not None:
                        return
                    assert not isinstance(frame, Piece)  # snapshot windows come whole
                    record = frame
                    source = decode_events(record)[0].source
                    row = read_window_header(record).prev_scn  # the last row's number
                    await self._window(self._bootstrap, record, Snapshot(start.scn, source, row))
        except BootstrapRequired:
            log.warning("snapshot %d is gone from the bootstrap server; starting over", start.scn)
            self.checkpoint = Snapshot(await self._snapshot_scn())

    # -- reading windows ---------------------------------------------------------------------
    def _relay(self) -> RelayConnection:
        return self._connections[self._relay_index]

    def _next_relay(self) -> None:
        self._relay_index = (self._relay_index + 1) % len(self._connections)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _pull(self, conn: RelayConnection, until_caught_up: bool) -> bool:
        """One ``/stream`` request; True when the server said we are caught up."""
        stream = conn.stream(
            self.scn,
            self.config.sources,
            self.config.partition,
            self.config.poll_timeout_ms,
            PIECE_BYTES if self._pieces else None,
        )
        try:
            async with contextlib.aclosing(stream):
                return await self._frames(conn, stream, until_caught_up)
        except asyncio.CancelledError:
            if not self._woken:
                raise
            self._woken = False  # ours (``_wake``): the loop sees the stop or the rewind
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return False

    async def _next_frame(
        self, frames: AsyncIterator[bytes | Heartbeat | Piece]
    ) -> bytes | Heartbeat | Piece | None:
        """The stream's next frame (None at its end), waited for as ``_idle``."""
        self._idle = True
        try:
            return await anext(frames)
        except StopAsyncIteration:
            return None
        finally:
            self._idle = False

    async def _frames(
        self,
        conn: RelayConnection,
        stream: AsyncGenerator[bytes | Heartbeat | Piece, None],
        until_caught_up: bool,
    ) -> bool:
        caught_up = False
        while (frame := await self._next_frame(stream)) is not None:
            if self._stop.is_set() or self._rewind is not None:
                # a window abandoned on stop or rewind must not be passed by a heartbeat
                break
            if isinstance(frame, Heartbeat):
                if frame.scn > self.scn:
                    self.checkpoint = self._at(frame.scn)
                self._save(force=True)
                caught_up = True
                if until_caught_up or self._stop.is_set():
                    break
            elif isinstance(frame, Piece):
                await self._piece(conn, frame)
            else:
                scn = read_window_header(frame).scn
                if scn > self.scn:  # else a replay we already processed
                    await self._window(conn, frame, self._at(scn))
        return caught_up

    async def _piece(self, conn: RelayConnection, piece: Piece) -> None:
        """A piece of a big window (JSON consumers): delivered as it comes, the checkpoint
        moved after the last. A failed piece rolls the window back and reads it again from
        its first piece (``_Again``), after the usual backoff."""
        scn = read_window_header(piece.record).scn
        if scn <= self.scn:
            return  # a replay we already processed
        window = await self._decode(conn, piece.record)
        if isinstance(window, RecordWindow):
            done = self._at(scn) if piece.last else None
            window = replace(window, first_seq=piece.first_seq, last=piece.last, checkpoint=done)
        try:
            await self._deliver(window)
        except Exception as exc:
            await _call(self.consumer.on_rollback(scn, exc))
            if self._rewind is not None:
                raise _Again from exc
            self._piece_failures += 1
            attempt = self._piece_failures
            if attempt >= self.config.retry.max_window_attempts:
                raise ConsumerFailed(
                    f"consumer failed {attempt} times on window {scn}: {exc!r}; "
                    f"the checkpoint stays at {self.checkpoint}",
                    scn=scn,
                ) from exc
            log.warning("consumer failed on window %d (%r); reading it again", scn, exc)
            await self._sleep(self.config.retry.delay(attempt))
            raise _Again from exc
        self.events += _count(window)
        if piece.last:
            self._piece_failures = 0
            self.checkpoint = self._at(scn)
            self.windows += 1
            self._save()

    def _at(self, scn: int) -> Checkpoint:
        return CatchUp(scn) if isinstance(self.checkpoint, CatchUp) else Online(scn)

    async def _window(self, conn: RelayConnection, record: bytes, done: Checkpoint) -> None:
        """Deliver one window, retrying it whole; then the checkpoint becomes ``done``."""
        window = await self._decode(conn, record)
        if isinstance(window, RecordWindow):
            window = replace(window, checkpoint=done)
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._deliver(window)
                break
            except Exception as exc:
                await _call(self.consumer.on_rollback(window.scn, exc))
                if self._rewind is not None:
                    return  # abandoned: read again from the rewound checkpoint
                if attempt >= self.config.retry.max_window_attempts:
                    raise ConsumerFailed(
                        f"consumer failed {attempt} times on window {window.scn}: {exc!r}; "
                        f"the checkpoint stays at {self.checkpoint}",
                        scn=window.scn,
                    ) from exc
                log.warning("consumer failed on window %d (%r); retrying", window.scn, exc)
                await self._sleep(self.config.retry.delay(attempt))
                if self._stop.is_set():
                    return
        self.checkpoint = done
        self.windows += 1
        self.events += _count(window)
        self._save()

    async def _deliver(self, window: Delivered) -> None:
        consumer = self.consumer
        if isinstance(window, RecordWindow):
            await _call(cast(RecordConsumer, consumer).on_record_window(window))
            return
        if isinstance(window, JsonWindow):  # the decoder was chosen by the consumer's type
            await _call(cast(JsonConsumer, consumer).on_json_window(window))
            return
        consumer = cast(Consumer, consumer)
        await _call(consumer.on_window_start(window.scn))
        for event in window.events:
            await _call(consumer.on_event(event))
        await _call(consumer.on_window_end(window))

    async def _decode(self, conn: RelayConnection, record: bytes) -> Delivered:
        try:
            return self._decoder(record, self._codec)
        except SluiceError:
            pass
        # An unknown schema version: fetch the sources' schemas, then decode again.
        for source in {raw.source for raw in decode_events(record) if raw.op != "t"}:
            for schema in await conn.schemas(source):
                self.registry.add(schema)
        return self._decoder(record, self._codec)

    def _codec(self, source: str, version: int) -> RowCodec:
        return self.registry.codec(source, version)

    def _save(self, force: bool = False) -> None:
        if self.checkpoint == self._saved:
            return
        now = time.monotonic()
        if not force and now - self._last_save < self.config.checkpoint_interval_s:
            return
        self.store.save(self.checkpoint)
        self._saved, self._last_save = self.checkpoint, now


def _record_window(record: bytes, codec_for: Callable[[str, int], RowCodec]) -> RecordWindow:
    """The record as it is, once every schema version it uses is known (an unknown one
    raises, and the client fetches the schemas)."""
    header = read_window_header(record)
    spans = event_spans(record)
    for source, version in spans.versions():
        codec_for(source, version)
    return RecordWindow(header.scn, header.ts_ms, record, codec_for, spans=spans)


def _count(window: Delivered) -> int:
    if isinstance(window, JsonWindow):
        return len(window.lines)
    if isinstance(window, RecordWindow):
        return read_window_header(window.record).n_events
    return len(window.events)


def _current() -> asyncio.Task[Any] | None:
    """The running task, None outside one (a call from another thread's code)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None
