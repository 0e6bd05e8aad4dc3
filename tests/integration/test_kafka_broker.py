"""The private Kafka broker the Kafka sink will be tested against: a real KRaft node that does
transactions (committed messages read once, aborted ones never by ``read_committed``), keeps
its log across kill() + restart(), and says how to get its jars when they are missing."""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # its documented home

from sluice.testing.brokers import BrokerNotAvailable
from sluice.testing.kafka import KAFKA_VERSION, PrivateKafka

pytestmark = pytest.mark.timeout(240)

_ROOT = Path(__file__).resolve().parents[2]


def _name() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def _topic(kafka: PrivateKafka, partitions: int = 3) -> str:
    name = _name()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=60)
    return name


def _producer(kafka: PrivateKafka, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "transactional.id": transactional_id,
            "enable.idempotence": True,
        }
    )
    producer.init_transactions(60)  # the first one creates __transaction_state
    return producer


def _transaction(producer: Producer, topic: str, values: Iterable[str], *, commit: bool) -> None:
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failed.append(error)

    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value.encode(), key=value.encode(), on_delivery=delivered)
    if commit:
        producer.commit_transaction(60)  # flushes first
        assert failed == []
    else:
        producer.flush(60)  # written to the log, then aborted
        producer.abort_transaction(60)


def _consume(
    kafka: PrivateKafka, topic: str, *, expect: int, isolation: str = "read_committed"
) -> list[str]:
    """Every value in ``topic`` from the start, for a fresh group: ``expect`` of them, then
    one more second to catch anything beyond."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": _name(),
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    values: list[str] = []
    deadline, settle = time.monotonic() + 90, None
    try:
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append(bytes(message.value() or b"").decode())
            if len(values) >= expect and settle is None:
                settle = time.monotonic() + 1.0
    finally:
        consumer.close()
    return values


def test_committed_transaction_is_read_once_across_partitions(kafka_server: PrivateKafka) -> None:
    topic = _topic(kafka_server)
    producer = _producer(kafka_server, _name())
    sent = [f"m{i}" for i in range(600)]
    _transaction(producer, topic, sent[:300], commit=True)
    _transaction(producer, topic, sent[300:], commit=True)

    got = _consume(kafka_server, topic, expect=len(sent))
    assert sorted(got) == sorted(sent)  # each once: no loss, no duplicate
    assert max(Counter(got).values()) == 1
    metadata = AdminClient({"bootstrap.servers": kafka_server.bootstrap}).list_topics(topic, 10)
    assert len(metadata.topics[topic].partitions) == 3


def test_aborted_transaction_is_not_read_committed(kafka_server: PrivateKafka) -> None:
    topic = _topic(kafka_server)
    producer = _producer(kafka_server, _name())
    _transaction(producer, topic, ["before-1", "before-2"], commit=True)
    _transaction(producer, topic, [f"aborted-{i}" for i in range(50)], commit=False)
    _transaction(producer, topic, ["after-1"], commit=True)

    committed = _consume(kafka_server, topic, expect=3)
    assert sorted(committed) == ["after-1", "before-1", "before-2"]
    # They were in the log all the same: read_uncommitted sees them.
    everything = _consume(kafka_server, topic, expect=53, isolation="read_uncommitted")
    assert len(everything) == 53


def test_restart_keeps_the_data(kafka_server: PrivateKafka) -> None:
    topic = _topic(kafka_server)
    transactional_id = _name()
    _transaction(_producer(kafka_server, transactional_id), topic, ["a", "b", "c"], commit=True)
    port, cluster = kafka_server.port, kafka_server.cluster_id
    # Visible first: commit_transaction returns once the coordinator logged the commit, and its
    # markers reach the partition just after; a kill in between leaves them to the restarted
    # coordinator, which under load did not always write them (Kafka's, not the test's, to fix)
    assert sorted(_consume(kafka_server, topic, expect=3)) == ["a", "b", "c"]

    kafka_server.kill()  # SIGKILL: no clean shutdown, the log is recovered at start
    started = time.monotonic()
    kafka_server.restart()
    print(f"Kafka restarted after SIGKILL in {time.monotonic() - started:.1f} s")
    assert (kafka_server.port, kafka_server.cluster_id) == (port, cluster)
    assert sorted(_consume(kafka_server, topic, expect=3)) == ["a", "b", "c"]

    kafka_server.restart()  # graceful this time; the same transactional id goes on
    _transaction(_producer(kafka_server, transactional_id), topic, ["d"], commit=True)
    assert sorted(_consume(kafka_server, topic, expect=4)) == ["a", "b", "c", "d"]


def test_paused_broker_answers_nothing_until_resumed(kafka_server: PrivateKafka) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_server.bootstrap, "log_level": 0})
    kafka_server.pause()  # SIGSTOP: connections stay open, no answer
    try:
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=2)
    finally:
        kafka_server.resume()
    assert admin.list_topics(timeout=30).cluster_id == kafka_server.cluster_id


def test_missing_jars_name_make_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_KEEP_BROKERS", raising=False)
    kafka = PrivateKafka(libs=tmp_path / "libs")
    try:
        with pytest.raises(BrokerNotAvailable, match="make setup"):
            kafka.start()
    finally:
        kafka.stop()
    assert not kafka.base_dir.exists()


def test_the_pom_and_the_makefile_pin_the_version_the_fixture_looks_for() -> None:
    pom = (_ROOT / "java" / "kafka" / "pom.xml").read_text()
    makefile = (_ROOT / "Makefile").read_text()
    assert re.findall(r"<kafka.version>(.+)</kafka.version>", pom) == [KAFKA_VERSION]
    assert re.findall(r"^KAFKA_VERSION = (\S+)$", makefile, re.M) == [KAFKA_VERSION]
