"""``StateService``: a client of the relays (and the bootstrap server) that keeps the
``StateStore`` current, window by window, and answers lookups, waiting for an SCN when asked
(read your writes).

Restore, not replay: a new store (no checkpoint) with a bootstrap server starts from its
snapshot (``since_scn=0``), then its log, then the relay, as every client does; a restarted
one continues from the checkpoint in the store, which commits with the rows it covers.
``store_scn`` is the SCN the store reflects: that of its checkpoint once it is online (or
replaying the log), None while a snapshot is still loading (rows then are a partial copy).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.client import AsyncClient, ClientConfig, RetryPolicy
from sluice.client.consumer import RecordWindow
from sluice.core.checkpoint import Checkpoint, Snapshot
from sluice.errors import SluiceError
from sluice.schemas.events import decode_window
from sluice.state.store import StateReader, StateStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StateConfig:
    relays: tuple[str, ...]
    store: Path
    sources: tuple[str, ...] = ()
    bootstrap: str | None = None
    since_scn: int | None = None
    partition: str | None = None  # a group member's partition I/N (``state/group.py``)
    name: str = "state"
    host: str = "127.0.0.1"
    port: int = 7072
    give_up_after_s: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)


class _Checkpoints:
    """The client's store: the state store's checkpoint; a save outside a window (heartbeats,
    phase changes) queued on the writer's thread after the windows before it."""

    def __init__(self, service: StateService) -> None:
        self.service = service

    def load(self) -> Checkpoint | None:
        return self.service.store.load_checkpoint()

    def save(self, checkpoint: Checkpoint) -> None:
        self.service.saved(checkpoint)


class StateService:
    """``async with StateService(config)``: follows the relays until ``stop()``."""

    def __init__(self, config: StateConfig) -> None:
        self.config = config
        self.store = StateStore(config.store)  # a bad path: ConfigError before anything starts
        self.reader = StateReader(config.store)
        self._io = ThreadPoolExecutor(1, thread_name_prefix="sluice-state")
        self.checkpoint: Checkpoint | None = self.store.load_checkpoint()
        self._tick = asyncio.Event()  # set (and replaced) whenever ``checkpoint`` moves
        self.windows = self.changes = 0
        self.client: AsyncClient | None = None
        self._task: asyncio.Task[int] | None = None
        self.error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> StateService:
        c = self.config
        since = c.since_scn
        if since is None and c.bootstrap and self.checkpoint is None:
            since = 0  # a new store with a bootstrap server: restore from its snapshot
        config = ClientConfig(
            relays=c.relays,
            sources=c.sources,
            since_scn=since,
            bootstrap=c.bootstrap,
            partition=c.partition,
            name=c.name,
            retry=RetryPolicy(
                initial_s=c.retry.initial_s, max_s=c.retry.max_s,
                give_up_after_s=c.give_up_after_s,
            ),
        )  # fmt: skip
        self.client = AsyncClient(config, self, _Checkpoints(self))
        self._task = asyncio.create_task(self.client.run(), name="state-client")
        self._task.add_done_callback(self._ended)
        return self

    async def stop(self) -> None:
        if self.client is not None:
            self.client.stop()
        if self._task is not None:
            with contextlib.suppress(SluiceError, asyncio.CancelledError):
                await self._task
        await asyncio.get_running_loop().run_in_executor(self._io, self.store.close)
        self._io.shutdown(wait=True)
        self.reader.close()

    async def __aenter__(self) -> StateService:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _ended(self, task: asyncio.Task[int]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.error = str(task.exception())
            log.error("state %s stopped: %s", self.config.name, self.error)

    @property
    def done(self) -> asyncio.Task[int] | None:
        return self._task

    # -- the consumer --------------------------------------------------------------------------
    async def on_record_window(self, window: RecordWindow) -> None:
        events = decode_window(window.record, window.codec_for).events
        loop = asyncio.get_running_loop()
        changed = await loop.run_in_executor(
            self._io, lambda: self.store.apply(events, window.checkpoint, last=window.last)
        )
        self.changes += changed
        if window.last:
            self.windows += 1
            self._moved(window.checkpoint)

    async def on_rollback(self, scn: int, error: BaseException) -> None:
        await asyncio.get_running_loop().run_in_executor(self._io, self.store.rollback)

    def saved(self, checkpoint: Checkpoint) -> None:
        """A checkpoint outside a window: written after the windows queued before it."""
        future = asyncio.wrap_future(self._io.submit(self.store.save_checkpoint, checkpoint))
        future.add_done_callback(lambda f: self._saved(f, checkpoint))

    def _saved(self, future: asyncio.Future[None], checkpoint: Checkpoint) -> None:
        failure = "cancelled" if future.cancelled() else future.exception()
        if failure is not None:
            log.warning("state %s: checkpoint %s not saved (%r); the next one will be",
                        self.config.name, checkpoint, failure)  # fmt: skip
            return
        self._moved(checkpoint)

    def _moved(self, checkpoint: Checkpoint | None) -> None:
        if checkpoint is None:
            return
        if self.checkpoint is None or checkpoint.scn >= self.checkpoint.scn:
            self.checkpoint = checkpoint
        self._tick.set()
        self._tick = asyncio.Event()

    # -- reads ---------------------------------------------------------------------------------
    @property
    def store_scn(self) -> int | None:
        """The SCN the store reflects (None while a snapshot loads)."""
        cp = self.checkpoint
        return None if cp is None or isinstance(cp, Snapshot) else cp.scn

    @property
    def phase(self) -> str:
        cp = self.checkpoint
        return "new" if cp is None else type(cp).__name__.lower()

    async def wait_scn(self, scn: int, timeout_s: float) -> bool:
        """Until the store reflects ``scn`` (True) or ``timeout_s`` passed (False)."""

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (done := self.store_scn) is None or done < scn:
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._tick.wait(), left)
        return True

    def stats(self) -> dict[str, Any]:
        client = self.client
        return {
            "name": self.config.name,
            "role": "state",
            "store": str(self.config.store),
            "phase": self.phase,
            "store_scn": self.store_scn,
            "checkpoint": None if self.checkpoint is None else str(self.checkpoint),
            "windows": self.windows,
            "changes": self.changes,
            "events": client.events if client is not None else 0,
            "keys": self.reader.counts(),
            "keyless_skipped": sorted(self.store.skipped_keyless),
            "relays": list(self.config.relays),
            "bootstrap": self.config.bootstrap,
            "error": self.error,
        }
