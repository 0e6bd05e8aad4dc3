"""Message formats a sink sends, on a real Redis: Debezium bodies equal the relay's
``format=debezium`` events, Avro bodies are the relay's payloads (decoded with the relay's own
schema by fastavro), and excluded columns are gone from JSON bodies."""

from __future__ import annotations

import io
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import fastavro
import pymysql
import pytest
import redis

from sluice.testing import PrivateMariaDB
from sluice.testing.brokers import PrivateRedis
from sluice.testing.relays import RelayThread
from tests.integration.sink_support import SOURCE_TABLES, relay_events, workload
from tests.integration.support import (
    create_database,
    get_json,
    relay_config,
    run_sluice,
    wait_relay_caught_up,
)

_ids = itertools.count(1)


def _entries(url: str) -> list[dict[bytes, bytes]]:
    """Every entry of every stream, streams by name, entries in order."""
    client: Any = redis.Redis.from_url(url)
    try:
        return [fields for key in sorted(client.scan_iter()) for _, fields in client.xrange(key)]
    finally:
        client.close()


@pytest.fixture
def shop(mariadb: PrivateMariaDB) -> tuple[str, pymysql.Connection[Any]]:
    name = f"shop_fmt_{next(_ids)}"
    return name, create_database(mariadb, name, *SOURCE_TABLES)


def _sink(redis_url: str, relay_url: str, tmp: Path, *args: str) -> str:
    """Runs the sink until it caught up; its log (stderr)."""
    result = run_sluice(
        "sink", "--to", redis_url, "--relay", relay_url, "--checkpoint-dir", str(tmp / "ckpt"),
        "--port", "0", "--until-caught-up", *args, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stderr


@pytest.mark.parametrize("fmt", ["debezium", "avro", "json-columns"])
def test_formats(
    fmt: str,
    mariadb: PrivateMariaDB,
    redis_server: PrivateRedis,
    shop: tuple[str, pymysql.Connection[Any]],
    tmp_path: Path,
) -> None:
    db, conn = shop
    url = redis_server.url.rsplit("/", 1)[0] + f"/{next(_ids) % 15 + 1}"
    redis.Redis.from_url(url).flushdb()
    sources = [f"{db}.orders", f"{db}.items"]
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        workload(conn, 60)
        wait_relay_caught_up(relay.url, conn)
        route = ["--route", "all"]  # one stream: the relay's order across tables
        if fmt == "debezium":
            said = _sink(url, relay.url, tmp_path, *route, "--format", "debezium")
            # the workload's TRUNCATE is skipped, as Debezium's default does, and said
            assert "TRUNCATE events are not sent (skipped.operations" in said
            tail = subprocess.run(
                [sys.executable, "-m", "sluice.cli.main", "tail", "--relay", relay.url,
                 "--format", "debezium", "--until-caught-up"],
                capture_output=True, text=True, check=True, timeout=120,
            )  # fmt: skip
            expected = [json.loads(line) for line in tail.stdout.splitlines()]
            got = [json.loads(f[b"value"]) for f in _entries(url)]
            assert got == expected and got
        elif fmt == "avro":
            _sink(url, relay.url, tmp_path, *route, "--format", "avro")
            events = relay_events(relay.url)
            entries = _entries(url)
            assert len(entries) == len(events)
            for fields, event in zip(entries, events, strict=True):
                assert fields[b"op"].decode() == event["op"]
                if event["op"] == "t":
                    assert fields[b"value"] == b""
                    continue
                source, version = fields[b"source"].decode(), event["schema_version"]
                schema = _envelope_schema(relay.url, source, version)
                record = fastavro.schemaless_reader(io.BytesIO(fields[b"value"]), schema)
                assert (record["after"] or record["before"]) is not None
                row = record["after"] or record["before"]
                image = event["after"] or event["before"]
                assert row["id" if "id" in image else "order_id"] == (
                    image["id"] if "id" in image else image["order_id"]
                )
        else:
            _sink(url, relay.url, tmp_path, *route, "--exclude-column", f"{db}.orders.note",
                  "--exclude-column", f"{db}.items.sku")  # fmt: skip
            events = relay_events(relay.url)
            got = [json.loads(f[b"value"]) for f in _entries(url)]
            for event in events:
                for image in (event["before"], event["after"]):
                    if image is not None:
                        image.pop("note", None)
                        image.pop("sku", None)
            assert got == events and got


def _envelope_schema(relay_url: str, source: str, version: int) -> Any:
    """The Avro schema of a payload, from the relay's ``/schemas``: ``{before, after}``."""
    versions = get_json(f"{relay_url}/schemas/{source}")
    rows = versions["versions"] if isinstance(versions, dict) else versions
    row = next(r for r in rows if r.get("sluice.version") == version)
    envelope = {
        "type": "record",
        "name": "Envelope",
        "namespace": row["namespace"],
        "fields": [
            {"name": "before", "type": ["null", row]},
            {"name": "after", "type": ["null", "Row"]},
        ],
    }
    return fastavro.parse_schema(envelope)
