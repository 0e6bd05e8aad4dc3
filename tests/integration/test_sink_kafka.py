"""``sluice sink --to kafka://`` on a real KRaft broker: Debezium's topics, keys, envelopes and
tombstones, exactly once for a ``read_committed`` consumer through SIGKILLs of the sink and a
restart of the broker, Kafka's own partitioner, topics made or used as they are, outages shown,
bad input in one line.

What Kafka holds is compared with what the relay itself renders as Debezium's JSON
(``sluice tail --format debezium --debezium-option keys=true``), message for message."""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # their documented home
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from sluice.registry import RegistryServer
from sluice.testing import PrivateMariaDB
from sluice.testing.kafka import PrivateKafka
from sluice.testing.kafka_connect import JDBC_SINK_CLASS, PrivateKafkaConnect
from sluice.testing.postgres import PrivatePostgres
from sluice.testing.relays import RelayThread
from sluice.testing.truth import pg_table_rows, table_rows
from tests.integration.kafka_support import Record, read_topics
from tests.integration.sink_support import SOURCE_TABLES, SinkProcess, relay_events, workload
from tests.integration.support import (
    create_database,
    get_json,
    http_status,
    relay_config,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)

pytestmark = pytest.mark.timeout(600)
TABLES = [t.split(" ", 1)[0] for t in SOURCE_TABLES]
_ids = itertools.count(1)


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_SINK_RETRY_INITIAL_S", "0.1")
    monkeypatch.setenv("SLUICE_SINK_RETRY_MAX_S", "2")


@dataclass
class Shop:
    name: str
    conn: pymysql.Connection[Any]
    relay: RelayThread
    tmp: Path

    @property
    def sources(self) -> list[str]:
        return [f"{self.name}.{t}" for t in TABLES]

    def topics(self, prefix: str = "sluice") -> list[str]:
        return [f"{prefix}.{self.name}.{t}" for t in TABLES]

    def sink(self, to: str, *args: str, name: str = "k") -> SinkProcess:
        return SinkProcess(
            ["--to", to, "--relay", self.relay.url, "--name", name, *args], self.tmp / "sink.log"
        )

    def expected(self, *options: str) -> dict[str, list[tuple[Any, Any]]]:
        """The relay's events as Debezium's (key, value) per topic, tombstones included (a
        table without a key gets none: a tombstone deletes a key)."""
        wait_relay_caught_up(self.relay.url, self.conn)
        args = [sys.executable, "-m", "sluice.cli.main", "tail", "--relay", self.relay.url,
                "--format", "debezium", "--debezium-option", "keys=true",
                "--until-caught-up"]  # fmt: skip
        for option in options:
            args += ["--debezium-option", option]
        for source in self.sources:
            args += ["--source", source]
        import subprocess

        out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=300)
        per_topic: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
        topic = ""
        for line in out.stdout.splitlines():
            body = json.loads(line)
            if body["value"] is not None:
                source = body["value"].get("payload", body["value"])["source"]
                topic = f"sluice.{source['db']}.{source['table']}"
            elif body["key"] is None:
                continue
            per_topic[topic].append((body["key"], body["value"]))
        return dict(per_topic)


@pytest.fixture
def shop(mariadb: PrivateMariaDB, tmp_path: Path) -> Iterator[Shop]:
    name = f"shop_k{next(_ids)}_{uuid.uuid4().hex[:6]}"
    conn = create_database(mariadb, name, *SOURCE_TABLES)
    sources = [f"{name}.{t}" for t in TABLES]
    try:
        with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
            yield Shop(name, conn, relay, tmp_path)
    finally:
        conn.close()


def assert_exactly_once(
    got: dict[str, list[Record]], expected: dict[str, list[tuple[Any, Any]]]
) -> None:
    assert set(got) == set(expected)
    for topic, records in got.items():
        # a primary-key change is two messages of one event (a delete, a create)
        ids = [(r.headers["sluice-scn"], r.headers["sluice-index"], r.value) for r in records]
        ids = [(scn, index, value and value["op"]) for scn, index, value in ids]
        twice = [i for i, n in Counter(ids).items() if n > 1]
        assert not twice, f"{topic}: messages twice: {twice[:10]}"
        pairs = [(r.key, r.value) for r in records]
        want = expected[topic]
        assert len(pairs) == len(want), f"{topic}: {len(pairs)} messages for {len(want)}"
        assert pairs == want, topic
        for r in records:
            if r.value is not None:
                assert r.headers["sluice-op"] == r.value["op"]
                assert (
                    r.headers["sluice-source"]
                    == f"{r.value['source']['db']}.{r.value['source']['table']}"
                )


