"""Kafka Connect schemas (JsonConverter's JSON form) as Confluent's ``AvroData`` turns them into
Avro, and JsonConverter payloads as Avro binary in Confluent's wire format: what Debezium writes
through ``io.confluent.connect.avro.AvroConverter``. Pure: no I/O.

Follows ``AvroData.fromConnectSchema`` (confluentinc/schema-registry, ``avro-data/``) with its
defaults (``connect.meta.data=true``, ``enhanced.avro.schema.support=false``,
``scrub.invalid.names=false``):

- a struct is a record named by its Connect name, split at the last dot into namespace and
  name (unnamed: ``io.confluent.connect.avro.ConnectDefault``, then ``ConnectDefault2``...);
  a struct seen before is referred to by name, as Avro prints a type it already defined;
- optional is the union ``["null", T]``, ``[T, "null"]`` when the schema has a default; a field
  defaults to its schema's default, else to null when optional;
- int8/int16 are ``int`` with ``connect.type``; float is Avro's ``float``, double ``double``;
- annotations in AvroData's order: ``connect.doc``, ``connect.version``,
  ``connect.parameters``, ``connect.default``, ``connect.name``, ``connect.type``;
- ``org.apache.kafka.connect.data.Decimal`` is bytes with ``scale``/``precision`` (precision
  ``connect.decimal.precision`` or 64) and ``logicalType: decimal``; ``Date``, ``Time``,
  ``Timestamp`` are ``date``, ``time-millis``, ``timestamp-millis``;
- a map with string keys is an Avro map; any other is an array of ``MapEntry`` records.

The JSON is laid out as Avro's ``Schema.toString()`` lays it out (keys in its order, a
namespace only where it changes, references qualified relative to the enclosing namespace), so
the text registered is the text AvroConverter would register.

Not covered (Debezium does not make them): Confluent's ``io.confluent.connect.avro.Union`` and
``Enum`` structs, fixed-size bytes (``connect.fixed.size``), and recursive schemas.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from collections.abc import Callable
from typing import Any

import fastavro

from sluice.errors import ConfigError

__all__ = ["ConnectAvro", "avro_schema", "confluent_frame", "confluent_unframe"]

NAMESPACE = "io.confluent.connect.avro"
DEFAULT_NAME = "ConnectDefault"
MAGIC = 0
_FRAME = struct.Struct(">bI")
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_LOGICAL = {
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Time": "time-millis",
    "org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
}
_PRIMITIVE = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "float32": "float",
    "double": "double",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_NONFINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}

Convert = Callable[[Any], Any]  # a JsonConverter payload value -> fastavro's datum


def confluent_frame(schema_id: int, avro: bytes) -> bytes:
    """Confluent's wire format: magic byte 0, the schema id (4 bytes, big-endian), Avro."""
    return _FRAME.pack(MAGIC, schema_id) + avro


def confluent_unframe(message: bytes) -> tuple[int, bytes]:
    """``(schema id, Avro bytes)`` of a framed message; a ``ValueError`` when it is not one."""
    if len(message) < _FRAME.size or message[0] != MAGIC:
        raise ValueError("not in Confluent's wire format (magic byte 0, 4-byte schema id)")
    return _FRAME.unpack_from(message)[1], message[_FRAME.size :]


def avro_schema(connect: dict[str, Any]) -> dict[str, Any] | list[Any] | str:
    """The Avro schema (as parsed JSON) AvroData makes of a Connect schema."""
    return _Builder().top(connect)[0]


class ConnectAvro:
    """One Connect schema's Avro: ``avro_schema`` (the JSON to register), ``schema_text``
    (its text) and ``encode(payload)``, the JsonConverter payload as Avro binary (unframed;
    ``confluent_frame`` adds the id). The fastavro schema is parsed once, here."""

    def __init__(self, connect: dict[str, Any]) -> None:
        self.connect_schema = connect
        self.avro_schema, self._convert = _Builder().top(connect)
        self.schema_text = json.dumps(self.avro_schema, separators=(",", ":"), ensure_ascii=False)
        self._parsed = fastavro.parse_schema(self.avro_schema)

    def datum(self, payload: Any) -> Any:
        """The payload as fastavro's ``schemaless_writer`` takes it."""
        return self._convert(payload)

    def encode(self, payload: Any) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self._parsed, self._convert(payload))
        return out.getvalue()

    def frame(self, schema_id: int, payload: Any) -> bytes:
        """``encode`` in Confluent's wire format, under ``schema_id``."""
        return confluent_frame(schema_id, self.encode(payload))


# -- the schema walk ---------------------------------------------------------------------------
Node = dict[str, Any] | list[Any] | str


def _split(full: str) -> tuple[str | None, str]:
    namespace, dot, name = full.rpartition(".")
    return (namespace, name) if dot else (None, full)


