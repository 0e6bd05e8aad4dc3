"""Kafka Connect schemas to Avro as Confluent's AvroData makes them (expected schemas taken from
AvroData.java and its AvroDataTest.java, defaults connect.meta.data=true,
enhanced.avro.schema.support=false), and JsonConverter payloads encoded for them."""

from __future__ import annotations

import base64
import io
import math
from decimal import Decimal
from typing import Any

import fastavro
import pytest

from sluice.capture.mysql.capture import described_source
from sluice.errors import ConfigError
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.connect_avro import (
    ConnectAvro,
    avro_schema,
    confluent_frame,
    confluent_unframe,
)
from sluice.schemas.debezium import DebeziumFormatter, DebeziumOptions

DECIMAL = "org.apache.kafka.connect.data.Decimal"
NS = "io.confluent.connect.avro"


def _struct(*fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "struct", "fields": list(fields), "optional": False, **extra}


def _f(field: str, kind: str, optional: bool = False, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "optional": optional, **extra, "field": field}


@pytest.mark.parametrize(
    ("connect", "avro"),
    [
        ({"type": "boolean", "optional": False}, "boolean"),
        ({"type": "int8", "optional": False}, {"type": "int", "connect.type": "int8"}),
        ({"type": "int16", "optional": True}, ["null", {"type": "int", "connect.type": "int16"}]),
        ({"type": "int32", "optional": False}, "int"),
        ({"type": "int64", "optional": True}, ["null", "long"]),
        ({"type": "float", "optional": False}, "float"),
        ({"type": "double", "optional": False}, "double"),
        ({"type": "bytes", "optional": False}, "bytes"),
        ({"type": "string", "optional": False}, "string"),
        (  # testFromConnectMapWithStringKey
            {"type": "map", "keys": {"type": "string"}, "values": {"type": "int32"}},
            {"type": "map", "values": "int"},
        ),
        (  # testFromConnectMapWithNonStringKey
            {"type": "map", "keys": {"type": "int32"}, "values": {"type": "int32"}},
            {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "MapEntry",
                    "namespace": NS,
                    "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": "int"}],
                },
            },
        ),
        (  # testFromConnectMapWithOptionalKey
            {"type": "map", "keys": {"type": "string", "optional": True},
             "values": {"type": "int32"}},
            {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "MapEntry",
                    "namespace": NS,
                    "fields": [
                        {"name": "key", "type": ["null", "string"], "default": None},
                        {"name": "value", "type": "int"},
                    ],
                },
            },
        ),
        ({"type": "array", "items": {"type": "string", "optional": True}},
         {"type": "array", "items": ["null", "string"]}),
        (  # testFromConnectOptionalPrimitiveWithMetadata: a default puts the type before null
            {"type": "string", "optional": True, "doc": "doc", "default": "foo", "version": 2,
             "name": "io.confluent.stringtype", "parameters": {"foo": "bar", "baz": "baz"}},
            [{"type": "string", "connect.doc": "doc", "connect.version": 2,
              "connect.parameters": {"foo": "bar", "baz": "baz"}, "connect.default": "foo",
              "connect.name": "io.confluent.stringtype"}, "null"],
        ),
        (  # createDecimalSchema: scale, precision, the connect.* properties, then logicalType
            {"type": "bytes", "optional": False, "name": DECIMAL, "version": 1,
             "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
            {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
             "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
             "connect.name": DECIMAL, "logicalType": "decimal"},
        ),
        (  # no connect.decimal.precision: AvroData's default precision, 64
            {"type": "bytes", "optional": True, "name": DECIMAL, "version": 1,
             "parameters": {"scale": "3"}},
            ["null", {"type": "bytes", "scale": 3, "precision": 64, "connect.version": 1,
                      "connect.parameters": {"scale": "3"}, "connect.name": DECIMAL,
                      "logicalType": "decimal"}],
        ),
        (
            {"type": "int32", "name": "org.apache.kafka.connect.data.Date", "version": 1},
            {"type": "int", "connect.version": 1,
             "connect.name": "org.apache.kafka.connect.data.Date", "logicalType": "date"},
        ),
        (
            {"type": "int32", "name": "org.apache.kafka.connect.data.Time", "version": 1},
            {"type": "int", "connect.version": 1,
             "connect.name": "org.apache.kafka.connect.data.Time", "logicalType": "time-millis"},
        ),
        (
            {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
            {"type": "long", "connect.version": 1,
             "connect.name": "org.apache.kafka.connect.data.Timestamp",
             "logicalType": "timestamp-millis"},
        ),
        (  # testFromConnectRecordWithMetadata
            _struct(_f("int32", "int32"), name="io.confluent.test.TestSchema", version=12,
                    doc="doc"),
            {"type": "record", "name": "TestSchema", "namespace": "io.confluent.test",
             "fields": [{"name": "int32", "type": "int"}], "connect.doc": "doc",
             "connect.version": 12, "connect.name": "io.confluent.test.TestSchema"},
        ),
        (  # testFromConnectOptionalWithDefaultNull
            _struct(_f("optionalBool", "boolean", True)),
            {"type": "record", "name": "ConnectDefault", "namespace": NS,
             "fields": [{"name": "optionalBool", "type": ["null", "boolean"], "default": None}]},
        ),
    ],
)  # fmt: skip
def test_schemas_are_avrodatas(connect: dict[str, Any], avro: Any) -> None:
    assert avro_schema(connect) == avro
    fastavro.parse_schema(avro)  # and Avro readers take them


