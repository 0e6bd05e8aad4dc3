"""The cluster client (Aesop's, beside ``Client``): several processes share one stream's key
partitions as a group; each runs an ``AsyncClient`` per partition it holds, reading
``partition=I/N`` with that partition's checkpoint in ZooKeeper, fenced by the epoch it took
the partition with. A member that dies hands its partitions on after its session timeout;
the next holder reads from the checkpoint saved last (at least once, as a client is: the
consumer may see the windows after that checkpoint again).

One consumer object takes every partition's windows (on one event loop, so its hooks never
run at the same time); ``on_partitions(held)``, when the consumer has it, is told the set of
partitions held whenever it changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from typing import Any

from sluice.client import AsyncClient, ClientConfig
from sluice.client.client import AnyConsumer
from sluice.cluster.checkpoints import ZkCheckpointStore
from sluice.cluster.membership import GroupSettings, Membership
from sluice.core.checkpoint import Checkpoint
from sluice.errors import CoordinatorUnavailable, Fenced, SluiceError

log = logging.getLogger(__name__)


class _Saves:
    """A partition's ZooKeeper store for a client: a save the coordinator could not take is
    said once and tried again at the next save (a client is at least once anyway); a save
    fenced off ends the partition's client."""

    def __init__(self, store: ZkCheckpointStore) -> None:
        self.store, self.failed = store, False

    def load(self) -> Checkpoint | None:
        return self.store.load()

    def save(self, checkpoint: Checkpoint) -> None:
        try:
            self.store.save(checkpoint)
        except CoordinatorUnavailable as exc:
            if not self.failed:
                log.warning("partition %d: checkpoint not saved (%s); saving the next one",
                            self.store.partition, exc)  # fmt: skip
            self.failed = True
            return
        self.failed = False


class AsyncGroupClient:
    """``await client.run()``: join the group, consume the partitions held, until ``stop()``."""

    def __init__(
        self, config: ClientConfig, consumer: AnyConsumer, settings: GroupSettings
    ) -> None:
        self.config, self.consumer, self.settings = config, consumer, settings
        self.membership = Membership(settings, self, {"name": config.name or settings.group})
        self.clients: dict[int, AsyncClient] = {}
        self._tasks: dict[int, asyncio.Task[int]] = {}
        self._stop = asyncio.Event()
        self.failure: BaseException | None = None

    def stop(self) -> None:
        self._stop.set()

    @property
    def events(self) -> int:
        return sum(c.events for c in self.clients.values())

    async def run(self) -> int:
        """Until stopped; raises what stopped a partition's client for good (a refused
        checkpoint from the future, a consumer that kept failing)."""
        await self.membership.run_until(self._stop)
        failure = self.failure or self.membership.failure
        if failure is not None:
            raise failure
        return 0

    async def start_partition(self, partition: int, epoch: int) -> None:
        n = self.settings.partitions
        config = dataclasses.replace(
            self.config, partition=f"{partition}/{n}", name=f"{self.settings.group}.p{partition}"
        )
        store = _Saves(self.membership.checkpoint_store(partition, epoch))
        client = AsyncClient(config, self.consumer, store)
        task = asyncio.create_task(client.run(), name=f"client-{config.name}")
        self.clients[partition], self._tasks[partition] = client, task
        task.add_done_callback(lambda t: self._ended(partition, client, t))
        self._told()

    async def stop_partition(self, partition: int) -> None:
        client, task = self.clients.pop(partition, None), self._tasks.pop(partition, None)
        if client is None or task is None:
            return
        client.stop()
        with contextlib.suppress(SluiceError, asyncio.CancelledError):
            await task
        self._told()

    def _ended(self, partition: int, client: AsyncClient, task: asyncio.Task[int]) -> None:
        if self.clients.get(partition) is not client:
            return  # stopped on purpose
        del self.clients[partition], self._tasks[partition]
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, Fenced):
            self.membership.lost(partition)
            self._told()
            return
        self.failure = exc or SluiceError(f"partition {partition}'s client stopped on its own")
        self.stop()

    def _told(self) -> None:
        hook = getattr(self.consumer, "on_partitions", None)
        if hook is not None:
            hook(frozenset(self.clients))

    def stats(self) -> dict[str, Any]:
        group = self.membership.describe()
        group["held"] = {
            str(p): {"epoch": self.membership.owned.get(p), "scn": c.scn, "events": c.events}
            for p, c in sorted(self.clients.items())
        }
        return group


class GroupClient:
    """The same for plain threads: ``run()`` blocks; ``stop()`` from any thread."""

    def __init__(
        self, config: ClientConfig, consumer: AnyConsumer, settings: GroupSettings
    ) -> None:
        self._args = (config, consumer, settings)
        self._async: AsyncGroupClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()

    def run(self) -> int:
        async def main() -> int:
            self._async = AsyncGroupClient(*self._args)
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            return await self._async.run()

        try:
            return asyncio.run(main())
        finally:
            self._loop = None

    def stop(self) -> None:
        self._ready.wait(timeout=10)
        loop, client = self._loop, self._async
        if loop is not None and client is not None:
            loop.call_soon_threadsafe(client.stop)
