"""``Membership``: one member of a group, over ZooKeeper (kazoo).

Layout under ``PATH/groups/NAME`` (the node's data: ``{"partitions": P}``)::

    members/m-0000000007   ephemeral sequential, one per live member (data: who it is)
    owners/3               ephemeral: the member that holds partition 3 (data: its member id)
    epochs/3               persistent: its version is partition 3's ownership epoch
    checkpoints/3          persistent: partition 3's checkpoint (clients and broker sinks)

How a partition changes hands: every member deals the partitions over the live members
(``assign``); a member stops the partitions it no longer has, then deletes their ``owners``
node; a member takes a partition by creating its ``owners`` node and bumping its ``epochs``
node in one ZooKeeper transaction, and only then starts it (``PartitionWork``). A member that
dies loses its ephemeral nodes when its session expires, so its partitions move on within
the session timeout. Fencing: every write for a partition carries the epoch it was taken
with and is refused once the epoch moved on (ZooKeeper's ``check`` in the checkpoint's
transaction; a database target's checkpoint row): a member that was paused past its session
(a long GC, SIGSTOP) cannot write for a partition it lost, even before it notices.

Threads: kazoo runs its own; its watches and state changes only set an ``asyncio.Event`` on
the loop, and every ZooKeeper call runs on one thread of this member's (in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry

from sluice.cluster.assign import assign
from sluice.cluster.checkpoints import ZkCheckpointStore
from sluice.cluster.url import CoordinatorUrl
from sluice.errors import ConfigError

log = logging.getLogger(__name__)
T = TypeVar("T")
RECHECK_S = 2.0  # a reconcile at least this often, whatever the watches said


@dataclass(frozen=True, slots=True)
class GroupSettings:
    coordinator: CoordinatorUrl
    group: str
    partitions: int
    quorum: int = 1
    session_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.partitions <= 4096:
            raise ConfigError(f"--partitions must be 1..4096, got {self.partitions}")
        if self.quorum < 1:
            raise ConfigError(f"--quorum must be at least 1, got {self.quorum}")
        if not 1 <= self.session_timeout_s <= 600:
            raise ConfigError(
                f"--session-timeout must be 1..600 seconds, got {self.session_timeout_s}"
            )


class PartitionWork(Protocol):
    """What a member runs per partition it holds. Work with a ``members_changed(members)``
    coroutine is also told the live members (join order) at each reconcile."""

    async def start_partition(self, partition: int, epoch: int) -> None: ...
    async def stop_partition(self, partition: int) -> None: ...


class Membership:
    """``await membership.start()`` joins the group; ``stop()`` stops the partitions, then
    leaves (its partitions move on at once, not after a session timeout)."""

    def __init__(self, settings: GroupSettings, work: PartitionWork, info: dict[str, Any]) -> None:
        self.settings, self.work = settings, work
        self.info = {"host": socket.gethostname(), "pid": os.getpid(), **info}
        self.base = f"{settings.coordinator.path}/groups/{settings.group}"
        self.member: str | None = None  # our members/ node's name, once registered
        self.members: list[dict[str, Any]] = []  # live members, join order (with their data)
        self.owned: dict[int, int] = {}  # partition -> the epoch it was taken with
        self.waiting: str | None = None  # why no partition is held (below quorum...)
        self.coordinator_state = "connecting"
        self.coordinator_error: str | None = None
        self.session_losses = 0
        self.rebalances = 0
        self.took_at: dict[int, float] = {}  # partition -> when it was taken (monotonic)
        self._zk = KazooClient(
            hosts=settings.coordinator.hosts,
            timeout=settings.session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, max_delay=1.0),
        )
        self._io = ThreadPoolExecutor(1, thread_name_prefix="sluice-zk")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()
        self._session: int | None = None  # the session our member node belongs to
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._io_closed = False
        self.done = asyncio.Event()  # the member's loop ended: ``failure`` says why
        self.failure: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._zk.add_listener(self._on_state)
        self._zk.start_async()  # kazoo keeps trying; the loop below says what it waits for
        self._task = asyncio.create_task(self._run(), name=f"group-{self.settings.group}")
        self._task.add_done_callback(self._ended)

    async def stop(self) -> None:
        """Safe twice."""
        if self._io_closed:
            return
        self._stopping = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for partition in sorted(self.owned):
            await self._give_up(partition)
        with contextlib.suppress(KazooException, OSError):
            if self.member is not None and self._zk.connected:
                await self._call(self._zk.delete, f"{self.base}/members/{self.member}")
        await self._call(self._close)
        self._io.shutdown(wait=True)
        self._io_closed = True

    def _close(self) -> None:
        with contextlib.suppress(Exception):
            self._zk.stop()
        with contextlib.suppress(Exception):
            self._zk.close()

    async def run_until(self, stop: asyncio.Event) -> None:
        """Join, hold partitions until ``stop`` is set or the member's loop ends (``failure``
        says why), then stop them and leave."""
        await self.start()
        try:
            stopped = asyncio.create_task(stop.wait())
            ended = asyncio.create_task(self.done.wait())
            await asyncio.wait((stopped, ended), return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            ended.cancel()
        finally:
            await self.stop()

    async def __aenter__(self) -> Membership:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.failure = task.exception()
            if not isinstance(self.failure, ConfigError):  # said by whoever runs the member
                self.coordinator_error = f"the member's loop stopped: {self.failure!r}"
                log.error("group %s: %s", self.settings.group, self.coordinator_error)
        self.done.set()

    # -- what others call ----------------------------------------------------------------------
    def lost(self, partition: int) -> None:
        """The partition's work found it fenced (another member holds it now)."""
        if self.owned.pop(partition, None) is not None:
            log.warning(
                "group %s: partition %d was taken over by another member; it stopped here",
                self.settings.group, partition,
            )  # fmt: skip
        self._changed.set()

    def checkpoint_store(self, partition: int, epoch: int) -> ZkCheckpointStore:
        return ZkCheckpointStore(
            self._zk,
            f"{self.base}/checkpoints/{partition}",
            f"{self.base}/epochs/{partition}",
            epoch,
            partition,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "group": self.settings.group,
            "coordinator": str(self.settings.coordinator),
            "member": self.member,
            "members": self.members,
            "partitions": self.settings.partitions,
            "quorum": self.settings.quorum,
            "owned": {str(p): e for p, e in sorted(self.owned.items())},
            "waiting": self.waiting,
            "coordinator_state": self.coordinator_state,
            "coordinator_error": self.coordinator_error,
            "session_timeout_s": self.settings.session_timeout_s,
            "session_losses": self.session_losses,
            "rebalances": self.rebalances,
        }

    # -- the loop ------------------------------------------------------------------------------
    def _on_state(self, state: str) -> None:
        """kazoo's thread: note it and wake the loop (never block here)."""
        loop = self._loop
        if loop is None:
            return
        loop.call_soon_threadsafe(self._noted, state)

    def _noted(self, state: str) -> None:
        if self._stopping:
            return  # our own close
        if state == KazooState.LOST:
            self.session_losses += 1
            self._session = None  # our ephemeral nodes are gone: nothing is ours any more
            log.warning(
                "group %s: the ZooKeeper session expired; stopping every partition held here "
                "and joining again", self.settings.group,
            )  # fmt: skip
        elif state == KazooState.SUSPENDED:
            log.warning("group %s: connection to ZooKeeper lost; reconnecting", self.settings.group)
        self.coordinator_state = state.lower()
        self._changed.set()

    def _wake(self, *_: Any) -> None:
        """A watch fired (kazoo's thread)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._changed.set)

    async def _run(self) -> None:
        said: str | None = None
        while not self._stopping:
            self._changed.clear()
            try:
                await self._reconcile()
                self.coordinator_error = None
                said = None
            except (KazooException, OSError, TimeoutError) as exc:
                self.coordinator_error = f"{type(exc).__name__}: {exc}"
                if self.coordinator_error != said:
                    log.warning(
                        "group %s: ZooKeeper at %s: %s; trying again",
                        self.settings.group, self.settings.coordinator, self.coordinator_error,
                    )  # fmt: skip
                    said = self.coordinator_error
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), RECHECK_S)

    async def _reconcile(self) -> None:
        if self._session is None and self.owned:
            for partition in sorted(self.owned):  # the session that held them expired
                await self._give_up(partition, release=False)
        if not self._zk.connected:
            self.waiting = f"connecting to ZooKeeper at {self.settings.coordinator}"
            return
        if self._session is None:
            await self._join()
        members = await self._members()
        wanted = self._wanted(members)
        told = getattr(self.work, "members_changed", None)  # work that follows the members
        if told is not None:
            await told(members)
        for partition in sorted(set(self.owned) - wanted):
            await self._give_up(partition)
        for partition in sorted(wanted - set(self.owned)):
            epoch = await self._call(self._take, partition)
            if epoch is None:
                continue  # its owner has not let go yet: its owners/ node's watch wakes us
            self.owned[partition] = epoch
            self.took_at[partition] = time.monotonic()
            log.info(
                "group %s: member %s holds partition %d (epoch %d)",
                self.settings.group, self.member, partition, epoch,
            )  # fmt: skip
            await self.work.start_partition(partition, epoch)

    def _wanted(self, members: list[str]) -> set[int]:
        quorum, count = self.settings.quorum, len(members)
        if count < quorum:
            waiting = f"{count} of {quorum} members (the quorum): waiting for more"
            if waiting != self.waiting:
                log.warning("group %s: %s", self.settings.group, waiting)
            self.waiting = waiting
            return set()
        self.waiting = None
        assert self.member is not None
        return set(assign(members, self.settings.partitions).get(self.member, ()))

    async def _join(self) -> None:
        await self._call(self._prepare)
        data = json.dumps(self.info).encode()
        path = await self._call(
            self._zk.create, f"{self.base}/members/m-", data, ephemeral=True, sequence=True
        )
        self.member = path.rsplit("/", 1)[-1]
        self._session = self._zk.client_id[0] if self._zk.client_id else None
        log.info(
            "group %s: joined as %s (%d partitions, quorum %d)",
            self.settings.group, self.member, self.settings.partitions, self.settings.quorum,
        )  # fmt: skip

    def _prepare(self) -> None:
        """The group's nodes (made once; a group's partition count never changes)."""
        zk, want = self._zk, self.settings.partitions
        zk.ensure_path(f"{self.base}/members")
        data, _ = zk.get(self.base)
        if not data:
            zk.set(self.base, json.dumps({"partitions": want}).encode())
        else:
            have = json.loads(data).get("partitions")
            if have != want:
                raise _Misconfigured(
                    f"group {self.settings.group} at {self.settings.coordinator} has {have} "
                    f"partitions, not {want}: checkpoints are kept per partition, so a group's "
                    "count is fixed; use --partitions {have}, or a new group name"
                )
        for kind in ("owners", "epochs", "checkpoints"):
            zk.ensure_path(f"{self.base}/{kind}")
        for p in range(want):
            for kind in ("epochs", "checkpoints"):
                with contextlib.suppress(NodeExistsError):
                    zk.create(f"{self.base}/{kind}/{p}", b"")

    async def _members(self) -> list[str]:
        names: list[str] = await self._call(
            self._zk.get_children, f"{self.base}/members", watch=self._wake
        )
        if self.member not in names:  # our node went (deleted by hand, or a session moved on)
            self._session = None
            raise KazooException(f"member node {self.member} is gone; joining again")
        members = sorted(names, key=lambda n: n.rsplit("-", 1)[-1])
        infos = []
        for name in members:
            with contextlib.suppress(NoNodeError):
                data, _ = await self._call(self._zk.get, f"{self.base}/members/{name}")
                infos.append({"id": name, **json.loads(data or b"{}")})
        if [m["id"] for m in self.members] != [m["id"] for m in infos] and self.members:
            self.rebalances += 1
        self.members = infos
        return members

    def _take(self, partition: int) -> int | None:
        """The partition's new epoch, or None while another member holds it."""
        assert self.member is not None
        owner = f"{self.base}/owners/{partition}"
        tx = self._zk.transaction()
        tx.create(owner, self.member.encode(), ephemeral=True)
        tx.set_data(f"{self.base}/epochs/{partition}", self.member.encode())
        created, bumped = tx.commit()
        if isinstance(created, NodeExistsError):
            self._zk.exists(owner, watch=self._wake)  # woken when its owner lets go
            return None
        if isinstance(created, Exception):
            raise created
        if isinstance(bumped, Exception):
            raise bumped
        return int(bumped.version)

    async def _give_up(self, partition: int, *, release: bool = True) -> None:
        """Stop the partition's work, then let another member take it."""
        self.owned.pop(partition, None)
        await self.work.stop_partition(partition)
        if release and self._zk.connected:
            with contextlib.suppress(KazooException):
                await self._call(self._release, partition)

    def _release(self, partition: int) -> None:
        owner = f"{self.base}/owners/{partition}"
        try:
            data, stat = self._zk.get(owner)
        except NoNodeError:
            return
        session = self._zk.client_id[0] if self._zk.client_id else None
        if data.decode() == self.member and stat.ephemeralOwner == session:
            self._zk.delete(owner, version=stat.version)

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, lambda: fn(*args, **kwargs))


class _Misconfigured(ConfigError):
    """The group exists with another partition count: the member stops (exit 2)."""