def test_unnamed_structs_are_numbered_and_a_repeated_one_is_a_reference() -> None:
    """testFromConnectStructsWithNullName: the outer struct is ConnectDefault, the inner
    ConnectDefault2, referred to by name the second time."""
    inner = {"type": "struct", "fields": [_f("value", "int64")], "optional": True}
    outer = _struct({**inner, "field": "struct"}, _f("array", "array", items=inner))
    assert avro_schema(outer) == {
        "type": "record",
        "name": "ConnectDefault",
        "namespace": NS,
        "fields": [
            {
                "name": "struct",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "ConnectDefault2",
                        "fields": [{"name": "value", "type": "long"}],
                    },
                ],
                "default": None,
            },
            {"name": "array", "type": {"type": "array", "items": ["null", "ConnectDefault2"]}},
        ],
    }


def test_defaults_are_avro_defaults() -> None:
    """A field's default is its schema's (bytes as ISO-8859-1 text), and ``connect.default``."""
    schema = _struct(
        _f("n", "int32", default=5),
        _f("b", "bytes", True, default=base64.b64encode(b"\x00\xff").decode()),
        name="a.B",
    )
    avro = avro_schema(schema)
    assert isinstance(avro, dict)
    assert avro["fields"] == [
        {"name": "n", "type": {"type": "int", "connect.default": 5}, "default": 5},
        {
            "name": "b",
            "type": [{"type": "bytes", "connect.default": "\x00\xff"}, "null"],
            "default": "\x00\xff",
        },
    ]
    # a missing (or null) value takes the default, as Connect's Struct.get gives it
    assert ConnectAvro(schema).datum({"n": None, "b": None}) == {
        "n": 5,
        "b": ("bytes", b"\x00\xff"),
    }


def _formatter(**options: str) -> DebeziumFormatter:
    columns = (
        Column("id", "int", False, "int"),
        Column("price", "decimal", True, "decimal(10,2)", 10, 2),
        Column("small", "int", False, "tinyint", default="3"),
    )
    schema = TableSchema("shop.person", 1, columns, ("id",))
    parsed = DebeziumOptions.parse({**options, "schemas.enable": "true"})
    return DebeziumFormatter(schema, described_source(7, "binlog"), parsed)


