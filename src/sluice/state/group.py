"""``StateGroup``: state stores partitioned over a group's members (``--group``).

Each member keeps the keys of the partitions it holds, one SQLite file per partition
(``STORE_DIR/pI.db``, with that partition's checkpoint), fed by a client reading
``partition=I/N``. A key's partition is the one capture hashes it to (``crc32`` of its
canonical text, modulo N), so any member can tell which partition a lookup needs and which
member the group's assignment gives it to; a member that does not hold it forwards the
lookup there (``server.py``). A partition that moves keeps its file where it was: if it comes
back, that member continues from its own checkpoint; a member taking a partition it never
held restores it (from the bootstrap server's snapshot with ``--bootstrap``, else from the
oldest SCN the relay holds).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any
from zlib import crc32

from sluice.cluster import GroupSettings, Membership, assign
from sluice.errors import ConfigError, SluiceError
from sluice.state.service import StateConfig, StateService

log = logging.getLogger(__name__)


class StateGroup:
    """The partitions this member holds, as ``StateService``s."""

    def __init__(self, config: StateConfig, settings: GroupSettings, url: str) -> None:
        if config.store.exists() and not config.store.is_dir():
            raise ConfigError(f"--store {config.store}: a group keeps a directory of stores")
        try:
            config.store.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the store directory {config.store}: {exc}") from None
        self.config, self.settings, self.url = config, settings, url
        self.services: dict[int, StateService] = {}
        self.membership = Membership(settings, self, {"name": config.name, "url": url})

    async def start(self) -> StateGroup:
        await self.membership.start()
        return self

    async def stop(self) -> None:
        await self.membership.stop()

    async def start_partition(self, partition: int, epoch: int) -> None:
        n = self.settings.partitions
        config = dataclasses.replace(
            self.config,
            store=self.config.store / f"p{partition}.db",
            partition=f"{partition}/{n}",
            name=f"{self.settings.group}.p{partition}",
        )
        service = StateService(config)
        await service.start()
        self.services[partition] = service

    async def stop_partition(self, partition: int) -> None:
        service = self.services.pop(partition, None)
        if service is not None:
            with contextlib.suppress(SluiceError):
                await service.stop()

    def partition_of(self, key_text: str) -> int:
        return crc32(key_text.encode()) % self.settings.partitions

    def owner(self, partition: int) -> dict[str, Any] | None:
        """The member the group's assignment gives ``partition`` to (its id and URL)."""
        members = self.membership.members
        dealt = assign([m["id"] for m in members], self.settings.partitions)
        for member in members:
            if partition in dealt.get(member["id"], ()):
                return member
        return None

    def stats(self) -> dict[str, Any]:
        group = self.membership.describe()
        group["held"] = {
            str(p): {"store_scn": s.store_scn, "phase": s.phase, "keys": s.reader.counts()}
            for p, s in sorted(self.services.items())
        }
        return group
