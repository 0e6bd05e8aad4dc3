"""Reading what a Kafka sink wrote: every committed message of some topics."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    key: Any  # parsed JSON (None: a null key)
    value: Any  # parsed JSON (None: a tombstone)
    raw_key: bytes | None
    headers: dict[str, str]


def read_topics(bootstrap: str, topics: list[str], timeout: float = 60) -> dict[str, list[Record]]:
    """Every committed message of ``topics`` (``read_committed``), in offset order per
    partition, partitions in order."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"t{uuid.uuid4().hex}",
        "isolation.level": "read_committed", "enable.partition.eof": True,
        "enable.auto.commit": False,
    })  # fmt: skip
    try:
        assignment = []
        for topic in topics:
            metadata = consumer.list_topics(topic, timeout=30).topics[topic]
            assert metadata.error is None, metadata.error
            assignment += [TopicPartition(topic, p, -2) for p in sorted(metadata.partitions)]
        consumer.assign(assignment)
        ended: set[tuple[str, int]] = set()
        out: dict[str, list[Record]] = defaultdict(list)
        deadline = time.monotonic() + timeout
        while len(ended) < len(assignment):
            assert time.monotonic() < deadline, "the topics were not read to their end"
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                ended.add((str(message.topic()), message.partition() or 0))
                continue
            key, value = message.key(), message.value()
            out[str(message.topic())].append(
                Record(
                    str(message.topic()), message.partition() or 0,
                    None if key is None else json.loads(key),
                    None if value is None else json.loads(value), key,
                    _headers(message.headers()),
                )
            )  # fmt: skip
        for records in out.values():
            records.sort(key=lambda r: r.partition)  # stable: offsets stay in order
        return dict(out)
    finally:
        consumer.close()


def _headers(headers: Any) -> dict[str, str]:
    return {str(k): bytes(v or b"").decode() for k, v in headers or []}
