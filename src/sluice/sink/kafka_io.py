"""The Kafka target's blocking side (``kafka.py`` runs every call here on one thread): the
producer and its transactions, the topics it makes, the checkpoint topic it reads back."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # its documented home

from sluice.core.checkpoint import Checkpoint, encode_checkpoint
from sluice.errors import ConfigError
from sluice.sink.kafka_url import KafkaUrl, check_topic, refusal
from sluice.sink.target import Change, TargetUnavailable

log = logging.getLogger(__name__)

# librdkafka's own log lines (a broker that went away...) are the sink's to report: DEBUG here
_LIBRDKAFKA = logging.getLogger("sluice.sink.kafka.librdkafka")


_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)


class _Quiet:
    """librdkafka's log, at DEBUG: the sink says what an outage means, once, itself."""

    def log(self, level: int, message: str, *args: Any) -> None:
        _LIBRDKAFKA.debug(message, *args)


class KafkaIo:
    def __init__(
        self,
        url: KafkaUrl,
        *,
        transactional_id: str,
        name: str,
        timeout_s: float,
        tombstones: bool,
        json_keys: bool,
    ) -> None:
        self.url = url
        self.transactional_id = transactional_id
        self.name = name
        self.timeout_s = timeout_s
        self.tombstones = tombstones
        self.json_keys = json_keys  # --format json: the canonical key text is the key
        self._producer: Producer | None = None
        self._in_transaction = False
        self._topics: set[str] = set()  # known to exist
        self._admin: AdminClient | None = None
        self._failure: KafkaError | None = None  # the first failed delivery since the last check
        self._failed_topic = ""
        # Counted when the broker took them for good (a committed transaction, a flush): a
        # message produced into a transaction that is then aborted is counted as aborted
        self._uncommitted = [0, 0]  # messages, tombstones produced since the last commit
        self.messages = 0
        self.tombstones_sent = 0
        self.aborted_messages = 0
        self.topics_created = 0
        self.connects = 0

    def stats(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "tombstones": self.tombstones_sent,
            "aborted_messages": self.aborted_messages,
            "topics_created": self.topics_created,
            "connects": self.connects,
            "connected": self._producer is not None,
        }

    # -- settings ----------------------------------------------------------------------------
    def _common(self) -> dict[str, Any]:
        settings: dict[str, Any] = {"bootstrap.servers": self.url.servers, "logger": _Quiet()}
        settings.update(self.url.settings)
        return settings

    def _producer_settings(self) -> dict[str, Any]:
        settings = {
            **self._common(),
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",  # Java's default partitioner for keyed messages
            "linger.ms": 2,
            "error_cb": self._on_error,
        }
        if self.url.transactions:
            settings["transactional.id"] = self.transactional_id
        return settings

    # -- connecting --------------------------------------------------------------------------
    def connect(self) -> Producer:
        if self._producer is not None:
            return self._producer
        where = f"Kafka {self.url.display}"
        try:
            producer = Producer(self._producer_settings())
        except KafkaException as exc:
            raise ConfigError(f"{where}: {exc.args[0].str()}") from None
        try:
            if self.url.transactions:
                # fences an earlier producer of this id and aborts what it left open
                producer.init_transactions(self.timeout_s)
            else:
                producer.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            _drop(producer)
            raise refusal(exc, where) from None
        self._producer = producer
        self._in_transaction = False
        self.connects += 1
        return producer

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        if self._in_transaction:
            try:
                producer.abort_transaction(min(self.timeout_s, 5.0))
            except KafkaException as exc:
                log.debug("Kafka abort at stop: %s", exc)
        _drop(producer)

    def _on_error(self, error: KafkaError) -> None:
        # Global errors (all brokers down...): the calls that need the broker time out and say
        # so; a fatal one is kept for the next check
        if error.fatal():
            self._failure = self._failure or error
        log.debug("Kafka: %s", error.str())

    # -- producing ---------------------------------------------------------------------------
    def produce(self, changes: Sequence[Change]) -> None:
        producer = self.connect()
        new = sorted({c.route for c in changes} - self._topics)
        if new:
            self._ensure_topics(new)
        if self.url.transactions and not self._in_transaction:
            try:
                producer.begin_transaction()
            except KafkaException as exc:
                self.reset()
                raise refusal(exc, f"Kafka {self.url.display}") from None
            self._in_transaction = True
        for change in changes:
            key = change.key_body
            if key is None and self.json_keys and change.key is not None:
                key = change.key.encode()
            headers: list[tuple[str, str | bytes | None]] = list(change.headers().items())
            self._send(producer, change.route, key, change.body, headers)
            self._uncommitted[0] += 1
            if change.op == "d" and self.tombstones and key is not None:
                self._send(producer, change.route, key, None, headers)
                self._uncommitted[1] += 1
        producer.poll(0)
        self._check()

    def _send(
        self,
        producer: Producer,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, str | bytes | None]],
    ) -> None:
        while True:
            try:
                producer.produce(topic, value, key, headers=headers, on_delivery=self._delivered)
                return
            except BufferError:  # the local queue is full: serve deliveries, then again
                producer.poll(0.05)
                self._check()
            except KafkaException as exc:
                # a message refused before put the transaction in this state: its report,
                # served now, says why
                producer.poll(0.2)
                self._check()
                raise refusal(exc, f"Kafka topic {topic}") from None

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None and error.code() in _PURGED:
            return  # our own abort's: the failure that caused it was kept
        if error is not None and self._failure is None:
            self._failure, self._failed_topic = error, str(message.topic())

    def _check(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            topic = self._failed_topic or "?"
            raise refusal(KafkaException(failure), f"Kafka topic {topic}")

    def commit(self, checkpoint: Checkpoint | None) -> None:
        """The open transaction's messages, with ``checkpoint`` in the checkpoint topic,
        committed (or flushed and then the checkpoint, without transactions). Whatever fails
        drops the producer: whether a commit that timed out landed is for the next one's
        ``init_transactions`` to settle at the broker, and for the checkpoint read back."""
        try:
            self._commit(checkpoint)
        except BaseException:
            self.reset()
            raise

    def _commit(self, checkpoint: Checkpoint | None) -> None:
        producer = self.connect()
        where = f"Kafka {self.url.display}"
        if checkpoint is not None and self.url.checkpoint_topic not in self._topics:
            self._ensure_topic(self.url.checkpoint_topic, compacted=True)
        try:
            if self.url.transactions and not self._in_transaction:
                producer.begin_transaction()
                self._in_transaction = True
            if not self.url.transactions:
                self._flush(producer)
            if checkpoint is not None:
                value = encode_checkpoint(checkpoint).encode()
                self._send(producer, self.url.checkpoint_topic, self.name.encode(), value, [])
            if self.url.transactions:
                producer.commit_transaction(self.timeout_s)
                self._in_transaction = False
            else:
                self._flush(producer)
        except KafkaException as exc:
            self._check()  # a message the broker refused says why better than the commit
            raise refusal(exc, where) from None
        self._check()
        messages, tombstones = self._uncommitted
        self.messages += messages
        self.tombstones_sent += tombstones
        self._uncommitted = [0, 0]

    def _lost(self) -> None:
        """What was produced since the last commit will never count (aborted, purged)."""
        self.aborted_messages += sum(self._uncommitted)
        self._uncommitted = [0, 0]

    def reset(self) -> None:
        """Drop the producer (the next call makes a new one, which fences this one)."""
        producer, self._producer = self._producer, None
        self._in_transaction = False
        self._failure = None
        self._lost()
        if producer is not None:
            _drop(producer)

    def _flush(self, producer: Producer) -> None:
        left = producer.flush(self.timeout_s)
        self._check()
        if left:
            raise TargetUnavailable(
                f"Kafka {self.url.display}: {left} messages not acknowledged in {self.timeout_s} s"
            )

    def abort(self) -> bool:
        """Abort the open transaction (True if there was one); a producer that cannot is
        dropped: the next one's ``init_transactions`` aborts it at the broker."""
        self._failure = None
        self._lost()
        producer = self._producer
        if producer is None:
            return False
        if not self.url.transactions:
            producer.purge()
            return False
        if not self._in_transaction:
            return False
        self._in_transaction = False
        try:
            producer.abort_transaction(self.timeout_s)
        except KafkaException as exc:
            log.debug("Kafka abort: %s; the producer is dropped", exc)
            self.reset()
        return True

    # -- topics ------------------------------------------------------------------------------
    def _ensure_topic(self, topic: str, compacted: bool = False) -> None:
        self._ensure_topics([topic], compacted)

    def _ensure_topics(self, topics: list[str], compacted: bool = False) -> None:
        """Make the topics that are missing (in one request), use the others as they are."""
        for topic in topics:
            check_topic(topic)
        producer = self.connect()
        try:
            known = producer.list_topics(timeout=self.timeout_s).topics
        except KafkaException as exc:
            raise refusal(exc, f"Kafka {self.url.display}") from None
        missing = [t for t in topics if t not in known or known[t].error is not None]
        self._topics.update(t for t in topics if t not in missing)
        if not missing:
            return
        config = {"cleanup.policy": "compact"} if compacted else {}
        partitions = 1 if compacted else self.url.partitions
        if self._admin is None:
            self._admin = AdminClient(self._common())
        new = [NewTopic(t, partitions, self.url.replication_factor, config=config) for t in missing]
        futures = self._admin.create_topics(new, request_timeout=self.timeout_s)
        for topic, future in futures.items():
            try:
                future.result(self.timeout_s)
                self.topics_created += 1
                log.info("Kafka: created topic %s (%d partitions%s)", topic, partitions,
                         ", compacted" if compacted else "")  # fmt: skip
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                exists = isinstance(error, KafkaError) and (
                    error.code() == KafkaError.TOPIC_ALREADY_EXISTS
                )
                if not exists:  # made meanwhile by someone else: used as it is
                    raise refusal(exc, f"Kafka: creating topic {topic}") from None
            self._topics.add(topic)

    # -- the checkpoint ----------------------------------------------------------------------
    def read_checkpoint(self) -> str | None:
        """The last committed checkpoint of this sink in the checkpoint topic (None: none)."""
        self.connect()  # first: its init_transactions aborts what a dead sink left open
        topic = self.url.checkpoint_topic
        self._ensure_topic(topic, compacted=True)
        consumer = Consumer({
            **self._common(),
            "group.id": f"sluice-sink.{self.name}.checkpoint",  # never committed: assign only
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,  # at the topic's end the broker would hold a fetch 0.5 s
        })  # fmt: skip
        where = f"Kafka {self.url.display}, topic {topic}"
        try:
            metadata = consumer.list_topics(topic, timeout=self.timeout_s).topics[topic]
            partitions = sorted(metadata.partitions)
            consumer.assign([TopicPartition(topic, p, -2) for p in partitions])  # beginning
            return self._last_of_mine(consumer, len(partitions), where)
        except KafkaException as exc:
            raise refusal(exc, where) from None
        finally:
            consumer.close()

    def _last_of_mine(self, consumer: Consumer, partitions: int, where: str) -> str | None:
        found: str | None = None
        ended: set[int] = set()
        deadline = time.monotonic() + self.timeout_s
        mine = self.name.encode()
        while len(ended) < partitions:
            if time.monotonic() > deadline:
                raise TargetUnavailable(f"{where}: the checkpoint topic was not read in time")
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition() or 0)
                    continue
                raise refusal(KafkaException(error), where)
            if message.key() == mine:
                value = message.value()
                found = None if value is None else value.decode()
        return found


def _drop(producer: Producer) -> None:
    """Let a producer go without waiting for what it still queues (purged; destroyed when
    the last reference goes)."""
    try:
        producer.purge()
    except (KafkaException, RuntimeError) as exc:
        log.debug("Kafka purge: %s", exc)
