"""Table schemas as Avro, and the codec of event payloads (before and after images)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.core.names import split_source
from sluice.errors import SchemaError
from sluice.schemas.columns import KIND, Column, avro_name
from sluice.schemas.decoder import envelope_text, envelope_values, key_text, row_end
from sluice.schemas.encoder import envelope_encoder

NAMESPACE = "sluice"


@dataclass(frozen=True, slots=True)
class TableSchema:
    """The columns of a source at one schema version, with its primary key."""

    source: str
    version: int
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]

    def fingerprint(self) -> str:
        """A digest of the schema's Avro form: a schema file altered on disk shows."""
        text = json.dumps(self.to_avro(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def same_shape(self, other: TableSchema) -> bool:
        return self.columns == other.columns and self.primary_key == other.primary_key

    def to_avro(self) -> dict[str, Any]:
        taken: set[str] = set()
        fields = []
        for col in self.columns:
            entry: dict[str, Any] = {
                "name": avro_name(col.name, taken),
                "type": col.avro_type(),
                "sluice.column": col.name,
                "sluice.kind": col.kind,
                "sluice.source_type": col.source_type,
                "sluice.nullable": col.nullable,
            }
            if col.kind == "decimal":
                entry["sluice.precision"] = col.precision
                entry["sluice.scale"] = col.scale
            if col.source_nullable is not None:
                entry["sluice.source_nullable"] = col.source_nullable
            if col.default is not None:
                entry["sluice.default"] = col.default
            fields.append(entry)
        return {
            "type": "record",
            "name": "Row",
            "namespace": f"{NAMESPACE}.{_ns(self.source)}.v{self.version}",
            "fields": fields,
            "sluice.source": self.source,
            "sluice.version": self.version,
            "sluice.primary_key": list(self.primary_key),
        }

    @classmethod
    def from_avro(cls, schema: dict[str, Any]) -> TableSchema:
        try:
            columns = tuple(
                Column(
                    name=f["sluice.column"],
                    kind=f["sluice.kind"],
                    nullable=bool(f["sluice.nullable"]),
                    # "sluice.mysql_type": schemas written before PostgreSQL joined
                    source_type=f.get("sluice.source_type", f.get("sluice.mysql_type", "")),
                    precision=f.get("sluice.precision", 0),
                    scale=f.get("sluice.scale", 0),
                    source_nullable=f.get("sluice.source_nullable"),
                    default=f.get("sluice.default"),
                )
                for f in schema["fields"]
            )
            return cls(
                schema["sluice.source"],
                int(schema["sluice.version"]),
                columns,
                tuple(schema["sluice.primary_key"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SchemaError(f"not a Sluice table schema: missing {exc}") from None


def _ns(source: str) -> str:
    return ".".join(avro_name(part, set()) for part in split_source(source))


def key_formatter(kind: str) -> Callable[[Any], str]:
    """A key column's canonical JSON text from its canonical value; None (a zero DATE or
    DATETIME in a key, which the JSON mapping makes null) is ``null``."""
    spec = KIND[kind]
    if spec.wire == "long" and spec.json == "number":
        return lambda v: "null" if v is None else str(v)
    if spec.json == "bool":
        return lambda v: "null" if v is None else ("true" if v else "false")
    if spec.json == "string":
        return lambda v: json.dumps(v, ensure_ascii=False)
    convert = spec.canonical_json()
    return lambda v: (
        "null"
        if v is None
        else json.dumps(convert(v), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    )


@dataclass(slots=True)
class RowCodec:
    """Encodes and decodes the payload of one schema version: ``{before, after}``."""

    schema: TableSchema
    _key_text: list[tuple[int, str, Callable[[Any], str]]] = field(init=False)
    _encode: Callable[[Sequence[Any] | None, Sequence[Any] | None], bytes] = field(init=False)
    _text: dict[bool, Callable[[bytes], tuple[str, str, str]]] = field(
        init=False, default_factory=dict
    )
    _values: Callable[[bytes], tuple[Any, Any, Any]] = field(init=False)
    _row_end: Callable[[bytes, int], int] | None = field(init=False, default=None)
    _key_only: Callable[[bytes], str] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        index = {col.name: i for i, col in enumerate(self.schema.columns)}
        self._key_text = [
            (
                index[name],
                json.dumps(name, ensure_ascii=False) + ":",
                key_formatter(self.schema.columns[index[name]].kind),
            )
            for name in sorted(self.schema.primary_key)
        ]
        self._encode = envelope_encoder(self.schema.columns)
        self._values = envelope_values(self.schema.columns, self.schema.primary_key)

    def envelope_schema(self) -> dict[str, Any]:
        """The Avro schema of a payload, ``{before, after}``: what any Avro reader needs."""
        row = self.schema.to_avro()
        return {
            "type": "record",
            "name": "Envelope",
            "namespace": row["namespace"],
            "fields": [
                {"name": "before", "type": ["null", row]},
                {"name": "after", "type": ["null", "Row"]},
            ],
        }

    def encode(self, before: Sequence[Any] | None, after: Sequence[Any] | None) -> bytes:
        """Encode canonical row values (in column order) as Avro binary."""
        return self._encode(before, after)

    def key_text(self, row: Sequence[Any]) -> str | None:
        """The key's canonical JSON (sorted, compact), straight from canonical values."""
        if not self._key_text:
            return None
        return "{" + ",".join(prefix + fmt(row[i]) for i, prefix, fmt in self._key_text) + "}"

    def decode(self, payload: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Decode a payload into JSON-mapped ``(before, after)`` rows."""
        _, before, after = self._values(payload)
        return before, after

    def decode_event(
        self, payload: bytes
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None]:
        """``(key, before, after)``, JSON-mapped; the key of the after image, else the before."""
        return self._values(payload)

    def decode_text(self, payload: bytes, canonical_key: bool = False) -> tuple[str, str, str]:
        """``(key, before, after)`` of a payload as JSON text, without Python values; the key
        as in ``Event.to_json_dict()``, or canonical (sorted, compact) with ``canonical_key``."""
        decode = self._text.get(canonical_key)
        if decode is None:
            columns, key = self.schema.columns, self.schema.primary_key
            decode = self._text[canonical_key] = envelope_text(columns, key, canonical_key)
        return decode(payload)

    def payload_key(self, payload: bytes) -> str:
        """The canonical key text of a payload (as ``decode_text(..., True)[0]``), reading
        only what leads to the key columns."""
        return self.key_reader()(payload)

    def key_reader(self) -> Callable[[bytes], str]:
        """``payload_key`` as a plain function (one call less per event in hot loops)."""
        if self._key_only is None:
            self._key_only = key_text(self.schema.columns, self.schema.primary_key)
        return self._key_only

    def snapshot_payload(self, payload: bytes) -> bytes:
        """The payload of an ``r`` event: the after image of ``payload``, no before image.
        Bytes are sliced, not decoded: only the before image's lengths are read."""
        if self._row_end is None:
            self._row_end = row_end(self.schema.columns)
        end = self._row_end(payload, 1) if payload[0] else 1
        if payload[end]:  # an after image: keep it as is
            return b"\x00" + payload[end:]
        return b"\x00\x02" + payload[1:end]  # a delete: its before image becomes the row
