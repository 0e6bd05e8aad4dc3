"""Kafka's ``--format avro``: Debezium's records (Kafka Connect's ``{"schema", "payload"}``,
from the shaper) in Confluent's wire format, as Debezium with Confluent's ``AvroConverter``
writes them: the Connect schema converted as ``AvroData`` does
(``schemas/connect_avro.py``), registered under ``{topic}-key`` and ``{topic}-value``
(TopicNameStrategy) in the registry at ``--schema-registry``, and each message framed with
the id the registry gave (magic byte 0, 4-byte id, Avro binary)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.errors import RegistryUnavailable
from sluice.registry import RegistryClient
from sluice.schemas.connect_avro import ConnectAvro
from sluice.sink.target import Change, TargetUnavailable


class AvroRecords:
    def __init__(self, registry_url: str, timeout_s: float) -> None:
        self.registry = RegistryClient(registry_url, timeout_s)
        # per Connect schema object (a table version's, made once by its formatter): the
        # codec holds the schema, so its id() is never reused while the entry lives
        self._codecs: dict[int, ConnectAvro] = {}
        self._ids: dict[tuple[str, int], int] = {}  # (subject, id(schema)) -> registry id
        self.registered = 0

    async def start(self) -> None:
        await self.registry.start()

    async def stop(self) -> None:
        await self.registry.stop()

    async def encode(self, changes: Sequence[Change]) -> tuple[Change, ...]:
        """The changes with ``body``/``key_body`` framed Avro (a registry that cannot be
        reached is ``TargetUnavailable``: retried; one that refuses a schema stops the sink)."""
        out = []
        try:
            for change in changes:
                if change.record is None:
                    out.append(change)
                    continue
                key, value = change.record
                key_bytes = None if key is None else await self._frame(change.route + "-key", key)
                value_bytes = await self._frame(change.route + "-value", value)
                out.append(change._replace(body=value_bytes, key_body=key_bytes, record=None))
        except RegistryUnavailable as exc:
            raise TargetUnavailable(str(exc)) from None
        return tuple(out)

    async def _frame(self, subject: str, record: dict[str, Any]) -> bytes:
        schema = record["schema"]
        codec = self._codecs.get(id(schema))
        if codec is None:
            codec = self._codecs[id(schema)] = ConnectAvro(schema)
        schema_id = self._ids.get((subject, id(schema)))
        if schema_id is None:
            schema_id = await self.registry.register(subject, codec.avro_schema)
            self._ids[(subject, id(schema))] = schema_id
            self.registered += 1
        return codec.frame(schema_id, record["payload"])
