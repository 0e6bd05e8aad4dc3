"""Differential: the same rows captured through the binlog and seeded through ``seed`` give the
same payload bytes, key, key hash, schema version and JSON, on every type and key kind."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.bootstrap.seed.chunk import run_chunk
from sluice.bootstrap.seed.job import SeedConfig, SeedJob
from sluice.bootstrap.store import BootstrapStore
from sluice.capture.mysql.metadata import end_scn
from sluice.core import wire
from sluice.core.event import Event
from sluice.schemas import SchemaRegistry
from sluice.schemas.events import decode_window
from sluice.testing import PrivateMariaDB
from tests.integration.test_differential import _capture
from tests.integration.workload import ALL_TYPES_DDL, insert_all_types


def _seed_rows(
    mariadb: PrivateMariaDB,
    store_dir: Path,
    sources: tuple[str, ...],
    start: int,
    chunk_rows: int,
    where: str | None = None,
) -> tuple[SeedJob, dict[tuple[str, str], dict[str, Any]]]:
    """Seed ``sources`` without Spark (each chunk task run here) and read the chunk files."""
    BootstrapStore(str(store_dir)).create(start, sources)
    url = mariadb.url
    job = SeedJob(SeedConfig(url, sources, str(store_dir), chunk_rows, where=where))
    job.prepare()
    tasks = job.tasks()
    for task in tasks:
        run_chunk(task)
    assert len(job.tasks()) == 0
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for plan in job.plans:
        assert len(plan.ranges) > 1 or chunk_rows >= 1000
        for path in sorted((store_dir / "seeds" / plan.source).glob("gen=*/chunk-*.parquet")):
            for row in pq.read_table(path).to_pylist():
                assert (row["source"], row["key"]) not in rows, "a row in two chunks"
                rows[(row["source"], row["key"])] = row
    return job, rows


def _captured(
    mariadb: PrivateMariaDB, sources: tuple[str, ...], start: int, stop: int
) -> tuple[dict[tuple[str, str], tuple[wire.RawEvent, Event]], SchemaRegistry]:
    windows, registry = _capture(mariadb, sources, start, stop)
    out = {}
    for w in windows:
        record = wire.encode_window(w.scn, 0, w.ts_ms, w.events)
        raws = list(wire.decode_events(record))
        for raw, event in zip(raws, decode_window(record, registry.codec).events, strict=True):
            key, _b, _a = registry.codec(raw.source, raw.schema_version).decode_text(
                raw.payload, True
            )
            out[(raw.source, key)] = (raw, event)
    return out, registry


def captured_all_types(
    mariadb: PrivateMariaDB, database: str, seed: int, count: int
) -> tuple[dict[tuple[str, str], tuple[wire.RawEvent, Event]], SchemaRegistry, int]:
    """``alltypes`` made in ``database`` and ``count`` random rows inserted, captured from
    the binlog: the events by (source, key), their schemas, and the SCN before the inserts."""
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(ALL_TYPES_DDL)
    start = end_scn(conn)
    with conn.cursor() as cur:
        insert_all_types(cur, seed, count)
    stop = end_scn(conn)
    conn.close()
    captured, registry = _captured(mariadb, (f"{database}.alltypes",), start, stop)
    return captured, registry, start


def _assert_same(
    seeded: dict[tuple[str, str], dict[str, Any]],
    captured: dict[tuple[str, str], tuple[wire.RawEvent, Event]],
    registry: SchemaRegistry,
) -> None:
    assert set(seeded) == set(captured)
    for ident, row in seeded.items():
        raw, event = captured[ident]
        assert raw.op == "c"
        codec = registry.codec(raw.source, raw.schema_version)
        if row["payload"] != raw.payload:  # name the column that differs
            assert codec.decode(row["payload"]) == codec.decode(raw.payload), ident
        assert row["payload"] == raw.payload, ident
        assert row["key_hash"] == raw.key_hash, ident
        assert row["schema_version"] == raw.schema_version
        key, before, after = codec.decode_event(row["payload"])
        assert (key, before, after) == (event.key, event.before, event.after)


def test_seeded_rows_of_every_type_are_byte_identical_to_captured_ones(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    source = f"{database}.alltypes"
    captured, registry, start = captured_all_types(mariadb, database, 5, 240)
    job, seeded = _seed_rows(mariadb, tmp_path / "store", (source,), start, 50)
    assert job.schemas[source].same_shape(registry.versions(source)[-1])
    assert len(seeded) == 240
    _assert_same(seeded, captured, registry)


def test_composite_and_text_keys_seed_in_ranges_identical_to_capture(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    """Composite keys of text (case-insensitive collation), DATETIME(6), DECIMAL, BINARY and
    unsigned BIGINT are cut by ``ORDER BY ... LIMIT`` seeks; no row is lost or doubled."""
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE keyed (name VARCHAR(20), at DATETIME(6), amount DECIMAL(8,2), "
            "v INT, PRIMARY KEY (name, at, amount)) ENGINE=InnoDB"
        )
        cur.execute(
            "CREATE TABLE bkeyed (b BINARY(4), n BIGINT UNSIGNED, t TIME(3), v INT, "
            "PRIMARY KEY (b, n, t)) ENGINE=InnoDB"
        )
    start = end_scn(conn)
    with conn.cursor() as cur:
        for i in range(300):
            at = dt.datetime(1960 + i % 60, 1 + i % 12, 1 + i % 28, i % 24, 0, 0, i * 1001)
            name = ("Né-" if i % 2 else "né-") + str(i % 13)
            cur.execute(
                "INSERT INTO keyed VALUES (%s, %s, %s, %s)", (name, at, Decimal(i - 150) / 4, i)
            )
            cur.execute(
                "INSERT INTO bkeyed VALUES (%s, %s, %s, %s)",
                (bytes([i % 3, 0]), 2**64 - 1 - i % 5, dt.timedelta(seconds=-i, milliseconds=i), i),
            )
    stop = end_scn(conn)
    conn.close()
    sources = (f"{database}.keyed", f"{database}.bkeyed")
    captured, registry = _captured(mariadb, sources, start, stop)
    _job, seeded = _seed_rows(mariadb, tmp_path / "store", sources, start, 17)
    assert len(seeded) == 600
    _assert_same(seeded, captured, registry)


@pytest.mark.parametrize(("chunk_rows", "spacing"), [(1, 1), (1, 1000), (1000, 1)])
def test_chunk_sizes_give_the_same_rows(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, chunk_rows: int, spacing: int
) -> None:
    """Dense keys are cut by arithmetic (9 ranges), sparse ones by seeks (9 ranges and the
    empty one past the last key); either way every row is read once."""
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE small (id INT PRIMARY KEY, v VARCHAR(5)) ENGINE=InnoDB")
        rows = [(n * spacing, str(n)) for n in range(9)]
        cur.executemany("INSERT INTO small VALUES (%s, %s)", rows)
        cur.execute("ANALYZE TABLE small")
        cur.fetchall()
    start = end_scn(conn)
    conn.close()
    job, seeded = _seed_rows(mariadb, tmp_path / "store", (f"{database}.small",), start, chunk_rows)
    assert sorted(json.loads(key)["id"] for _source, key in seeded) == [r[0] for r in rows]
    expected = 1 if chunk_rows > 9 else (9 if spacing == 1 else 10)
    assert len(job.plans[0].ranges) == expected


def test_where_seeds_only_matching_rows(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE part (id INT PRIMARY KEY, v VARCHAR(5)) ENGINE=InnoDB")
        cur.executemany("INSERT INTO part VALUES (%s, %s)", [(n, f"{n}%") for n in range(20)])
    start = end_scn(conn)
    conn.close()
    _job, seeded = _seed_rows(
        mariadb, tmp_path / "store", (f"{database}.part",), start, 3, where="v LIKE '1%'"
    )
    assert sorted(json.loads(key)["id"] for _source, key in seeded) == [1, *range(10, 20)]
