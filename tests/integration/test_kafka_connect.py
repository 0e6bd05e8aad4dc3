"""The private Kafka Connect worker with Debezium's JDBC sink: Debezium change events (JSON
with schemas) produced to a topic end up as rows in PostgreSQL (inserts, an update, a
delete and its tombstone), and a connector that cannot work says why."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # its documented home

from sluice.testing.kafka import KAFKA_VERSION, PrivateKafka
from sluice.testing.kafka_connect import (
    JDBC_SINK_CLASS,
    ConnectJarsMissing,
    ConnectorFailed,
    PrivateKafkaConnect,
)
from sluice.testing.mariadb import free_port
from sluice.testing.postgres import PrivatePostgres

pytestmark = pytest.mark.timeout(240)

_ROOT = Path(__file__).resolve().parents[2]

# The shapes a Debezium source connector writes with JsonConverter (schemas.enable=true).
_ROW_FIELDS = [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "customer", "type": "string", "optional": True},
    {"field": "amount", "type": "int64", "optional": True},
]
_SOURCE_FIELDS = [
    {"field": "version", "type": "string", "optional": False},
    {"field": "connector", "type": "string", "optional": False},
    {"field": "name", "type": "string", "optional": False},
    {"field": "ts_ms", "type": "int64", "optional": False},
    {"field": "db", "type": "string", "optional": False},
    {"field": "schema", "type": "string", "optional": True},
    {"field": "table", "type": "string", "optional": True},
]


def _key(topic: str, row_id: int) -> dict[str, Any]:
    schema = {
        "type": "struct",
        "name": f"{topic}.Key",
        "optional": False,
        "fields": _ROW_FIELDS[:1],
    }
    return {"schema": schema, "payload": {"id": row_id}}


def _envelope(
    topic: str, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> dict[str, Any]:
    row = {"type": "struct", "name": f"{topic}.Value", "optional": True, "fields": _ROW_FIELDS}
    schema = {
        "type": "struct",
        "name": f"{topic}.Envelope",  # the sink tells a change event by this suffix
        "optional": False,
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {
                "type": "struct",
                "name": "io.debezium.connector.postgresql.Source",
                "optional": False,
                "field": "source",
                "fields": _SOURCE_FIELDS,
            },
            {"field": "op", "type": "string", "optional": False},
            {"field": "ts_ms", "type": "int64", "optional": True},
        ],
    }
    now = int(time.time() * 1000)
    source = {
        "version": "sluice-test",
        "connector": "postgresql",
        "name": "sluice",
        "ts_ms": now,
        "db": "shop",
        "schema": "public",
        "table": "orders",
    }
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": now}
    return {"schema": schema, "payload": payload}


def _produce(kafka: PrivateKafka, topic: str, events: list[tuple[Any, Any]]) -> None:
    """(key, value) JSON documents in order to one partition; a None value is a tombstone,
    a None key no key (a truncate event has none)."""
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failed.append(error)

    producer = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    for key, value in events:
        producer.produce(
            topic,
            key=None if key is None else json.dumps(key).encode(),
            value=None if value is None else json.dumps(value).encode(),
            on_delivery=delivered,
        )
    assert producer.flush(60) == 0
    assert failed == []


def _new_topic(kafka: PrivateKafka, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=60)  # one: in order
    return name


def _sink_config(url: str, topic: str) -> dict[str, str]:
    return {
        "connector.class": JDBC_SINK_CLASS,
        "tasks.max": "1",
        "topics": topic,
        "connection.url": url,
        "connection.username": "postgres",
        "connection.password": "",
        "insert.mode": "upsert",
        "primary.key.mode": "record_key",
        "delete.enabled": "true",
        "truncate.enabled": "true",
        "schema.evolution": "basic",
        # the table: the topic's last segment (the default "${topic}" makes it
        # sluice_shop_orders_<suffix>: dots become underscores)
        "collection.name.format": "orders",
    }


def _wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout:.0f} s")
        time.sleep(0.2)


def _rows(postgres: PrivatePostgres, database: str, table: str) -> list[tuple[Any, ...]] | None:
    conn = postgres.connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (table,))
            if cur.fetchone()[0] is None:
                return None
            cur.execute(f"SELECT id, customer, amount FROM {table} ORDER BY id")
            return list(cur.fetchall())
    finally:
        conn.close()


def test_debezium_change_events_become_postgres_rows(
    kafka_server: PrivateKafka,
    kafka_connect: PrivateKafkaConnect,
    postgres: PrivatePostgres,
    pg_database: str,
) -> None:
    topic = _new_topic(kafka_server, f"sluice.shop.orders_{uuid.uuid4().hex[:8]}")
    one = {"id": 1, "customer": "ada", "amount": 100}
    two = {"id": 2, "customer": "bob", "amount": 250}
    three = {"id": 3, "customer": "cy", "amount": 7}
    two_later = {**two, "amount": 300}
    events: list[tuple[Any, Any]] = [
        (_key(topic, 1), _envelope(topic, "c", None, one)),
        (_key(topic, 2), _envelope(topic, "c", None, two)),
        (_key(topic, 3), _envelope(topic, "r", None, three)),  # a snapshot read
        (_key(topic, 2), _envelope(topic, "u", two, two_later)),
        (_key(topic, 1), _envelope(topic, "d", one, None)),
        (_key(topic, 1), None),  # the tombstone after the delete: deletes nothing more
    ]
    _produce(kafka_server, topic, events)

    name = f"jdbc-{uuid.uuid4().hex[:8]}"
    url = f"jdbc:postgresql://127.0.0.1:{postgres.port}/{pg_database}"
    kafka_connect.add_connector(name, _sink_config(url, topic))
    try:
        status = kafka_connect.wait_running(name, timeout=60)
        assert status["tasks"][0]["state"] == "RUNNING"
        expected = [(2, "bob", 300), (3, "cy", 7)]
        _wait_for(
            f"rows {expected} in orders",
            lambda: _rows(postgres, pg_database, "orders") == expected,
        )
        # More after the first batch: the connector goes on consuming in order.
        _produce(
            kafka_server,
            topic,
            [
                (_key(topic, 3), _envelope(topic, "d", three, None)),
                (_key(topic, 3), None),
                (_key(topic, 4), _envelope(topic, "c", None, {**one, "id": 4})),
            ],
        )
        later = [(2, "bob", 300), (4, "ada", 100)]
        _wait_for(f"rows {later}", lambda: _rows(postgres, pg_database, "orders") == later)
        assert kafka_connect.status(name)["connector"]["state"] == "RUNNING"
    finally:
        kafka_connect.delete_connector(name)
    assert name not in kafka_connect.connectors()


def test_a_truncate_event_empties_the_table_and_a_new_field_adds_a_column(
    kafka_server: PrivateKafka,
    kafka_connect: PrivateKafkaConnect,
    postgres: PrivatePostgres,
    pg_database: str,
) -> None:
    topic = _new_topic(kafka_server, f"sluice.shop.orders_{uuid.uuid4().hex[:8]}")
    noted = _envelope(topic, "c", None, {"id": 5, "customer": "eve", "amount": 1, "note": "hi"})
    noted["schema"]["fields"][1]["fields"] = [
        *_ROW_FIELDS,
        {"field": "note", "type": "string", "optional": True},
    ]
    one, two = (
        {"id": 1, "customer": "ada", "amount": 100},
        {"id": 2, "customer": "bob", "amount": 2},
    )
    _produce(
        kafka_server,
        topic,
        [
            (_key(topic, 1), _envelope(topic, "c", None, one)),
            (_key(topic, 2), _envelope(topic, "c", None, two)),
            (None, _envelope(topic, "t", None, None)),  # TRUNCATE: no key, no rows
            (_key(topic, 5), noted),  # one field more than the table has
        ],
    )
    name = f"jdbc-{uuid.uuid4().hex[:8]}"
    url = f"jdbc:postgresql://127.0.0.1:{postgres.port}/{pg_database}"
    # the table named from the event's source block instead of the topic
    config = {**_sink_config(url, topic), "collection.name.format": "${source.table}_copy"}
    kafka_connect.add_connector(name, config)
    try:
        kafka_connect.wait_running(name, timeout=60)

        def rows() -> list[tuple[Any, ...]] | None:
            conn = postgres.connect(pg_database)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT to_regclass('orders_copy')")
                    if cur.fetchone()[0] is None:
                        return None
                    cur.execute("SELECT * FROM orders_copy ORDER BY id")
                    return list(cur.fetchall())
            finally:
                conn.close()

        _wait_for(
            "only the row after the truncate, with its note",
            lambda: rows() == [(5, "eve", 1, "hi")],
        )
        assert kafka_connect.status(name)["tasks"][0]["state"] == "RUNNING"
    finally:
        kafka_connect.delete_connector(name)


def _fails(connect: PrivateKafkaConnect, config: dict[str, str]) -> ConnectorFailed:
    """Add a connector that cannot work, wait for its FAILED state, delete it."""
    name = f"jdbc-bad-{uuid.uuid4().hex[:8]}"
    connect.add_connector(name, config)  # the worker's own checks pass: the task fails
    try:
        with pytest.raises(ConnectorFailed) as failed:
            connect.wait_running(name, timeout=90)
    finally:
        connect.delete_connector(name)
    assert failed.value.state == "FAILED"
    assert failed.value.trace  # the worker's Java trace
    print(f"FAILED as expected: {failed.value}")
    return failed.value


def test_a_bad_option_fails_the_task_with_debeziums_reason(
    kafka_server: PrivateKafka, kafka_connect: PrivateKafkaConnect
) -> None:
    topic = _new_topic(kafka_server, f"sluice.shop.bad_{uuid.uuid4().hex[:8]}")
    failed = _fails(kafka_connect, {**_sink_config(_closed_url(), topic), "insert.mode": "maybe"})
    # The trace only says "check the logs"; the reason comes from the worker's log.
    assert "Error configuring an instance of JdbcSinkConnectorConfig" in str(failed)
    assert "The 'insert.mode' value 'maybe' is invalid" in str(failed)
    assert "upsert" in str(failed)  # and what it may be


def test_an_unreachable_database_fails_the_task_with_the_drivers_reason(
    kafka_server: PrivateKafka, kafka_connect: PrivateKafkaConnect
) -> None:
    topic = _new_topic(kafka_server, f"sluice.shop.nowhere_{uuid.uuid4().hex[:8]}")
    failed = _fails(kafka_connect, _sink_config(_closed_url(), topic))
    assert "Unable to determine Dialect without JDBC metadata" in str(failed)  # Hibernate's
    assert "refused" in str(failed)  # the driver's, from the log


def test_a_config_the_worker_rejects_says_why(
    kafka_server: PrivateKafka, kafka_connect: PrivateKafkaConnect
) -> None:
    topic = _new_topic(kafka_server, f"sluice.shop.rejected_{uuid.uuid4().hex[:8]}")
    config = {**_sink_config(_closed_url(), topic), "tasks.max": "zero"}
    with pytest.raises(ConnectorFailed, match=r"Invalid value zero for configuration tasks\.max"):
        kafka_connect.add_connector("jdbc-rejected", config)
    assert "jdbc-rejected" not in kafka_connect.connectors()


def _closed_url() -> str:
    """A PostgreSQL URL on a port nothing listens on."""
    return f"jdbc:postgresql://127.0.0.1:{free_port()}/shop?connectTimeout=2"


def test_missing_jars_name_make_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLUICE_KEEP_BROKERS", raising=False)
    worker = PrivateKafkaConnect("127.0.0.1:9", home=tmp_path / "connect")
    try:
        with pytest.raises(ConnectJarsMissing, match="make setup"):
            worker.start()
    finally:
        worker.stop()
    assert not worker.base_dir.exists()


def test_the_pom_and_the_makefile_pin_the_kafka_version_the_fixture_looks_for() -> None:
    pom = (_ROOT / "java" / "connect" / "pom.xml").read_text()
    assert re.findall(r"<kafka.version>(.+)</kafka.version>", pom) == [KAFKA_VERSION]
    makefile = (_ROOT / "Makefile").read_text()
    setup = makefile.partition("\nsetup:")[2].partition("\n\n")[0]
    assert "connect-jars" in setup
