"""``Holding``: whole windows for a broker held briefly and delivered together, with the
sink's checkpoint file written only after the broker took them.

A broker target acknowledges each batch after its broker did (JetStream acks, Redis replies,
RabbitMQ confirms): one round trip per window when windows are small. Held, many windows go in
one batch (their changes in order, ids unchanged, so the broker's own dedupe still applies), at
least every ``commit_interval_s`` or ``commit_rows``. The checkpoint file is then the target's:
written after each delivered group, never ahead of what the broker has; a group that fails is
``HeldWindowsLost`` (the sink reads it again from the file's checkpoint, and the broker drops
what it already had). A target whose cuts of a group must be the same when it is read again
(webhooks: an ``Idempotency-Key`` names a chunk's events) says with ``incomplete(changes)``
that the held windows must wait for more before they go.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from sluice.client.checkpoints import CheckpointStore
from sluice.core.checkpoint import Checkpoint
from sluice.errors import CoordinatorUnavailable, SluiceError
from sluice.sink.target import Batch, Change, HeldWindowsLost, Target, TargetUnavailable


class Holding:
    """Wraps a target whose ``deliver`` takes a batch of several windows."""

    keeps_checkpoint = True

    def __init__(self, inner: Target, store: CheckpointStore, commit_rows: int) -> None:
        self.inner, self.store, self.commit_rows = inner, store, commit_rows
        self.kind, self.delivery = inner.kind, inner.delivery
        self.wants_bodies = inner.wants_bodies
        self.wants_keys = getattr(inner, "wants_keys", True)
        self.committed: Checkpoint | None = None
        self._buffer: list[Change] = []
        self._last: Batch | None = None
        self._buffered = 0
        self._committing = 0
        self._lock = asyncio.Lock()
        self._poisoned = False  # a group failed: groups after it must not be delivered
        self._generation = 0  # one more at each rollback: groups taken before it are stale
        self._inflight: asyncio.Task[None] | None = None
        self.groups = 0

    @property
    def held(self) -> int:
        return self._buffered + self._committing

    def describe(self) -> str:
        return self.inner.describe()

    def stats(self) -> dict[str, Any]:
        return {**self.inner.stats(), "held_windows": self.held, "groups": self.groups}

    def interrupt(self) -> None:
        interrupt = getattr(self.inner, "interrupt", None)
        if interrupt is not None:
            interrupt()

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        with contextlib.suppress(SluiceError):
            await self._settle()  # what it held is read again next time
        await self.inner.stop()

    async def load_checkpoint(self) -> Checkpoint | None:
        self.committed = self.store.load()
        return self.committed

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        if self.held or self._poisoned:
            return  # the next group writes a newer one
        try:
            self.store.save(checkpoint)
        except CoordinatorUnavailable as exc:  # a group's store: tried again next flush
            raise TargetUnavailable(str(exc)) from exc
        self.committed = checkpoint

    async def deliver(self, batch: Batch) -> None:
        if batch.first and batch.last:
            self._buffer.extend(batch.changes)
            self._last = batch
            self._buffered += 1
            if len(self._buffer) >= self.commit_rows:
                # the group goes while the next windows are shaped (one in flight at most)
                await self._settle()
                self._inflight = asyncio.create_task(self._deliver_held())
            return
        await self.commit(force=True)  # a big window's pieces go as they come, after what is held
        generation = self._generation
        async with self._lock:
            self._check(generation)
            await self.inner.deliver(batch)
            if batch.last and batch.checkpoint is not None:
                self._save(batch.checkpoint)

    async def _settle(self) -> None:
        """Wait for the group in flight; its failure is raised here."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            await inflight

    async def commit(self, force: bool = False) -> None:
        await self._settle()
        await self._deliver_held(force)

    async def _deliver_held(self, force: bool = False) -> None:
        if not self._buffered:
            return
        incomplete = getattr(self.inner, "incomplete", None)
        if not force and incomplete is not None and incomplete(self._buffer):
            return  # held on: the next windows complete what the target must cut again
        last = self._last
        assert last is not None
        group = Batch(last.scn, last.ts_ms, tuple(self._buffer), checkpoint=last.checkpoint)
        held, generation = self._buffered, self._generation
        self._discard()
        self._committing += held
        try:
            async with self._lock:
                self._check(generation)
                try:
                    await self.inner.deliver(group)
                except TargetUnavailable as exc:
                    self._poisoned = True
                    self._discard()  # windows taken since are after the lost ones
                    raise HeldWindowsLost(str(exc)) from exc
                except BaseException:
                    self._poisoned = True  # a refusal: nothing after the group may be saved
                    raise
                if group.checkpoint is not None:
                    self._save(group.checkpoint)
                self.groups += 1
        finally:
            self._committing -= held

    def _save(self, checkpoint: Checkpoint) -> None:
        """After the broker took the windows; a group's store that cannot be reached loses
        them for this sink (read again from the checkpoint saved: the broker drops replays)."""
        try:
            self.store.save(checkpoint)
        except CoordinatorUnavailable as exc:
            self._poisoned = True
            raise HeldWindowsLost(f"checkpoint not saved: {exc}") from exc
        self.committed = checkpoint

    def _check(self, generation: int) -> None:
        if self._poisoned or generation != self._generation:
            raise HeldWindowsLost("windows before these were lost; reading them again")

    def _discard(self) -> None:
        self._buffer, self._last, self._buffered = [], None, 0

    async def rollback(self) -> None:
        with contextlib.suppress(SluiceError):
            await self._settle()  # a group in flight is lost with the rest
        self._discard()
        self._poisoned = False
        self._generation += 1
        await self.inner.rollback()
