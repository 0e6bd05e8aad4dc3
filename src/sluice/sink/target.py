"""The seam between the sink and its targets: what a target takes (``Batch`` of ``Change``s)
and what it promises (``Target``).

Invariants a target keeps, and the sink relies on:
- ``deliver`` gets batches in the order of the stream: windows in SCN order, a big window's
  pieces in order (``first``/``last``), each change's ``index`` its position in its window;
- ``deliver`` either delivers the whole batch or raises; delivering a batch again (after a
  raise, a restart or a SIGKILL) must not duplicate what the target already took, wherever
  the target can tell (``delivery`` says how far that goes: ``exactly-once`` or
  ``at-least-once``);
- a target that ``keeps_checkpoint`` commits ``batch.checkpoint`` (set on a window's last
  piece) together with the batch and answers ``load_checkpoint`` from it; the others have the
  sink keep the checkpoint in a file after each delivered window;
- ``TargetUnavailable`` means "try again later" (the sink backs off and retries, forever,
  visibly); any other ``SluiceError`` stops the sink with its message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from sluice.core.checkpoint import Checkpoint
from sluice.core.event import Op
from sluice.errors import SluiceError
from sluice.schemas.avro import TableSchema

if TYPE_CHECKING:
    from sluice.sink.columnar import Columnar

Delivery = Literal["exactly-once", "at-least-once"]


class TargetUnavailable(SluiceError):
    """The target cannot take a batch now (down, refusing connections, timing out): retried."""

    retriable = True


class HeldWindowsLost(TargetUnavailable):
    """The target lost windows it had taken but not yet committed (``held``): the sink
    follows again from the checkpoint the target committed."""


class Change(NamedTuple):
    """One event, shaped for a target (immutable; a named tuple rather than a frozen
    dataclass because one is made per event: 0.4 us against 1.8 us).

    ``schema`` is the event's table version with only the selected columns (None for a
    truncate), ``before``/``after`` its images as canonical values in that schema's column
    order, ``key`` the canonical key text (sorted, compact JSON; None: no key or a truncate).
    ``route`` is the rendered routing template (subject, stream, routing key, topic or table),
    ``body`` the event in the sink's format (empty for table targets), ``id`` a stable id
    derived from (origin, SCN, index): the same event always gets the same id.
    """

    scn: int
    index: int  # type: ignore[assignment]  # shadows tuple.index, which nothing here calls
    source: str
    op: Op
    ts_ms: int
    schema_version: int
    schema: TableSchema | None
    key: str | None
    before: list[Any] | None
    after: list[Any] | None
    route: str
    id: str
    body: bytes = b""
    key_body: bytes | None = None  # the message key, where the format has its own (Debezium's)
    # Kafka's Avro: Debezium's (key, value) as Kafka Connect's {"schema", "payload"}, for the
    # target to encode with the schemas it registered (``body`` is then empty)
    record: tuple[Any, Any] | None = None

    def headers(self) -> dict[str, str]:
        """Metadata for brokers that carry headers."""
        return {
            "sluice-scn": str(self.scn),
            "sluice-index": str(self.index),
            "sluice-source": self.source,
            "sluice-op": self.op,
            "sluice-schema-version": str(self.schema_version),
        }


@dataclass(frozen=True, slots=True)
class Batch:
    """A window, or a piece of a big one, after filtering (``changes`` may be empty: the
    checkpoint still moves)."""

    scn: int
    ts_ms: int
    changes: tuple[Change, ...]
    first: bool = True
    last: bool = True
    checkpoint: Checkpoint | None = None  # on the last piece: where the sink stands after it
    # Table targets that take them (``takes_columns``): the whole window as payload spans per
    # table instead of ``changes`` (which is then empty); ``columns.rows()`` shapes it anyway.
    columns: Columnar | None = None

    @property
    def events(self) -> int:
        return len(self.changes) if self.columns is None else self.columns.events


class Target(Protocol):
    """One destination. ``start`` connects (``TargetUnavailable`` when it cannot yet,
    ``ConfigError`` when it never will); ``stop`` is safe twice."""

    kind: str  # the URL scheme's family: postgresql, mariadb, sqlite, nats, redis, amqp, http
    delivery: Delivery
    keeps_checkpoint: bool
    wants_bodies: bool  # False: table targets, which take images, not formatted bodies

    @property
    def held(self) -> int: ...  # windows taken, not yet committed (``commit`` commits them)

    committed: Checkpoint | None  # targets that keep the checkpoint: the one committed

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def load_checkpoint(self) -> Checkpoint | None: ...
    async def save_checkpoint(self, checkpoint: Checkpoint) -> None: ...
    async def deliver(self, batch: Batch) -> None: ...
    async def commit(self) -> None: ...
    async def rollback(self) -> None: ...
    def describe(self) -> str: ...  # the target without secrets, for logs and /stats
    def stats(self) -> dict[str, Any]: ...


class CheckpointInAFile:
    """For targets that keep no checkpoint of their own (brokers, webhooks): the sink keeps
    it in a file; each batch is taken for good when ``deliver`` returns."""

    held = 0
    committed: Checkpoint | None = None

    async def load_checkpoint(self) -> Checkpoint | None:
        return None

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        return None

    async def commit(self) -> None:
        return None
