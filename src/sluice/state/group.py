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
from sluice.cluster.assign import join_order
from sluice.errors import ConfigError, SluiceError
from sluice.state.service import StateConfig, StateService

log = logging.getLogger(__name__)


class StateGroup:
    """The partitions this member holds, as ``StateService``s."""

    def __init__(
        self, config: StateConfig, settings: GroupSettings, url: str, standby: int = 0
    ) -> None:
        if config.store.exists() and not config.store.is_dir():
            raise ConfigError(f"--store {config.store}: a group keeps a directory of stores")
        try:
            config.store.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the store directory {config.store}: {exc}") from None
        if standby < 0:
            raise ConfigError(f"--standby must be 0 or more, got {standby}")
        self.config, self.settings, self.url, self.standby = config, settings, url, standby
        self.services: dict[int, StateService] = {}  # held or kept warm as a standby
        self.owned: set[int] = set()
        self.standing: set[int] = set()  # partitions this member keeps warm for their owner
        # counters of the partitions dropped here (a counter never goes down)
        self.past: dict[str, int] = {"windows": 0, "changes": 0, "events": 0}
        self.membership = Membership(settings, self, {"name": config.name, "url": url})

    async def stop(self) -> None:
        await self.membership.stop()  # the partitions held (again: safe twice)
        for partition in sorted(self.services):  # and the standby copies
            await self._drop(partition)

    async def start_partition(self, partition: int, epoch: int) -> None:
        self.owned.add(partition)
        await self._ensure(partition)  # a standby's warm copy goes on as it is

    async def stop_partition(self, partition: int) -> None:
        self.owned.discard(partition)
        if partition not in self.standing:
            await self._drop(partition)

    async def members_changed(self, members: list[str]) -> None:
        """Keep warm copies of the partitions whose owner this member is a standby of."""
        if not self.standby:
            return
        me, wanted = self.membership.member, set()
        for partition in range(self.settings.partitions):
            if me in self._holders(members, partition)[1:]:
                wanted.add(partition)
        for partition in sorted(self.standing - wanted):
            self.standing.discard(partition)
            if partition not in self.owned:
                await self._drop(partition)
        for partition in sorted(wanted - self.standing):
            self.standing.add(partition)
            await self._ensure(partition)

    def _holders(self, members: list[str], partition: int) -> list[str]:
        """The partition's owner, then its standbys: the members after it in join order."""
        order = sorted(members, key=join_order)
        dealt = assign(order, self.settings.partitions)
        owner = next((m for m, parts in dealt.items() if partition in parts), None)
        if owner is None:
            return []
        at = order.index(owner)
        copies = min(self.standby, len(order) - 1)
        return [order[(at + k) % len(order)] for k in range(copies + 1)]

    async def _ensure(self, partition: int) -> None:
        if partition in self.services:
            return
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

    async def _drop(self, partition: int) -> None:
        service = self.services.pop(partition, None)
        if service is not None:
            stats = service.stats()
            for name in self.past:
                self.past[name] += stats[name]
            with contextlib.suppress(SluiceError):
                await service.stop()

    def partition_of(self, key_text: str) -> int:
        return crc32(key_text.encode()) % self.settings.partitions

    def holders(self, partition: int) -> list[dict[str, Any]]:
        """Who answers for ``partition``: its owner, then its standbys (their ids, URLs)."""
        members = {m["id"]: m for m in self.membership.members}
        return [members[m] for m in self._holders(list(members), partition) if m in members]

    def owner(self, partition: int) -> dict[str, Any] | None:
        holders = self.holders(partition)
        return holders[0] if holders else None

    def stats(self) -> dict[str, Any]:
        group = self.membership.describe()
        group["held"] = {
            str(p): {"role": "owner" if p in self.owned else "standby", "store_scn": s.store_scn,
                     "phase": s.phase, "keys": s.reader.counts()}
            for p, s in sorted(self.services.items())
        }  # fmt: skip
        group["standby"] = self.standby
        return group
