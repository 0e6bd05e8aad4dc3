"""``GroupSink``: one member of a sink group (``--group``): the stream's key partitions are
shared by the group's members through ZooKeeper (``sluice.cluster``), and this member runs one
``Sink`` per partition it holds, each reading ``partition=I/N`` from the relay with a
checkpoint of its own, named ``GROUP.pI``:

- a database replica keeps it as a row of its checkpoint table, written in each window's
  transaction and fenced by the partition's ownership epoch (``sql/fence.py``);
- a broker or webhook keeps it in ZooKeeper (``ZkCheckpointStore``), fenced the same way;
- Kafka keeps it in its checkpoint topic, and ``transactional.id`` ``GROUP.pI`` fences a
  former owner's producer (Kafka's own zombie fencing).

A partition that moves stops here first (its held windows are read again by its next owner
from the checkpoint committed), then starts there. A target whose exactly-once rests on one
writer per route (Redis Streams' rising IDs) needs ``{partition}`` in its route template.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sluice.client.checkpoints import MemoryCheckpointStore
from sluice.cluster import GroupSettings, Membership, parse_coordinator_url
from sluice.errors import ConfigError, Fenced, SluiceError
from sluice.sink.config import SinkConfig, redact
from sluice.sink.sink import Sink, SinkFailed

log = logging.getLogger(__name__)

# Counters summed over the partitions a member holds (its /stats and /metrics); those of
# partitions that moved on stay in (``_past``): a counter never goes down.
SUMMED = ("events", "windows", "read_events", "reread_events", "lost_events",
          "filtered_events", "skipped_events", "retries", "rewinds")  # fmt: skip
GAUGES = ("unacknowledged_events", "events_per_s")  # the partitions held now only


class GroupSink:
    """``await group.run()``: join the group and deliver the partitions held, until stopped."""

    def __init__(self, config: SinkConfig) -> None:
        if config.group is None or config.coordinator is None or config.partitions is None:
            raise ConfigError("a sink group needs --group, --coordinator and --partitions")
        self.config = config
        self.group = config.group
        self.settings = GroupSettings(
            parse_coordinator_url(config.coordinator.get_secret_value()),
            config.group,
            config.partitions,
            config.quorum,
            config.session_timeout_s,
        )
        # bad URLs, templates, filters and formats fail here, before anything starts
        probe = Sink(self._partition_config(0), checkpoints=MemoryCheckpointStore(), fence=(0, 0))
        inner = getattr(probe.target, "inner", probe.target)
        if getattr(inner, "single_writer", False) and "{partition}" not in probe.route:
            raise ConfigError(
                f"a {inner.kind} target in a group needs {{partition}} in its route template "
                f"(now {probe.route!r}): its exactly-once rests on one writer per "
                f"{inner.kind} route, and each partition has its own writer"
            )
        self.describe_target = probe.target.describe()
        self.target_kind, self.delivery = probe.target.kind, probe.target.delivery
        self.membership = Membership(self.settings, self, {"name": config.name})
        self.sinks: dict[int, Sink] = {}
        self._tasks: dict[int, asyncio.Task[int]] = {}
        self._stop = asyncio.Event()
        self._fatal: SluiceError | None = None
        self.state = "starting"
        self.error: str | None = None
        self.console_url: str | None = None
        self._relay_max_scn: int | None = None
        self._past: dict[str, int] = dict.fromkeys(SUMMED, 0)  # partitions no longer here
        self._stopping: set[int] = set()  # partitions being stopped here on purpose

    def _partition_config(self, partition: int) -> SinkConfig:
        n = self.settings.partitions
        return self.config.model_copy(
            update={
                "name": f"{self.group}.p{partition}",
                "partition": f"{partition}/{n}",
                "group": None,
                "coordinator": None,
                "partitions": None,
            }
        )

    # -- running -------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    async def run(self, *, until_caught_up: bool = False) -> int:
        if until_caught_up:
            raise ConfigError(
                "--until-caught-up is for one sink; a group member runs until stopped"
            )
        self.state = "running"
        try:
            await self.membership.run_until(self._stop)  # stops every partition held, then leaves
        finally:
            self.state = "failed" if self._fatal or self.membership.failure else "stopped"
        failure = self._fatal or self.membership.failure
        if failure is not None:
            self.error = str(failure)
            if isinstance(failure, SluiceError):
                raise failure
            raise SinkFailed(f"group {self.group}: {failure!r}") from failure
        return 0

    async def start_partition(self, partition: int, epoch: int) -> None:
        store = self.membership.checkpoint_store(partition, epoch)
        sink = Sink(self._partition_config(partition), checkpoints=store, fence=(epoch, partition))
        sink.console_url = self.console_url
        sink.relay_max_scn = self._relay_max_scn
        task = asyncio.create_task(sink.run(), name=f"sink-{self.group}.p{partition}")
        self.sinks[partition], self._tasks[partition] = sink, task
        task.add_done_callback(lambda t: self._ended(partition, sink, t))

    async def stop_partition(self, partition: int) -> None:
        sink, task = self.sinks.get(partition), self._tasks.get(partition)
        if sink is None or task is None:
            return
        # counted as held until it stopped (its last commits count; /stats never dips)
        self._stopping.add(partition)
        sink.stop()
        with contextlib.suppress(SluiceError, asyncio.CancelledError):
            await task
        self._stopping.discard(partition)
        del self.sinks[partition], self._tasks[partition]
        self._keep_counts(sink)
        log.info("group %s: partition %d stopped here", self.group, partition)

    def _ended(self, partition: int, sink: Sink, task: asyncio.Task[int]) -> None:
        if partition in self._stopping or self.sinks.get(partition) is not sink:
            return  # stopped on purpose (``stop_partition``)
        del self.sinks[partition], self._tasks[partition]
        self._keep_counts(sink)
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, Fenced):
            self.membership.lost(partition)
            return
        if exc is None:
            exc = SinkFailed(f"partition {partition}'s sink stopped on its own")
        if not isinstance(exc, SluiceError):
            exc = SinkFailed(f"partition {partition}: {type(exc).__name__}: {exc}")
        self._fatal = exc  # as one sink would: the member stops and says why
        self.stop()

    def _keep_counts(self, sink: Sink) -> None:
        stats = sink.stats()
        for name in SUMMED:
            self._past[name] += stats[name]

    async def flush(self) -> None:
        """Each partition's (a failure there stops that partition's sink, not this loop)."""
        for sink in list(self.sinks.values()):
            await sink.flush()

    # -- observing -------------------------------------------------------------------------------
    @property
    def relay_max_scn(self) -> int | None:
        return self._relay_max_scn

    @relay_max_scn.setter
    def relay_max_scn(self, scn: int | None) -> None:
        self._relay_max_scn = scn
        for sink in self.sinks.values():
            sink.relay_max_scn = scn

    @property
    def events(self) -> int:
        return self._past["events"] + sum(sink.events for sink in self.sinks.values())

    def stats(self) -> dict[str, Any]:
        parts = {p: sink.stats() for p, sink in sorted(self.sinks.items())}
        down = [s["target_down_s"] for s in parts.values() if s["target_down_s"] is not None]
        checkpoints = [s["checkpoint_scn"] for s in parts.values()]
        lags = [s["lag_scn"] for s in parts.values() if s["lag_scn"] is not None]
        lag_s = [s["lag_s"] for s in parts.values() if s["lag_s"] is not None]
        errors = [s["target_error"] for s in parts.values() if s["target_error"]]
        group = self.membership.describe()
        group["held"] = {
            str(p): {
                "epoch": self.membership.owned.get(p),
                "state": s["state"],
                "checkpoint_scn": s["checkpoint_scn"],
                "lag_scn": s["lag_scn"],
                "lag_s": s["lag_s"],
                "events": s["events"],
                "target_up": s["target_up"],
            }
            for p, s in parts.items()
        }
        stats: dict[str, Any] = {
            "name": self.config.name,
            "state": self.state,
            "error": self.error,
            "target": self.describe_target,
            "target_kind": self.target_kind,
            "delivery": self.delivery,
            "target_up": not down,
            "target_error": errors[0] if errors else None,
            "target_down_s": max(down) if down else None,
            "relays": [redact(r) for r in self.config.relays],
            "bootstrap": self.config.bootstrap,
            "checkpoint": "per partition",
            # the oldest partition's: everything before it is in the target
            "checkpoint_scn": None if None in checkpoints or not checkpoints else min(checkpoints),
            "relay_max_scn": self._relay_max_scn,
            "lag_scn": max(lags) if lags else None,
            "lag_s": max(lag_s) if lag_s else None,
            "last_scn": max((s["last_scn"] or 0 for s in parts.values()), default=None),
            "target_stats": {},
            "group": group,
        }
        for name in SUMMED:
            stats[name] = self._past[name] + sum(s[name] for s in parts.values())
        for name in GAUGES:
            stats[name] = sum(s[name] for s in parts.values())
        return stats
