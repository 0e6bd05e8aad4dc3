"""The sink: a client of the relays (failover, bootstrap when behind) whose consumer shapes each
window and delivers it to one target, retrying a target that is down, forever and visibly.

Where the checkpoint lives: targets that commit it with the window (database replicas) keep it
(``TargetCheckpoints``); for the others a ``FileCheckpointStore`` in ``checkpoint_dir``, saved
after each delivered window, and the target's own dedupe (ids) makes replays harmless where it
can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp

from sluice.client import AsyncClient, ClientConfig, FileCheckpointStore, RetryPolicy
from sluice.client.checkpoints import CheckpointStore
from sluice.client.consumer import RecordWindow
from sluice.client.transport import RelayConnection
from sluice.core.checkpoint import Checkpoint
from sluice.core.names import check_relay_url
from sluice.errors import ConfigError, Fenced, RelayUnavailable, SluiceError
from sluice.sink.acks import Acks
from sluice.sink.config import SinkConfig, redact
from sluice.sink.holding import Holding
from sluice.sink.shape import Shaper, ShapeSettings, check_template, origin_of
from sluice.sink.target import HeldWindowsLost, Target, TargetUnavailable
from sluice.sink.targets import open_target, route_template, target_kind

log = logging.getLogger(__name__)


class SinkFailed(SluiceError):
    """The target refused a batch for good (not a passing outage): the sink stopped."""


class _Stopping(SluiceError):
    """Stop was asked while a batch waited for its target: the window is not acknowledged."""


class TargetCheckpoints:
    """The client's checkpoint store for targets that keep their checkpoint: loads what the
    target committed; a save outside a window (phase changes, heartbeats) is written by the
    sink's next ``flush`` (losing one only means reading filtered windows again)."""

    def __init__(self, loaded: Checkpoint | None) -> None:
        self.loaded = loaded
        self.pending: Checkpoint | None = None

    def load(self) -> Checkpoint | None:
        return self.loaded

    def save(self, checkpoint: Checkpoint) -> None:
        self.pending = checkpoint


