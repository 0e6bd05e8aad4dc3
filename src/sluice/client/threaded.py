"""``Client``: the asyncio client for plain threads."""

from __future__ import annotations

import asyncio
import threading

from sluice.client.checkpoints import CheckpointStore
from sluice.client.client import AnyConsumer, AsyncClient
from sluice.client.config import ClientConfig
from sluice.core.checkpoint import Checkpoint


class Client:
    """The same client for plain threads: ``run()`` blocks; ``stop()`` from any thread."""

    def __init__(
        self,
        config: ClientConfig,
        consumer: AnyConsumer,
        store: CheckpointStore | None = None,
    ) -> None:
        self._async = AsyncClient(config, consumer, store)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread_id = 0

    @property
    def scn(self) -> int:
        return self._async.scn

    @property
    def checkpoint(self) -> Checkpoint:
        return self._async.checkpoint

    def run(self, *, until_caught_up: bool = False) -> int:
        async def main() -> int:
            self._loop = asyncio.get_running_loop()
            self._thread_id = threading.get_ident()
            self._ready.set()
            return await self._async.run(until_caught_up=until_caught_up)

        try:
            return asyncio.run(main())
        finally:
            self._loop = None

    def stop(self) -> None:
        """Stop after the current window; from any thread, or from a consumer hook."""
        self._ready.wait(timeout=10)
        loop = self._loop
        if loop is None:
            return
        if self._thread_id == threading.get_ident():
            self._async.stop()  # inside a hook: take effect before the next window
        else:
            loop.call_soon_threadsafe(self._async.stop)