# -- exactly once ----------------------------------------------------------------------------


def test_exactly_once_through_three_sigkills_and_a_broker_restart(
    shop: Shop, tmp_path: Path
) -> None:
    with PrivateKafka(tmp_path / "kafka", controller_apart=True) as kafka:
        sink = shop.sink(f"kafka://{kafka.bootstrap}")
        errors: list[BaseException] = []

        def work() -> None:
            try:
                workload(shop.conn, 240, pace_s=0.01)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=work, daemon=True)
        sink.start()
        thread.start()
        try:
            for round in range(4):
                wait_for(lambda: (s := sink.stats()) is not None and s["events"] > 0, 120,
                         "the sink to commit something")  # fmt: skip
                if round == 2:  # the broker, once: the sink's transaction goes with it
                    kafka.kill()
                    wait_for(lambda: (s := sink.stats()) is not None and not s["target_up"], 60,
                             "the sink to show Kafka down")  # fmt: skip
                    assert http_status(sink.url + "/healthz")[0] == 503
                    kafka.restart()
                    continue
                sink.kill()
                sink.start()
            thread.join(300)
            assert not errors, errors
            wait_relay_caught_up(shop.relay.url, shop.conn)
            stats = sink.wait_scn(int(get_json(shop.relay.url + "/stats")["max_scn"]))
            assert stats["delivery"] == "exactly-once" and stats["target_up"], stats
        finally:
            sink.stop()
        got = read_topics(kafka.bootstrap, shop.topics())
    expected = shop.expected()
    assert_exactly_once(got, expected)
    # the last sink's counters: only what committed transactions hold (never more than Kafka)
    held = sum(len(records) for records in got.values())
    counted = stats["target_stats"]["messages"] + stats["target_stats"]["tombstones"]
    assert 0 < counted <= held, (counted, held)
    ops = {r.value["op"] for records in got.values() for r in records if r.value}
    assert ops == {"c", "u", "d"}  # Debezium skips truncates by default
    assert any(r.value is None for records in got.values() for r in records)  # tombstones
    # primary-key changes as Debezium sends them: a delete and tombstone of the old key,
    # then a create of the new one, in one transaction
    orders = got[f"sluice.{shop.name}.orders"]
    moved = [(a, b) for a, b in itertools.pairwise(orders) if a.value is None and b.value
             and b.value["op"] == "c" and a.key != b.key
             and a.headers["sluice-scn"] == b.headers["sluice-scn"]]  # fmt: skip
    assert moved, "no primary-key change came as delete, tombstone, create"
    assert not [r for r in orders if r.value and r.value["op"] == "u"
                and r.value["before"]["id"] != r.value["after"]["id"]]  # fmt: skip
    log = (tmp_path / "sink.log").read_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]