def test_debeziums_envelope_is_as_avroconverter_registers_it() -> None:
    formatter = _formatter()
    avro = ConnectAvro(formatter.envelope_schema).avro_schema
    assert isinstance(avro, dict)
    assert (avro["name"], avro["namespace"]) == ("Envelope", "sluice.shop.person")
    assert (avro["connect.version"], avro["connect.name"]) == (2, "sluice.shop.person.Envelope")
    fields = {f["name"]: f for f in avro["fields"]}
    value = fields["before"]["type"][1]
    assert (value["type"], value["name"], value["connect.name"]) == (
        "record",
        "Value",
        "sluice.shop.person.Value",
    )
    assert "namespace" not in value  # the enclosing record's, as Avro prints it
    assert fields["after"] == {"name": "after", "type": ["null", "Value"], "default": None}
    assert value["fields"][2] == {
        "name": "small",
        "type": {"type": "int", "connect.default": 3, "connect.type": "int16"},
        "default": 3,
    }
    source = fields["source"]["type"]
    assert (source["namespace"], source["name"]) == ("io.debezium.connector.mysql", "Source")
    snapshot = next(f for f in source["fields"] if f["name"] == "snapshot")
    assert snapshot["default"] == "false" and snapshot["type"][1] == "null"
    assert list(snapshot["type"][0]) == [
        "type",
        "connect.version",
        "connect.parameters",
        "connect.default",
        "connect.name",
    ]
    tx = fields["transaction"]["type"][1]
    assert (tx["name"], tx["namespace"]) == ("block", "event")
    assert fields["op"] == {"name": "op", "type": "string"}
    key = ConnectAvro(formatter.key_schema).avro_schema
    assert key == {
        "type": "record",
        "name": "Key",
        "namespace": "sluice.shop.person",
        "fields": [{"name": "id", "type": "int"}],
        "connect.name": "sluice.shop.person.Key",
    }


def _read(codec: ConnectAvro, data: bytes) -> Any:
    parsed = fastavro.parse_schema(codec.avro_schema)
    return fastavro.schemaless_reader(io.BytesIO(data), parsed, parsed)


def test_an_envelope_encodes_to_what_it_says() -> None:
    formatter = _formatter()
    payload = RowCodec(formatter.schema).encode([7, Decimal("-1.50"), 3], [7, None, 4])
    key, value = formatter.event("u", payload, (1 << 32) | 99, 1_700_000_000_000, None, True)
    codec = ConnectAvro(value["schema"])
    decoded = _read(codec, codec.encode(value["payload"]))
    assert decoded["before"] == {"id": 7, "price": Decimal("-1.50"), "small": 3}
    assert decoded["after"] == {"id": 7, "price": None, "small": 4}
    assert decoded["source"]["pos"] == 99 and decoded["op"] == "u"
    assert decoded["transaction"] is None
    key_codec = ConnectAvro(key["schema"])
    assert _read(key_codec, key_codec.encode(key["payload"])) == {"id": 7}


def test_payload_values_become_avro_values() -> None:
    schema = _struct(
        _f("raw", "bytes"),
        _f("ratio", "double"),
        _f("f", "float", True),
        _f("tags", "array", items={"type": "string", "optional": True}),
        _f("counts", "map", keys={"type": "string"}, values={"type": "int64"}),
        _f("pairs", "map", keys={"type": "int32"}, values={"type": "string"}),
        _f("inner", "struct", True, fields=[_f("x", "int8")], name="a.Inner"),
        name="a.Outer",
    )
    codec = ConnectAvro(schema)
    payload = {
        "raw": base64.b64encode(b"\x01\x02").decode(),
        "ratio": "NaN",
        "f": 0.5,
        "tags": ["a", None],
        "counts": {"k": 1},
        "pairs": [[1, "one"], [2, "two"]],
        "inner": {"x": -3},
    }
    decoded = _read(codec, codec.encode(payload))
    assert math.isnan(decoded.pop("ratio"))
    assert decoded == {
        "raw": b"\x01\x02",
        "f": 0.5,
        "tags": ["a", None],
        "counts": {"k": 1},
        "pairs": [{"key": 1, "value": "one"}, {"key": 2, "value": "two"}],
        "inner": {"x": -3},
    }
    assert _read(codec, codec.encode({**payload, "inner": None}))["inner"] is None


def test_confluent_framing() -> None:
    framed = confluent_frame(258, b"avro")
    assert framed == b"\x00\x00\x00\x01\x02avro"
    assert confluent_unframe(framed) == (258, b"avro")
    with pytest.raises(ValueError, match="wire format"):
        confluent_unframe(b"\x01\x00\x00\x00\x01x")


def test_a_schema_that_is_not_connects_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown Kafka Connect type"):
        avro_schema({"type": "decimal"})
    with pytest.raises(ConfigError, match="not a Kafka Connect schema"):
        avro_schema({"fields": []})
