"""``KafkaTarget``: Apache Kafka (``kafka://``), exactly once with transactions.

Messages are Debezium's by default (``--format debezium``): topic ``{prefix}.{db}.{table}``
(``topic.prefix``, default ``sluice``; ``?topic=`` or ``--route`` change the template), key
Debezium's key struct of the row's primary key (null for a table without one), value the
envelope, a tombstone (same key, null value) after each delete unless
``tombstones.on.delete=false``, headers ``sluice-scn``, ``sluice-index``, ``sluice-source``,
``sluice-op``, ``sluice-schema-version``. ``--format json`` keys by the canonical key text.

Partitions: librdkafka's ``murmur2_random`` partitioner is Kafka's Java default for keyed
messages (murmur2 of the key bytes, positive, modulo the partitions), so a key's messages
share a partition (its order holds) and a Java client's ``partitionsFor`` agrees. Topics
missing are made (``?partitions=``, ``?replication_factor=``); an existing one is used as
it is.

Exactly once (``?transactions=true``, the default): one transactional producer
(``transactional.id`` = ``sluice-sink.NAME``); windows are produced inside a Kafka
transaction, and a commit adds the sink's checkpoint (key = the sink's name) to a compacted
topic of its own (``sluice-checkpoints``, as KIP-618 keeps source offsets) and commits
the whole. A ``read_committed`` consumer thus sees each window once or not at all, and the
sink restarts from the checkpoint of the last committed transaction: after a SIGKILL, the
new producer's ``init_transactions`` fences the old one and aborts what it left open.
A commit that fails loses the held windows (``HeldWindowsLost``: read again from the
committed checkpoint, which is read back from the topic, so a commit that did land before
its answer was lost counts). ``?transactions=false``: idempotent, acks=all, at least once:
the checkpoint follows each flushed group, and a replay after a crash repeats the messages
after it.

Every producer call runs on one thread of the target's: librdkafka's calls block.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sluice.core.checkpoint import Checkpoint, decode_checkpoint
from sluice.errors import ConfigError, SluiceError
from sluice.schemas.debezium import DebeziumOptions
from sluice.sink.config import SinkConfig
from sluice.sink.kafka_avro import AvroRecords
from sluice.sink.kafka_io import KafkaIo
from sluice.sink.kafka_url import check_topic, parse_kafka_url
from sluice.sink.shape import ROUTE_FIELDS
from sluice.sink.target import Batch, Delivery, HeldWindowsLost, TargetUnavailable
from sluice.sink.targets import route_template

log = logging.getLogger(__name__)
T = TypeVar("T")


class KafkaTarget:
    kind = "kafka"
    keeps_checkpoint = True
    wants_bodies = True
    wants_message_keys = True  # Debezium's key struct apart from the value

    def __init__(self, config: SinkConfig) -> None:
        self.url = parse_kafka_url(config.target_url)
        self.connect_records = config.format == "avro"  # Debezium's records, to encode here
        self._avro: AvroRecords | None = None
        if self.connect_records:
            if not config.schema_registry:
                raise ConfigError(
                    "--format avro to Kafka needs --schema-registry URL: a Confluent-compatible "
                    "registry for its schemas (`sluice registry`, or Confluent's)"
                )
            self._avro = AvroRecords(config.schema_registry, config.timeout_s)
        template = route_template(config)
        # the template's own characters: each placeholder rendered as a plain name
        check_topic(template.format(**dict.fromkeys(ROUTE_FIELDS, "x")), "topic template")
        options = DebeziumOptions.parse(dict(config.debezium_options))
        self.delivery: Delivery = "exactly-once" if self.url.transactions else "at-least-once"
        self.name = config.name
        self.commit_rows = config.commit_rows
        self.committed: Checkpoint | None = None
        self._io = KafkaIo(
            self.url,
            transactional_id=self.url.transactional_id or f"sluice-sink.{config.name}",
            name=config.name,
            timeout_s=config.timeout_s,
            tombstones=options.tombstones,
            json_keys=config.format == "json",
        )
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sink-kafka")
        self._held = 0  # whole windows in the open transaction (or unflushed)
        self._held_rows = 0
        self._held_checkpoint: Checkpoint | None = None
        self._mid = False  # a big window's pieces so far are in the transaction
        # Windows were lost with a failed transaction: nothing may be taken or saved until
        # the sink rolls back (it has rewound then): a window waiting for its turn, or
        # retried, was read before the loss, and the pending checkpoint may name lost ones
        self._poisoned = False
        self._generation = 0  # one more at each rollback: windows read before it are stale
        self.commits = 0
        self.aborts = 0
        # deliver, commit (the sink's timer calls it meanwhile) and the rest take turns: a
        # commit queued behind a window's produce would commit that window's messages under
        # the checkpoint before it, and a replay from there would repeat them
        self._turn = asyncio.Lock()

    def describe(self) -> str:
        return self.url.display

    def stats(self) -> dict[str, Any]:
        return {
            "transactions": self.url.transactions,
            "checkpoint_topic": self.url.checkpoint_topic,
            "held_windows": self._held,
            "commits": self.commits,
            "aborts": self.aborts,
            "schemas_registered": 0 if self._avro is None else self._avro.registered,
            **self._io.stats(),
        }

    @property
    def held(self) -> int:
        return self._held

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._avro is not None:
            await self._avro.start()
        await self._run(self._io.connect)

    async def stop(self) -> None:
        # What the open transaction holds is aborted: read again next time from the checkpoint.
        try:
            await self._run(self._io.close)
        except SluiceError as exc:
            log.debug("Kafka close: %s", exc)
        self._thread.shutdown(wait=True)
        if self._avro is not None:
            await self._avro.stop()

    async def load_checkpoint(self) -> Checkpoint | None:
        text = await self._run(self._io.read_checkpoint)
        if text is None:
            return None
        where = (
            f"the checkpoint of sink {self.name!r} in topic {self.url.checkpoint_topic} "
            f"({self.describe()})"
        )
        self.committed = decode_checkpoint(text, where=where)
        return self.committed

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        async with self._turn:
            if self._held or self._mid or self._poisoned:
                return  # the next commit writes a newer one anyway
            await self._run(lambda: self._io.commit(checkpoint))
            self.committed = checkpoint

    # -- delivering --------------------------------------------------------------------------
    async def deliver(self, batch: Batch) -> None:
        generation = self._generation
        async with self._turn:
            if self._poisoned or generation != self._generation:
                # committed after the lost ones, it would be read again after the rewind
                raise HeldWindowsLost("windows before this one were lost; reading them again")
            await self._deliver(batch)

    async def _deliver(self, batch: Batch) -> None:
        changes = batch.changes
        try:
            if self._avro is not None:
                changes = await self._avro.encode(changes)
            await self._run(lambda: self._io.produce(changes))
        except SluiceError as exc:
            self._poisoned = True
            held = self._held
            await self._abort()
            self._forget()
            if held and isinstance(exc, TargetUnavailable):  # they went with the transaction
                raise HeldWindowsLost(str(exc)) from None
            raise  # down (the sink retries the window) or refused (the sink stops)
        self._mid = not batch.last
        if batch.last:
            self._held += 1
            self._held_checkpoint = batch.checkpoint or self._held_checkpoint
        self._held_rows += batch.events
        if batch.last and self._held_rows >= self.commit_rows:
            await self._commit()

    async def commit(self) -> None:
        async with self._turn:
            await self._commit()

    async def _commit(self) -> None:
        """Commit the held windows and their checkpoint in one transaction (never in the
        middle of a big window: its first pieces would be committed without the rest)."""
        if not self._held or self._mid:
            return
        checkpoint = self._held_checkpoint
        try:
            await self._run(lambda: self._io.commit(checkpoint))  # drops the producer if not
        except SluiceError as exc:
            self._poisoned = True
            self._forget()
            if isinstance(exc, TargetUnavailable):
                self.aborts += 1
                raise HeldWindowsLost(str(exc)) from None
            raise
        self.commits += 1
        self._forget()
        if checkpoint is not None:
            self.committed = checkpoint

    async def rollback(self) -> None:
        """After a failure: what the open transaction held is gone; the sink reads again
        from the committed checkpoint."""
        async with self._turn:
            await self._abort()
            self._forget()
            self._poisoned = False
            self._generation += 1

    async def _abort(self) -> None:
        try:
            aborted = await self._run(self._io.abort)
        except SluiceError as exc:  # the producer is dropped: a new one fences what it left
            log.debug("Kafka abort: %s", exc)
            aborted = True
        self.aborts += aborted

    def _forget(self) -> None:
        self._held = self._held_rows = 0
        self._held_checkpoint = None
        self._mid = False

    async def _run(self, work: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, work)


def open_target(config: SinkConfig) -> KafkaTarget:
    return KafkaTarget(config)