class Sink:
    """``await sink.run()``: follow the relays and deliver until stopped."""

    def __init__(
        self,
        config: SinkConfig,
        *,
        checkpoints: CheckpointStore | None = None,
        fence: tuple[int, int] | None = None,
    ) -> None:
        """``checkpoints`` and ``fence``: a group's partition (``group.py``): where its
        checkpoint lives when the target keeps none, and the ``(epoch, partition)`` a
        target that keeps it fences its commits with."""
        kind = target_kind(config.target_url)  # a bad scheme fails before anything starts
        for url in (*config.relays, *([config.bootstrap] if config.bootstrap else [])):
            check_relay_url(url)  # a bad URL is one line and exit 2, never retried
        self.config = config
        self.route = check_template(route_template(config))
        self.target: Target = open_target(config)
        self._checkpoints, self._fence = checkpoints, fence
        if not self.target.keeps_checkpoint and config.checkpoint_dir is None and not checkpoints:
            raise ConfigError(
                f"a {self.target.kind} target needs --checkpoint-dir: the sink keeps its "
                "checkpoint there (database targets keep it in a table of their own)"
            )
        if getattr(self.target, "holds_windows", False):
            store = checkpoints
            if store is None:
                assert config.checkpoint_dir is not None
                store = FileCheckpointStore(config.checkpoint_dir, config.name)
            self.target = Holding(self.target, store, config.commit_rows)
        self.bodies = kind.bodies
        self._shape_settings({})  # bad filters, column patterns, formats: fail before starting
        self.client: AsyncClient | None = None
        self.shaper: Shaper | None = None
        self.store: CheckpointStore | None = None
        self.state = "starting"
        self.error: str | None = None
        self.target_error: str | None = None
        self.target_down_since: float | None = None
        self.retries = 0
        self.acks = Acks()  # what the target acknowledged, apart from what was read
        self.relay_max_scn: int | None = None
        self.rewinds = 0
        self._lost_in_a_row = 0  # losses since the last commit that worked (their backoff)
        self._waited = False
        # after a loss, the checkpoint the client holds is ours, not necessarily the target's:
        # no checkpoint is written outside a window until the target was asked
        self._suspect = False
        self._stop = asyncio.Event()
        self._fatal: SluiceError | None = None
        self._commit_timer: asyncio.TimerHandle | None = None
        self._commits: set[asyncio.Task[None]] = set()
        self.console_url: str | None = None  # told to relays (set by the sink's server)

    # -- running -------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()
        if self.client is not None:
            self.client.stop()
        interrupt = getattr(self.target, "interrupt", None)  # targets that wait inside
        if interrupt is not None:
            interrupt()

    async def run(self, *, until_caught_up: bool = False) -> int:
        """Deliver until stopped (or caught up); returns the checkpoint's SCN."""
        try:
            await self._until_up(self.target.start, answered=True)
            if self._stop.is_set():
                return 0
            source_info = await self._source_info()
            self.shaper = Shaper(self._shape_settings(source_info), source_info)
            log.info("sink %s: delivering to %s", self.config.name, self.target.describe())
            scn = await self._follow(until_caught_up)
            if self._fatal is not None:
                raise self._fatal
            return scn
        except SluiceError as exc:
            self.state, self.error = "failed", str(exc)
            raise
        except Exception as exc:  # a client library's surprise: one line, the trace in the log
            log.debug("sink %s failed", self.config.name, exc_info=True)
            self.state = "failed"
            self.error = f"target {self.target.describe()}: {type(exc).__name__}: {exc}"
            raise SinkFailed(self.error + " (run with -vv for the trace)") from exc
        finally:
            if self.state != "failed":
                self.state = "stopped"
            if self._commit_timer is not None:
                self._commit_timer.cancel()
            for task in list(self._commits):
                with contextlib.suppress(BaseException):
                    await task
            await self.target.stop()

    async def _follow(self, until_caught_up: bool) -> int:
        """The client, from the checkpoint the target (or the file) holds."""
        self.store = await self._checkpoint_store()
        self.client = AsyncClient(self._client_config(), _Consumer(self), self.store)
        if self._stop.is_set():
            return 0
        self.state = "running"
        scn = await self.client.run(until_caught_up=until_caught_up)
        await self.flush()
        return scn

    def _client_config(self) -> ClientConfig:
        c = self.config
        return ClientConfig(
            relays=tuple(c.relays),
            sources=tuple(c.sources),
            since_scn=c.since_scn,
            bootstrap=c.bootstrap,
            name=c.name,
            console=self.console_url,
            partition=c.partition,
            # a failing window is retried here (TargetUnavailable); the client's own retries
            # are for errors that may pass (a decode needing fresh schemas)
            retry=RetryPolicy(
                initial_s=c.retry_initial_s,
                max_s=c.retry_max_s,
                # the sink itself stops on a target's refusal; what reaches the client
                # is a big window read again while its target is away: never give up
                max_window_attempts=2**31,
                give_up_after_s=c.give_up_after_s,
            ),
        )

    def _shape_settings(self, source_info: dict[str, Any]) -> ShapeSettings:
        c = self.config
        # a target that encodes Debezium's records itself (Kafka's Avro) takes them as objects
        connect = bool(getattr(self.target, "connect_records", False))
        debezium = {**c.debezium_options, **({"schemas.enable": "true"} if connect else {})}
        return ShapeSettings(
            format="debezium" if connect else c.format,
            debezium=tuple(debezium.items()),
            include_columns=tuple(c.include_columns),
            exclude_columns=tuple(c.exclude_columns),
            filter=c.filter,
            filters=tuple(c.filters.items()),
            route=self.route,
            origin=c.origin or origin_of(source_info),
            bodies=self.bodies,
            keys=getattr(self.target, "wants_keys", True),
            message_keys=getattr(self.target, "wants_message_keys", False),
            connect_records=connect,
            filtered_as_deletes=not self.bodies,
            columnar=getattr(self.target, "takes_columns", False),
            partition=int(c.partition.split("/")[0]) if c.partition else 0,
        )

    async def _checkpoint_store(self) -> CheckpointStore:
        fence = getattr(self.target, "fence", None)  # a replica's checkpoint row: fence.py
        if self._fence is not None and fence is not None:
            await self._until_up(lambda: fence(*self._fence))
        if self.target.keeps_checkpoint:
            return TargetCheckpoints(await self._until_up(self.target.load_checkpoint))
        if self._checkpoints is not None:
            return self._checkpoints
        assert self.config.checkpoint_dir is not None
        return FileCheckpointStore(self.config.checkpoint_dir, self.config.name)

    async def _source_info(self) -> dict[str, Any]:
        """The relay's ``/sources`` block (Debezium's source fields, the message id origin),
        from the first relay that answers; retried with backoff, each failure said."""
        started, attempt = time.monotonic(), 0
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self._stop.is_set():
                for url in self.config.relays:
                    try:
                        body = await RelayConnection(url, session).get_json("/sources")
                        return dict(body.get("source") or {})
                    except (SluiceError, TimeoutError) as exc:
                        log.warning("relay %s: no /sources (%s); retrying", url, exc)
                attempt += 1
                limit = self.config.give_up_after_s
                if limit is not None and time.monotonic() - started >= limit:
                    raise RelayUnavailable(f"no relay answered: {', '.join(self.config.relays)}")
                await self._wait(self._delay(attempt))
        return {}

    # -- delivering ------------------------------------------------------------------------------
    async def deliver(self, window: RecordWindow) -> None:
        assert self.shaper is not None
        if self._rewinding():  # held windows were lost: nothing after them may be taken
            raise _Stopping("reading held windows again")
        if self._lost_in_a_row and window.first_seq == 0 and not self._waited:
            # read again after a loss: wait before trying the target again, then ask it where
            # it stands (a server that lost commits it had acknowledged lost their checkpoint
            # row with them: read again from what it holds)
            self._waited = True
            await self._wait(self._delay(self._lost_in_a_row))
            await self._recheck()
        try:
            batch = self.shaper.batch(window)
        except Exception as exc:
            self._fail(SinkFailed(f"cannot shape window {window.scn}: {exc}"))
        self.acks.read(batch.scn, batch.ts_ms, batch.events, first=batch.first)
        attempt = 0
        while True:
            try:
                await self.target.deliver(batch)
                break
            except HeldWindowsLost as exc:
                await self._lost(exc)
                raise _Stopping("reading held windows again") from exc
            except TargetUnavailable as exc:
                attempt += 1
                await self.target.rollback()
                await self._down(exc, attempt)
                if self._rewinding():  # held windows were lost meanwhile: this one is stale
                    raise _Stopping("reading held windows again") from exc
                if not batch.first:
                    # a piece of a big window: once the target answers again, the client
                    # reads the window again from its start (its transaction is gone)
                    await self._until_up(self.target.start)
                    raise
            except SluiceError as exc:
                await self.target.rollback()
                self._fail(exc)
            except Exception as exc:  # a bug, not an outage: stop and say so
                log.exception("target %s failed on window %d", self.target.describe(), batch.scn)
                await self.target.rollback()
                self._fail(SinkFailed(f"{type(exc).__name__}: {exc}"))
        self.acks.taken(batch.scn, batch.ts_ms, batch.events, batch.checkpoint, last=batch.last)
        if not self.target.held:  # acknowledged (else up once its commit worked)
            self._up()
        self._settle()
        if batch.last and isinstance(self.store, TargetCheckpoints):
            self.store.pending = None  # committed with the window
        if self.target.held and self._commit_timer is None:
            loop = asyncio.get_running_loop()
            self._commit_timer = loop.call_later(self.config.commit_interval_s, self._commit_soon)

    def _commit_soon(self) -> None:
        self._commit_timer = None
        task = asyncio.create_task(self._commit_held(), name="sink-commit")
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)

    async def _commit_held(self) -> None:
        """Commit windows the target holds once no more came for a while."""
        try:
            await self._commit()
        except HeldWindowsLost as exc:
            await self._lost(exc)
        except TargetUnavailable as exc:  # the next window meets it again, and says so
            log.warning("target %s: commit failed (%s)", self.target.describe(), exc)
        except SluiceError as exc:  # a refusal: stop, as a refused window does
            self._refused(exc)
            return
        if self.target.held and self._commit_timer is None:
            loop = asyncio.get_running_loop()
            self._commit_timer = loop.call_later(self.config.commit_interval_s, self._commit_soon)

    async def _lost(self, exc: SluiceError) -> None:
        """Windows the target held uncommitted went with its transaction: the client reads
        again from the checkpoint the target committed (after a backoff), and nothing it
        delivered after them is kept."""
        client = self.client
        if client is None or client.rewinding:
            return
        self.retries += 1
        self._lost_in_a_row += 1
        self.rewinds += 1
        self._settle()  # what the target committed before the loss still counts
        self.acks.lost()
        self.target_error = str(exc)
        if self.target_down_since is None:
            self.target_down_since = time.monotonic()
        checkpoint = self.target.committed or client.started_at
        assert checkpoint is not None
        log.warning(
            "target %s lost the windows it held uncommitted (%s): reading again from %s",
            self.target.describe(), exc, checkpoint,
        )  # fmt: skip
        client.rewind(checkpoint)
        self._waited = False
        self._suspect = True  # until the target says where it stands (``_recheck``)
        if isinstance(self.store, TargetCheckpoints):
            self.store.pending = None  # it may name windows that are gone
        await self.target.rollback()

    async def _recheck(self) -> None:
        if not self.target.keeps_checkpoint or self.client is None:
            return
        # not "back" yet: a checkpoint the target keeps in a file answers while it is down
        stored = await self._until_up(self.target.load_checkpoint)
        self._suspect = False
        rewound = self.client.checkpoint
        if stored is not None and stored != rewound:
            log.warning(
                "target %s holds checkpoint %s, not %s: it lost commits it had acknowledged; "
                "reading again from what it holds",
                self.target.describe(), stored, rewound,
            )  # fmt: skip
            self.client.rewind(stored)
            raise _Stopping("reading again from the target's checkpoint")

    def _rewinding(self) -> bool:
        return self.client is not None and self.client.rewinding

    async def flush(self) -> None:
        """Commit held windows, then write a checkpoint saved outside a window."""
        if self._rewinding() or self._fatal is not None:
            return  # what is pending may name windows the target lost (or refused)
        if self.target.held:  # a failed background commit too: its loss is handled here
            try:
                await self._commit()
            except HeldWindowsLost as exc:
                await self._lost(exc)
                return
            except TargetUnavailable as exc:
                self._unreachable(exc)
                return
            except SluiceError as exc:  # a refusal: stop, as a refused window does
                self._refused(exc)
                return
        store = self.store
        if (
            isinstance(store, TargetCheckpoints)
            and store.pending is not None
            and not self.target.held
            and not self._rewinding()
            and not self._suspect
        ):
            pending = store.pending
            try:
                await self.target.save_checkpoint(pending)
            except TargetUnavailable as exc:  # tried again next second; shown meanwhile
                self._unreachable(exc)
                return
            except SluiceError as exc:  # a refusal (a group's partition fenced off): stop
                self._refused(exc)
                return
            if store.pending == pending:
                store.pending = None

    def _unreachable(self, exc: SluiceError) -> None:
        """A write outside a window failed (retried by the next flush): shown, not waited."""
        if self.target_down_since is None:
            self.target_down_since = time.monotonic()
            log.warning("target %s unavailable (%s); trying again", self.target.describe(), exc)
        self.target_error = str(exc)
        self.retries += 1

    async def _down(self, exc: SluiceError, attempt: int) -> None:
        self.retries += 1
        if self.target_down_since is None:
            self.target_down_since = time.monotonic()
        self.target_error = str(exc)
        delay = self._delay(attempt)
        log.warning(
            "target %s unavailable (%s); retrying in %.1f s (attempt %d)",
            self.target.describe(), exc, delay, attempt,
        )  # fmt: skip
        await self._wait(delay)
        if self._stop.is_set():
            raise _Stopping("stopping")

    async def _commit(self) -> None:
        """Commit what the target holds; up only when it committed something (a commit that
        found the group in another's hands, or held on for more, proves nothing)."""
        before = self.target.committed
        await self.target.commit()
        if self.target.committed != before:
            self._lost_in_a_row = 0
            self._up()
        self._settle()

    def _settle(self) -> None:
        """Count what the target acknowledged: a target that keeps its checkpoint has what
        its committed checkpoint covers; the others have what they took."""
        if self.target.keeps_checkpoint:
            self.acks.settle(self.target.committed)
        else:
            self.acks.settle(None, all_done=True)

    def _up(self) -> None:
        """A delivery was acknowledged: the target is back (never on a mere connect, a
        checkpoint read or a retry that has not been answered)."""
        if self.target_down_since is not None:
            log.warning(
                "target %s is back after %.1f s",
                self.target.describe(), time.monotonic() - self.target_down_since,
            )  # fmt: skip
        self.target_down_since, self.target_error = None, None

    def _refused(self, exc: SluiceError) -> SluiceError:
        """The target refused a batch for good: say so and stop."""
        if isinstance(exc, Fenced):  # a group's partition moved on: its member stops it
            self._fatal, self.error = exc, str(exc)
            log.warning("sink %s: %s; stopping this partition", self.config.name, exc)
            self.stop()
            return exc
        self._fatal = SinkFailed(f"target {self.target.describe()} refused a batch: {exc}")
        self.error = str(self._fatal)
        log.error("%s; stopping", self._fatal)
        self.stop()
        return self._fatal

    def _fail(self, exc: SluiceError) -> None:
        raise self._refused(exc)

    async def _until_up(self, action: Any, *, answered: bool = False) -> Any:
        """``action`` retried while the target is down; ``answered``: its success is an answer
        of the target's own (the first connection), which shows it up."""
        attempt = 0
        while True:
            try:
                result = await action()
                if answered:
                    self._up()
                return result
            except TargetUnavailable as exc:
                attempt += 1
                await self._down(exc, attempt)

    def _delay(self, attempt: int) -> float:
        c = self.config
        return float(min(c.retry_max_s, c.retry_initial_s * 2 ** min(attempt - 1, 30)))

    async def _wait(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    # -- observing -------------------------------------------------------------------------------
    @property
    def events(self) -> int:
        """Events the target acknowledged."""
        return self.acks.events

    def stats(self) -> dict[str, Any]:
        self._settle()  # a group the target committed in the background counts now
        acks = self.acks
        checkpoint = self.client.checkpoint if self.client is not None else None
        delivered = checkpoint.scn if checkpoint is not None else None
        if self.target.keeps_checkpoint:  # what the target committed, not what it holds
            checkpoint = self.target.committed
        scn = checkpoint.scn if checkpoint is not None else None
        lag_scn = None
        if self.relay_max_scn is not None and scn is not None:
            lag_scn = max(0, self.relay_max_scn - scn)
        lag_s = acks.lag_s(lag_scn)  # from what the target committed, not what was read
        return {
            "name": self.config.name,
            "state": self.state,
            "error": self.error,
            "target": self.target.describe(),
            "target_kind": self.target.kind,
            "delivery": self.target.delivery,
            "target_up": self.target_down_since is None,
            "target_error": self.target_error,
            "target_down_s": None
            if self.target_down_since is None
            else round(time.monotonic() - self.target_down_since, 3),
            "relays": [redact(r) for r in self.config.relays],
            "bootstrap": self.config.bootstrap,
            "checkpoint": None if checkpoint is None else type(checkpoint).__name__.lower(),
            "checkpoint_scn": scn,
            "delivered_scn": delivered,
            "relay_max_scn": self.relay_max_scn,
            "lag_scn": lag_scn,
            "lag_s": lag_s,
            # acknowledged by the target; reads (re-reads after a rewind included) apart
            "events": acks.events,
            "windows": acks.windows,
            "events_per_s": round(acks.rate.per_second(), 1),
            "read_events": acks.read_events,
            "reread_events": acks.reread_events,
            "lost_events": acks.lost_events,
            "unacknowledged_events": acks.unacknowledged,
            "filtered_events": self.shaper.filtered if self.shaper is not None else 0,
            "skipped_events": self.shaper.skipped if self.shaper is not None else 0,
            "retries": self.retries,
            "rewinds": self.rewinds,
            "last_scn": acks.last_scn,
            "target_stats": self.target.stats(),
        }


class _Consumer:
    """The client's consumer: each record window to the sink."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    async def on_record_window(self, window: RecordWindow) -> None:
        await self.sink.deliver(window)

    async def on_rollback(self, scn: int, error: BaseException) -> None:
        await self.sink.target.rollback()