def test_bad_urls_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for url, said in [
        ("kafka://", "is not HOST:PORT"),
        ("kafka://host:notaport", "is not HOST:PORT"),
        ("kafka://h:9092/topic", "has no path"),
        ("kafka://h:9092?colour=red", "unknown parameter 'colour'"),
        ("kafka://h:9092?partitions=0", "partitions must be a positive"),
        ("kafka://h:9092?transactions=maybe", "transactions must be true or false"),
        ("kafka://h:9092?kafka.acks=1", "kafka.acks is the sink's own"),
        ("kafka://h:9092?topic=bad%20name", "not a valid Kafka topic name"),
    ]:
        result = run_sluice("sink", "--to", url, "--relay", "http://127.0.0.1:1", "--port", "0")
        assert result.returncode == 2, (url, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and said in lines[0], (url, result.stderr)


# -- Avro through a schema registry ------------------------------------------------------------


def test_avro_with_a_registry_reads_as_debezium_json_through_confluents_deserializer(
    shop: Shop, kafka_server: PrivateKafka, tmp_path: Path
) -> None:
    """``--format avro``: Confluent's wire format, schemas in ``sluice registry`` under
    ``{topic}-key``/``-value``, decoded by confluent-kafka's own AvroDeserializer to the
    values Debezium's JSON (with schemas) carries."""
    import asyncio

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    workload(shop.conn, 60)
    prefix = f"avro{next(_ids)}"
    registry = RegistryServer(tmp_path / "registry", port=0)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(registry.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        to = f"kafka://{kafka_server.bootstrap}?topic={prefix}.{{db}}.{{table}}"
        result = run_sluice(
            "sink", "--to", to, "--relay", shop.relay.url, "--name", prefix, "--port", "0",
            "--format", "avro", "--schema-registry", registry.url, "--until-caught-up",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        topics = [f"{prefix}.{shop.name}.{t}" for t in TABLES]
        raw = read_raw(kafka_server.bootstrap, topics)
        with SchemaRegistryClient({"url": registry.url}) as client:
            subjects = set(client.get_subjects())
            assert {f"{t}-value" for t in topics} <= subjects
            assert f"{topics[0]}-key" in subjects
            decode = AvroDeserializer(client)
            got: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
            for topic, key, value in raw:
                assert key is None or key[0] == 0, "Confluent's magic byte"
                k = (
                    None
                    if key is None
                    else decode(key, SerializationContext(topic, MessageField.KEY))
                )
                v = (
                    None
                    if value is None
                    else decode(value, SerializationContext(topic, MessageField.VALUE))
                )
                got[topic].append((k, v))
    finally:
        asyncio.run_coroutine_threadsafe(registry.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
    expected = shop.expected("schemas.enable=true")
    for topic, pairs in expected.items():
        mine = got[topic.replace("sluice.", prefix + ".", 1)]
        assert len(mine) == len(pairs), topic
        for (key, value), (k, v) in zip(mine, pairs, strict=True):
            assert key == (None if k is None else k["payload"])
            if v is None:
                assert value is None
                continue
            want = v["payload"]
            assert value["op"] == want["op"] and value["ts_ms"] == want["ts_ms"]
            for side in ("before", "after"):
                mine_side = value[side] and {k: _as_json(v) for k, v in value[side].items()}
                assert mine_side == want[side], (topic, side)
            assert value["source"]["table"] == want["source"]["table"]


def _as_json(value: Any) -> Any:
    """An Avro-decoded value as Kafka Connect's JsonConverter writes it: bytes and decimals
    (unscaled, two's complement, as Java's BigInteger.toByteArray) in base64."""
    import base64
    from decimal import Decimal

    if isinstance(value, Decimal):
        sign, digits, _ = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        value = unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def read_raw(bootstrap: str, topics: list[str]) -> list[tuple[str, bytes | None, bytes | None]]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"t{uuid.uuid4().hex}",
        "isolation.level": "read_committed", "enable.partition.eof": True,
    })  # fmt: skip
    try:
        consumer.assign([TopicPartition(t, 0, -2) for t in topics])
        ended: set[str] = set()
        out = []
        deadline = time.monotonic() + 60
        while len(ended) < len(topics):
            assert time.monotonic() < deadline
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                ended.add(str(message.topic()))
                continue
            out.append((str(message.topic()), message.key(), message.value()))
        return out
    finally:
        consumer.close()


# -- Debezium's own JDBC sink connector reads Sluice's topics ------------------------------------


def test_debeziums_jdbc_sink_in_kafka_connect_makes_postgresql_equal_the_source(
    shop: Shop,
    kafka_server: PrivateKafka,
    kafka_connect: PrivateKafkaConnect,
    postgres: PrivatePostgres,
    pg_database: str,
) -> None:
    """Sluice's topics as Debezium's MySQL connector writes them (JsonConverter with schemas,
    truncates sent) consumed by Debezium's JDBC sink connector in a real Kafka Connect worker:
    PostgreSQL ends equal to the source through inserts, updates, deletes, primary-key
    changes, a truncate and an added column. (The keyless table is left out: the JDBC sink
    cannot delete without a key, whoever wrote the topic.)"""
    workload(shop.conn, 150)
    prefix = f"jdbc{next(_ids)}"
    to = f"kafka://{kafka_server.bootstrap}?topic={prefix}.{{db}}.{{table}}"
    result = run_sluice(
        "sink", "--to", to, "--relay", shop.relay.url, "--name", prefix, "--port", "0",
        "--debezium-option", "schemas.enable=true",
        "--debezium-option", "skipped.operations=none", "--until-caught-up",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    keyed = ("orders", "items")
    name = f"jdbc-{uuid.uuid4().hex[:8]}"
    kafka_connect.add_connector(name, {
        "connector.class": JDBC_SINK_CLASS, "tasks.max": "1",
        "topics": ",".join(f"{prefix}.{shop.name}.{t}" for t in keyed),
        "connection.url": f"jdbc:postgresql://127.0.0.1:{postgres.port}/{pg_database}",
        "connection.username": "postgres", "connection.password": "",
        "insert.mode": "upsert", "primary.key.mode": "record_key", "delete.enabled": "true",
        "truncate.enabled": "true", "schema.evolution": "basic",
        "collection.name.format": "${source.table}",
    })  # fmt: skip
    try:
        kafka_connect.wait_running(name, timeout=60)
        truth = {t: _source_rows(shop, t) for t in keyed}
        assert truth["orders"] and truth["items"]
        assert "priority" in next(iter(truth["orders"].values()))  # the added column

        def replica() -> dict[str, Any]:
            conn = postgres.connect(pg_database)
            try:
                return {t: pg_table_rows(conn, f"public.{t}") for t in keyed}
            except Exception:  # a table not made yet
                conn.rollback()
                return {}
            finally:
                conn.close()

        last: list[dict[str, Any]] = [{}]

        def equal() -> bool:
            last[0] = replica()
            return last[0] == truth

        try:
            wait_for(equal, 120, "PostgreSQL to equal the source through Debezium's JDBC sink")
        except AssertionError:
            for t in keyed:
                mine, want = last[0].get(t, {}), truth[t]
                diff = [(k, mine.get(k), want.get(k)) for k in set(mine) | set(want)
                        if mine.get(k) != want.get(k)]  # fmt: skip
                print(t, len(mine), len(want), diff[:5])
            print(kafka_connect.status(name))
            raise
    finally:
        kafka_connect.delete_connector(name)


def _source_rows(shop: Shop, table: str) -> dict[str, Any]:
    shop.conn.commit()
    rows = table_rows(shop.conn, f"{shop.name}.{table}")
    for row in rows.values():  # DATETIME(6) reaches PostgreSQL as Debezium's MicroTimestamp
        if isinstance(row.get("created"), str):
            row["created"] = row["created"].rstrip("Z")
    return rows


# -- partitions, topics, refusals ---------------------------------------------------------------


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (Java's default partitioner hashes the key bytes with it)."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[i * 4 : i * 4 + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail, rest = length & ~3, length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h = ((h ^ data[tail]) * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def test_murmur2_is_kafkas() -> None:
    # Kafka's UtilsTest.testMurmur2 vectors (signed Java ints)
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             b"abc": 479470107}  # fmt: skip
    for data, java in cases.items():
        assert murmur2(data) == java & 0xFFFFFFFF, data


def test_keys_partitions_headers_and_a_topic_that_exists(
    shop: Shop, kafka_server: PrivateKafka
) -> None:
    """Each key's messages in the partition Kafka's Java partitioner picks (murmur2 of the key
    bytes), topics made with ?partitions=, one that exists used as it is, the headers."""
    prefix = f"part{next(_ids)}"
    existing = f"{prefix}.{shop.name}.items"
    admin = AdminClient({"bootstrap.servers": kafka_server.bootstrap})
    admin.create_topics([NewTopic(existing, 2, 1)])[existing].result(timeout=60)
    workload(shop.conn, 80)
    to = f"kafka://{kafka_server.bootstrap}?topic={prefix}.{{db}}.{{table}}&partitions=3"
    result = run_sluice("sink", "--to", to, "--relay", shop.relay.url, "--name", prefix,
                        "--port", "0", "--until-caught-up")  # fmt: skip
    assert result.returncode == 0, result.stderr
    topics = [f"{prefix}.{shop.name}.{t}" for t in TABLES]
    got = read_topics(kafka_server.bootstrap, topics)
    partitions = {"orders": 3, "items": 2, "audit": 3}
    for table, count in partitions.items():
        records = got[f"{prefix}.{shop.name}.{table}"]
        metadata = admin.list_topics(f"{prefix}.{shop.name}.{table}", timeout=30)
        assert len(metadata.topics[f"{prefix}.{shop.name}.{table}"].partitions) == count
        keyed = [r for r in records if r.raw_key is not None]
        for r in keyed:
            assert r.partition == (murmur2(r.raw_key) & 0x7FFFFFFF) % count, (table, r.key)
        if table != "audit":
            assert len({r.partition for r in keyed}) > 1, table  # spread, not all on one
        else:
            assert not keyed  # no primary key: null keys
        for r in records:
            assert {"sluice-scn", "sluice-index", "sluice-source", "sluice-op"} <= set(r.headers)
    expected = shop.expected()
    for topic, records in got.items():  # per key, the relay's order
        mine: dict[str, list[Any]] = defaultdict(list)
        want: dict[str, list[Any]] = defaultdict(list)
        for r in records:
            mine[json.dumps(r.key)].append(r.value)
        for key, value in expected[topic.replace(prefix, "sluice", 1)]:
            want[json.dumps(key)].append(value)
        # null keys go to any partition (as Java's partitioner sends them): no order to keep
        for side in (mine, want):
            side["null"] = sorted(side.get("null", []), key=json.dumps)
        assert mine == want, topic


def test_a_message_the_topic_refuses_stops_the_sink_in_one_line_and_loses_nothing(
    shop: Shop, kafka_server: PrivateKafka
) -> None:
    prefix = f"big{next(_ids)}"
    small = f"{prefix}.{shop.name}.orders"
    admin = AdminClient({"bootstrap.servers": kafka_server.bootstrap})
    admin.create_topics([NewTopic(small, 1, 1, config={"max.message.bytes": "300"})])[small].result(
        timeout=60
    )
    workload(shop.conn, 40)
    to = f"kafka://{kafka_server.bootstrap}?topic={prefix}.{{db}}.{{table}}"
    args = ["sink", "--to", to, "--relay", shop.relay.url, "--name", prefix, "--port", "0",
            "--until-caught-up"]  # fmt: skip
    result = run_sluice(*args)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("sluice: error")]
    assert len(lines) == 1 and small in lines[0] and "max.message.bytes" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    # raised, the same sink goes on from its checkpoint: nothing skipped, nothing twice
    entry = ConfigEntry("max.message.bytes", "1000000",
                        incremental_operation=AlterConfigOpType.SET)  # fmt: skip
    resource = ConfigResource("topic", small, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=60)
    result = run_sluice(*args)
    assert result.returncode == 0, result.stderr
    got = read_topics(kafka_server.bootstrap, [f"{prefix}.{shop.name}.{t}" for t in TABLES])
    expected = {t.replace("sluice", prefix, 1): v for t, v in shop.expected().items()}
    mine = {t: [(r.key, r.value) for r in rs] for t, rs in got.items()}
    for topic, want in expected.items():
        assert len(mine.get(topic, [])) == len(want), topic
        assert mine[topic] == want, topic


def test_format_json_keys_by_the_canonical_key_text(shop: Shop, kafka_server: PrivateKafka) -> None:
    """``--format json``: Sluice's JSON lines as values, the canonical key text as keys (null
    for a table without a key), tombstones after deletes; the relay's events, in order."""
    workload(shop.conn, 40)
    prefix = f"json{next(_ids)}"
    to = f"kafka://{kafka_server.bootstrap}?topic={prefix}.{{db}}.{{table}}"
    result = run_sluice("sink", "--to", to, "--relay", shop.relay.url, "--name", prefix,
                        "--port", "0", "--format", "json", "--until-caught-up")  # fmt: skip
    assert result.returncode == 0, result.stderr
    got = read_topics(kafka_server.bootstrap, [f"{prefix}.{shop.name}.{t}" for t in TABLES])
    events = relay_events(shop.relay.url, shop.sources)
    for table in TABLES:
        records = got[f"{prefix}.{shop.name}.{table}"]
        values = [r.value for r in records if r.value is not None]
        assert values == [e for e in events if e["source"] == f"{shop.name}.{table}"], table
        for r in records:
            want = None if r.value is None else r.value["key"]
            if r.value is None:  # a tombstone: the key of the delete before it
                assert r.key is not None
                continue
            assert r.key == want  # the canonical key text, parsed
        tombstones = sum(1 for r in records if r.value is None)
        deletes = sum(1 for v in values if v["op"] == "d" and v["key"] is not None)
        assert tombstones == deletes, table
