"""``sluice registry`` as a real process, driven by confluent-kafka's own
``SchemaRegistryClient``, ``AvroSerializer`` and ``AvroDeserializer``: Debezium envelopes
encoded by ``ConnectAvro`` and framed with an id from the registry decode back to the values
of Debezium's JSON form; ids survive a restart; errors carry Confluent's codes."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import math
import select
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from sluice.capture.mysql.capture import described_source
from sluice.errors import RegistryUnavailable, SchemaRejected
from sluice.registry import RegistryClient
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.connect_avro import ConnectAvro, confluent_frame, confluent_unframe
from sluice.schemas.debezium import DebeziumFormatter, DebeziumOptions

TOPIC = "sluice.shop.person"
CONNECT = "org.apache.kafka.connect.data."

COLUMNS = (
    Column("id", "int", False, "int"),
    Column("price", "decimal", True, "decimal(10,2)", 10, 2),
    Column("amount", "decimal", False, "decimal(30,5)", 30, 5),
    Column("born", "date", True, "date"),
    Column("seen", "datetime", True, "datetime(3)", 3),
    Column("seen_us", "datetime", True, "datetime(6)", 6),
    Column("stamp", "timestamp", True, "timestamp(6)", 6),
    Column("wake", "time", True, "time(3)", 3),
    Column("photo", "bytes", True, "varbinary(16)"),
    Column("name", "string", True, "varchar(20)"),
    Column("ratio", "float", True, "float"),
    Column("score", "double", True, "double"),
    Column("tiny", "int", False, "tinyint", default="3"),
    Column("big", "int", True, "bigint"),
    Column("hue", "enum", True, "enum('red','green')"),
)
SCHEMA = TableSchema("shop.person", 1, COLUMNS, ("id",))
FULL = [
    7,
    Decimal("-12.50"),
    Decimal("1234567890123456789012.34567"),  # Sluice decodes up to 28 digits exactly
    19_000,
    1_700_000_000_123_000,
    1_700_000_000_123_456,
    1_700_000_000_654_321,
    45_296_789_000,
    b"\x00\x01\xfe\xff\x00",
    "Zoë ✓",
    1.5,
    -2.25e300,
    3,
    -(2**62),
    "green",
]
NULLS = [8, None, Decimal("0.00000"), None, None, None, None, None, None, None, None, None, 3,
         None, None]  # fmt: skip


# -- the registry process ---------------------------------------------------------------------
class RegistryProcess:
    """``sluice registry`` in a process of its own; ``url`` once it listens."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> RegistryProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sluice.cli.main", "registry", "--port", "0",
             "--data-dir", str(self.data_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        if "listening on " not in line:
            self.proc.kill()
            raise AssertionError(f"registry did not start: {line!r} {self.proc.communicate()!r}")
        self.url = line.rsplit(" ", 1)[1].strip()
        return self

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        _, stderr = self.proc.communicate()  # and closes the pipes
        assert "Traceback" not in stderr
        return code


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[RegistryProcess]:
    process = RegistryProcess(tmp_path / "registry").start()
    yield process
    if process.proc is not None and process.proc.poll() is None:
        process.stop()


def _call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.headers["Content-Type"].startswith("application/vnd.schemaregistry.v1+json")
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        assert exc.headers["Content-Type"].startswith("application/vnd.schemaregistry.v1+json")
        return exc.code, json.loads(exc.read())


# -- what the JSON form's values are once Avro decoded --------------------------------------
def expected(schema: dict[str, Any], value: Any) -> Any:
    """The value confluent-kafka's AvroDeserializer returns for a JsonConverter payload value
    of Connect ``schema``: bytes from base64, Decimal and Connect's logical types as Python's."""
    if value is None:
        return None
    kind, name = schema["type"], schema.get("name")
    if kind == "struct":
        return {f["field"]: expected(f, value.get(f["field"])) for f in schema["fields"]}
    if kind == "bytes":
        raw = base64.b64decode(value)
        if name == CONNECT + "Decimal":
            scale = int(schema["parameters"]["scale"])
            return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
        return raw
    if name == CONNECT + "Date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    if name == CONNECT + "Timestamp":
        return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=value)
    if name == CONNECT + "Time":
        return (dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=value)).time()
    if kind == "float":  # a float32 on the wire
        return struct.unpack("<f", struct.pack("<f", value))[0]
    return value