def _qualified(full: str, space: str | None) -> str:
    """A reference to a named type as Avro prints it inside namespace ``space``."""
    namespace, name = _split(full)
    return name if namespace is None or namespace == space else full


def _identity(value: Any) -> Any:
    return value


def _float(value: Any) -> Any:
    return _NONFINITE.get(value, value) if isinstance(value, str) else float(value)


def _bytes(value: Any) -> Any:
    return base64.b64decode(value) if isinstance(value, str) else bytes(value)


class _Builder:
    """One conversion's context (AvroData's ``FromConnectContext``): the named types made so
    far (a second use is a reference), the unnamed structs' counter, and the non-optional
    schemas already converted (``schemaMap``)."""

    def __init__(self) -> None:
        self.named: dict[str, Convert] = {}  # full name -> its record's converter
        self.cache: dict[str, tuple[Node, Convert, str | None]] = {}
        self.unnamed = 0

    def top(self, connect: dict[str, Any]) -> tuple[Node, Convert]:
        if not isinstance(connect, dict) or "type" not in connect:
            raise ConfigError(f"not a Kafka Connect schema: {str(connect)[:80]}")
        node, convert, _full = self.schema(connect, None)
        return node, convert

    def schema(self, s: dict[str, Any], space: str | None) -> tuple[Node, Convert, str | None]:
        """``(Avro node, converter, full name if a record)`` of ``s`` inside ``space``."""
        if s.get("optional"):
            return self._optional(s, space)
        key = _cache_key(s)
        cached = self.cache.get(key)
        if cached is not None:
            node, convert, full = cached
            return (_qualified(full, space) if full else node), convert, full
        out = self._base(s, space)
        self.cache[key] = out
        return out

    def _optional(self, s: dict[str, Any], space: str | None) -> tuple[Node, Convert, None]:
        inner, convert, full = self.schema({**s, "optional": False}, space)
        branch = full or _branch_name(inner)
        has_default = s.get("default") is not None
        node = [inner, "null"] if has_default else ["null", inner]

        def optional(value: Any) -> Any:
            return None if value is None else (branch, convert(value))

        return node, optional, None

    def _base(self, s: dict[str, Any], space: str | None) -> tuple[Node, Convert, str | None]:
        kind, name = s["type"], s.get("name")
        if kind == "struct":
            return self._record(s, space)
        if kind == "array":
            items, convert_item, _ = self.schema(s["items"], space)
            node: dict[str, Any] = {"type": "array", "items": items}
            return self._annotated(node, s), _list_of(convert_item), None
        if kind == "map":
            return self._map(s, space)
        base = _PRIMITIVE.get(kind)
        if base is None:
            raise ConfigError(f"unknown Kafka Connect type {kind!r}")
        node = {"type": base}
        if name == _DECIMAL:
            params = s.get("parameters") or {}
            node["scale"] = int(params.get("scale", 0))
            node["precision"] = int(params.get("connect.decimal.precision", 64))
        convert: Convert = _identity
        if base in ("float", "double"):
            convert = _float
        elif base == "bytes":
            convert = _bytes
        return self._annotated(node, s), convert, None

    def _annotated(self, node: dict[str, Any], s: dict[str, Any]) -> Node:
        """AvroData's ``connect.*`` properties and logical types, in its order; a primitive
        left without any is its bare type name, as Avro prints it."""
        name, params = s.get("name"), s.get("parameters") or {}
        if s.get("doc") is not None:
            node["connect.doc"] = s["doc"]
        if s.get("version") is not None:
            node["connect.version"] = int(s["version"])
        if params:
            node["connect.parameters"] = dict(params)
        if s.get("default") is not None:
            node["connect.default"] = self.default(s, s["default"])
        if name is not None:
            node["connect.name"] = name
        if s["type"] in ("int8", "int16"):
            node["connect.type"] = s["type"]
        if name == _DECIMAL:  # Avro's logical type, or AvroData's legacy property: the same key
            node["logicalType"] = "decimal"
        elif name in _LOGICAL:
            node["logicalType"] = _LOGICAL[name]
        for key, value in params.items():  # parameters starting "avro" are copied as they are
            if key.startswith("avro"):
                node.setdefault(key, value)
        if list(node) == ["type"] and isinstance(node["type"], str):
            return str(node["type"])
        return node

    def _record(
        self, s: dict[str, Any], space: str | None, annotate: bool = True
    ) -> tuple[Node, Convert, str]:
        full = s.get("name")
        if full is None:
            self.unnamed += 1
            suffix = str(self.unnamed) if self.unnamed > 1 else ""
            full = f"{NAMESPACE}.{DEFAULT_NAME}{suffix}"
        if full in self.named:  # a struct met again: a reference, as Avro prints it
            convert = self.named[full]
            return _qualified(full, space), convert, full
        namespace, name = _split(full)
        node: dict[str, Any] = {"type": "record", "name": name}
        if namespace != space:
            node["namespace"] = namespace if namespace is not None else ""
        params = s.get("parameters") or {}
        if params.get(f"{NAMESPACE}.record.doc") is not None:
            node["doc"] = params[f"{NAMESPACE}.record.doc"]
        converters: list[tuple[str, Convert, Any]] = []
        fields = []
        for field in s.get("fields") or []:
            avro_field, convert, default = self._field(field, namespace, params)
            fields.append(avro_field)
            converters.append((field["field"], convert, default))
        node["fields"] = fields
        annotated = self._annotated(node, s) if annotate else node

        def record(value: dict[str, Any]) -> dict[str, Any]:
            out = {}
            for field_name, convert, default in converters:
                item = value.get(field_name)
                if item is None:
                    item = default
                out[field_name] = None if item is None else convert(item)
            return out

        self.named[full] = record
        return annotated, record, full

    def _field(
        self, field: dict[str, Any], space: str | None, struct_params: dict[str, Any]
    ) -> tuple[dict[str, Any], Convert, Any]:
        """An Avro field (AvroData's ``addAvroRecordField``), its converter, and the default a
        missing value takes (its schema's, as JsonConverter reads it)."""
        schema = {k: v for k, v in field.items() if k != "field"}
        name = field["field"]
        seen = schema.get("name") in self.named
        node, convert, _full = self.schema(schema, space)
        out: dict[str, Any] = {"name": name, "type": node}
        doc = struct_params.get(f"{NAMESPACE}.field.doc.{name}")
        if doc is not None:
            out["doc"] = doc
        default = schema.get("default")
        if default is not None:
            out["default"] = self.default(schema, default)
        elif schema.get("optional"):
            out["default"] = None
        params = schema.get("parameters") or {}
        if seen and params and _named_node(node):
            out["connect.parameters"] = dict(params)
        return out, convert, default

    def _map(self, s: dict[str, Any], space: str | None) -> tuple[Node, Convert, None]:
        keys, values = s["keys"], s["values"]
        if keys.get("type") == "string" and not keys.get("optional"):
            inner, convert_value, _ = self.schema(values, space)
            node: dict[str, Any] = {"type": "map", "values": inner}

            def as_map(value: dict[str, Any]) -> dict[str, Any]:
                return {k: None if v is None else convert_value(v) for k, v in value.items()}

            return self._annotated(node, s), as_map, None
        entry: dict[str, Any] = {
            "type": "struct",
            "fields": [{**keys, "field": "key"}, {**values, "field": "value"}],
        }
        entry["name"] = s.get("name") or f"{NAMESPACE}.MapEntry"
        record, convert_entry, _ = self._record(entry, space, annotate=False)
        if s.get("name") is not None and isinstance(record, dict):
            record["connect.internal.type"] = "MapEntry"
        node = {"type": "array", "items": record}

        def as_entries(value: Any) -> list[Any]:
            pairs = value.items() if isinstance(value, dict) else value
            return [convert_entry({"key": k, "value": v}) for k, v in pairs]

        return self._annotated(node, s), as_entries, None

    def default(self, s: dict[str, Any], value: Any) -> Any:
        """A JsonConverter default as Avro's JSON default (``defaultValueFromConnect``):
        bytes as ISO-8859-1 text, structs as objects, the rest as they are."""
        kind = s["type"]
        if value is None:
            return None
        if kind == "bytes":
            return _bytes(value).decode("latin-1")
        if kind in ("float", "double", "float32", "float64"):
            return _float(value)
        if kind == "array":
            return [self.default(s["items"], v) for v in value]
        if kind == "map" and isinstance(value, dict):
            return {k: self.default(s["values"], v) for k, v in value.items()}
        if kind == "struct":
            return {
                f["field"]: self.default(f, value.get(f["field"])) for f in s.get("fields") or []
            }
        return value


def _cache_key(s: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in s.items() if k != "field"}, sort_keys=True)


def _branch_name(node: Node) -> str:
    """The name fastavro's tuple notation gives a union branch (no validation pass)."""
    if isinstance(node, str):
        return node
    if isinstance(node, dict):
        return str(node["type"])
    raise ConfigError("a union inside a union is not an Avro schema")


def _named_node(node: Node) -> bool:
    if isinstance(node, list):
        return any(_named_node(branch) for branch in node)
    if isinstance(node, dict):
        return node.get("type") in ("record", "enum", "fixed")
    return node not in _AVRO_PRIMITIVES


_AVRO_PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)


def _list_of(convert: Convert) -> Convert:
    def as_list(value: list[Any]) -> list[Any]:
        return [None if v is None else convert(v) for v in value]

    return as_list