def _same(a: Any, b: Any, path: str = "") -> None:
    """Field by field, naming the first difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), path
        for key in a:
            _same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), path
    elif isinstance(a, Decimal):
        assert isinstance(b, Decimal) and (a, a.as_tuple()) == (b, b.as_tuple()), (path, a, b)
    else:
        assert type(a) is type(b) and a == b, (path, a, b)


def _events(options: DebeziumOptions) -> list[tuple[Any, Any]]:
    formatter = DebeziumFormatter(SCHEMA, described_source(7, "binlog"), options)
    codec = RowCodec(SCHEMA)
    scn, ts = (1 << 32) | 4567, 1_700_000_000_000
    out = []
    for op, before, after in (("c", None, FULL), ("c", None, NULLS), ("u", NULLS, FULL),
                              ("d", FULL, None), ("r", None, NULLS)):  # fmt: skip
        payload = codec.encode(before, after)
        out.append(formatter.event(op, payload, scn, ts, None, with_key=True))
    return out


@pytest.mark.parametrize(
    "modes",
    [{}, {"time.precision.mode": "connect"}, {"decimal.handling.mode": "string"}],
    ids=["debezium-defaults", "connect-times", "decimal-strings"],
)
def test_confluent_deserializer_reads_the_debezium_envelope(
    registry: RegistryProcess, modes: dict[str, str]
) -> None:
    options = DebeziumOptions.parse({**modes, "schemas.enable": "true"})
    events = _events(options)
    key_avro = ConnectAvro(events[0][0]["schema"])
    value_avro = ConnectAvro(events[0][1]["schema"])

    async def register() -> tuple[int, int]:
        async with RegistryClient(registry.url) as client:
            key_id = await client.register(f"{TOPIC}-key", key_avro.avro_schema)
            value_id = await client.register(f"{TOPIC}-value", value_avro.avro_schema)
            assert await client.register(f"{TOPIC}-value", value_avro.avro_schema) == value_id
            return key_id, value_id

    key_id, value_id = asyncio.run(register())
    with SchemaRegistryClient({"url": registry.url}) as confluent:
        _round_trip(confluent, events, key_avro, value_avro, key_id, value_id)


def _round_trip(
    confluent: SchemaRegistryClient,
    events: list[tuple[Any, Any]],
    key_avro: ConnectAvro,
    value_avro: ConnectAvro,
    key_id: int,
    value_id: int,
) -> None:
    assert confluent.get_latest_version(f"{TOPIC}-value").schema_id == value_id
    assert json.loads(confluent.get_schema(value_id).schema_str) == value_avro.avro_schema
    deserializer = AvroDeserializer(confluent)
    # the serializer registers the same schema itself: the same id; its bytes are ours
    serializer = AvroSerializer(confluent, value_avro.schema_text)
    value_ctx = SerializationContext(TOPIC, MessageField.VALUE)
    key_ctx = SerializationContext(TOPIC, MessageField.KEY)
    for key, value in events:
        framed = value_avro.frame(value_id, value["payload"])
        assert confluent_unframe(framed)[0] == value_id
        decoded = deserializer(framed, value_ctx)
        _same(expected(value["schema"], value["payload"]), decoded)
        assert serializer(decoded, value_ctx) == framed
        framed_key = confluent_frame(key_id, key_avro.encode(key["payload"]))
        _same(expected(key["schema"], key["payload"]), deserializer(framed_key, key_ctx))
    assert decoded["op"] == "r" and decoded["after"]["price"] is None


def test_ids_survive_a_restart(tmp_path: Path) -> None:
    first = RegistryProcess(tmp_path / "data").start()
    with SchemaRegistryClient({"url": first.url}) as client:
        id_one, id_two = _register_three(client)
    assert first.stop() == 0

    second = RegistryProcess(tmp_path / "data").start()
    try:
        with SchemaRegistryClient({"url": second.url}) as again:
            _read_after_restart(again, id_one, id_two)
    finally:
        assert second.stop() == 0
    third = RegistryProcess(tmp_path / "data").start()
    try:
        with SchemaRegistryClient({"url": third.url}) as client:
            assert client.get_compatibility("c-value") == "FULL"
    finally:
        third.stop()


ONE = Schema('{"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]}')


def _register_three(client: SchemaRegistryClient) -> tuple[int, int]:
    two = Schema('{"type":"record","name":"B","fields":[{"name":"y","type":"string"}]}')
    id_one = client.register_schema("a-value", ONE)
    id_two = client.register_schema("a-value", two)
    # the same schema (spelled otherwise) under another subject: the same id, as Confluent's
    same = Schema('{"name":"A","type":"record","fields":[{"type":{"type":"int"},"name":"x"}]}')
    assert client.register_schema("b-value", same) == id_one
    return id_one, id_two


def _read_after_restart(again: SchemaRegistryClient, id_one: int, id_two: int) -> None:
    assert again.get_subjects() == ["a-value", "b-value"]
    assert again.get_versions("a-value") == [1, 2]
    latest = again.get_latest_version("a-value")
    assert (latest.schema_id, latest.version) == (id_two, 2)
    assert again.get_version("a-value", 1).schema_id == id_one
    assert json.loads(again.get_schema(id_one).schema_str)["name"] == "A"
    assert again.register_schema("a-value", ONE) == id_one  # no new version
    assert again.get_versions("a-value") == [1, 2]
    found = again.lookup_schema("b-value", ONE)
    assert (found.schema_id, found.version) == (id_one, 1)
    assert sorted(again.get_subjects_by_schema_id(id_one)) == ["a-value", "b-value"]
    three = Schema('{"type":"enum","name":"C","symbols":["P","Q"]}')
    assert again.register_schema("c-value", three) == max(id_one, id_two) + 1
    assert again.get_compatibility() == "BACKWARD"
    again.set_compatibility("c-value", "full")
    assert again.get_compatibility("c-value") == "FULL"


def test_errors_carry_confluents_codes(registry: RegistryProcess) -> None:
    with SchemaRegistryClient({"url": registry.url}) as client:
        _confluent_errors(client)
    _raw_errors(registry.url)


def _confluent_errors(client: SchemaRegistryClient) -> None:
    schema = Schema('{"type":"record","name":"A","fields":[{"name":"x","type":"int"}]}')
    client.register_schema("known", schema)
    cases = [
        (lambda: client.get_latest_version("nobody"), 404, 40401, "Subject 'nobody' not found."),
        (lambda: client.get_version("known", 9), 404, 40402, "Version 9 not found."),
        (lambda: client.get_schema(999), 404, 40403, "Schema 999 not found"),
        (lambda: client.lookup_schema("known", Schema('"string"')), 404, 40403, "Schema not found"),
        (lambda: client.register_schema("known", Schema('{"type":"recrd"}')), 422, 42201, None),
        (lambda: client.get_compatibility("known"), 404, 40408, None),
    ]
    for call, status, code, message in cases:
        with pytest.raises(SchemaRegistryError) as err:
            call()
        assert (err.value.http_status_code, err.value.error_code) == (status, code)
        if message is not None:
            assert err.value.error_message == message


def _raw_errors(base: str) -> None:
    assert _call("GET", f"{base}/subjects/known/versions/abc")[1]["error_code"] == 42202
    assert _call("PUT", f"{base}/config", {"compatibility": "SOMETIMES"})[1]["error_code"] == 42203
    assert _call("GET", f"{base}/schemas/ids/1/versions") == (
        200,
        [{"subject": "known", "version": 1}],
    )
    assert _call("GET", f"{base}/subjects/known/versions/latest/schema")[1]["name"] == "A"
    assert _call("DELETE", f"{base}/subjects/known") == (200, [1])
    assert _call("GET", f"{base}/subjects/known/versions")[1]["error_code"] == 40401
    assert _call("GET", f"{base}/subjects?deleted=true") == (200, ["known"])
    assert _call("GET", f"{base}/schemas/ids/1")[0] == 200  # a soft delete keeps the id
    assert _call("DELETE", f"{base}/subjects/known?permanent=true") == (200, [1])
    assert _call("GET", f"{base}/schemas/ids/1")[1]["error_code"] == 40403


def test_the_sluice_client_says_what_went_wrong(registry: RegistryProcess) -> None:
    async def attempts() -> None:
        async with RegistryClient(registry.url) as client:
            with pytest.raises(SchemaRejected) as refused:
                await client.register("shop-value", {"type": "record", "name": "A"})
            assert refused.value.error_code == 42201 and refused.value.subject == "shop-value"
            assert "shop-value" in str(refused.value) and not refused.value.retriable
            schema_id = await client.register("shop-value", "int")
            assert json.loads(await client.schema(schema_id)) == "int"
        async with RegistryClient("http://user:secret@127.0.0.1:1") as gone:
            with pytest.raises(RegistryUnavailable) as unreachable:
                await gone.register("shop-value", "int")
            assert unreachable.value.retriable and "secret" not in str(unreachable.value)

    asyncio.run(attempts())


def test_bad_input_is_one_line_and_exit_2(registry: RegistryProcess, tmp_path: Path) -> None:
    def sluice(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sluice.cli.main", "registry", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    for args, said in (
        (["--port", "x", "--data-dir", str(tmp_path)], "not a port number"),
        (["--port", "0", "--data-dir", str(registry.data_dir)], "in use by another registry"),
    ):
        started = time.monotonic()
        done = sluice(*args)
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and time.monotonic() - started < 30
