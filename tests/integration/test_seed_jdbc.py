"""The seed's fast path: Spark's own JDBC source reads chunks in consistent snapshots and whole
Arrow batches are encoded. Its rows must be exactly the row path's and capture's: the same
bytes for every kind it takes (edge values included), each chunk equal to the table at the
SCN it is stamped with while writers run, and chunks it cannot finish left to the row path.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.bootstrap.seed.job import SeedConfig, SeedJob, SeedReport
from sluice.bootstrap.seed.records import SeedRecords
from sluice.bootstrap.server import BootstrapServer
from sluice.bootstrap.store import BootstrapStore
from sluice.capture.mysql.metadata import end_scn
from sluice.capture.seeding import KeyRange
from sluice.errors import ConfigError
from sluice.schemas import SchemaRegistry
from sluice.testing import PrivateMariaDB
from tests.integration.test_differential import _capture
from tests.integration.test_seed_differential import _assert_same, _captured

FAST_DDL = (
    "CREATE TABLE fast (id BIGINT PRIMARY KEY, ti TINYINT, bo BOOLEAN, sm SMALLINT, "
    "me MEDIUMINT UNSIGNED, iu INT UNSIGNED, bi BIGINT, n DECIMAL(18,4), n0 DECIMAL(5,0), "
    "d DOUBLE, dt DATE, dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP(3) NULL, "
    "c CHAR(5), vc VARCHAR(30), l1 VARCHAR(10) CHARACTER SET latin1, t TEXT, "
    "e ENUM('sad','ok','happy'), j JSON, bn BINARY(4), vb VARBINARY(8), bl BLOB, "
    "u UUID, ip INET6) ENGINE=InnoDB"
)
EDGES = [
    "(1, -128, 2, -32768, 16777215, 4294967295, -9223372036854775808, -99999999999999.9999, "
    "-99999, -0.0, '0000-00-00', '0000-00-00 00:00:00', '1969-12-31 23:59:59.999999', "
    "'1970-01-01 00:00:01.001', 'ab', 'né 🐍', 'é', '', 'sad', '{\"a\": [1, 2]}', x'01', x'', "
    "x'00ff', '123e4567-e89b-12d3-a456-426614174000', '::1')",
    "(2, 127, 0, 32767, 0, 0, 9223372036854775807, 99999999999999.9999, 99999, "
    "1.7976931348623157e308, '2024-00-10', '2024-02-00 10:00:00', "
    "'9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999', "
    "'', 'tab\\there \"q\" \\\\', 'ÿ', REPEAT('x', 3000), 'happy', '[]', x'00000000', "
    "x'ffffffffffffffff', '', '00000000-0000-0000-0000-000000000000', '192.0.2.1')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(4, 0, 1, 0, 1, 1, 0, 0.0001, 0, 2.5e-308, '1000-01-01', '1000-01-01 00:00:00', "
    "'0001-01-01 00:00:00.000001', NULL, 'abcde', '', '', 'x', 'ok', 'null', x'7f', x'80', NULL, "
    "NULL, 'fe80::1')",
]


def _insert_fast(cur: Any, seed: int, count: int, first: int = 10) -> None:
    rng = random.Random(seed)
    for i in range(first, first + count):
        cur.execute(
            "INSERT INTO fast (id, ti, bi, n, d, dt, dtm6, ts, vc, e, bn, u) VALUES "
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, UUID())",
            (
                i * 3,
                rng.randint(-128, 127),
                rng.randint(-(1 << 63), (1 << 63) - 1),
                f"{rng.randint(-(10**13), 10**13)}.{rng.randint(0, 9999):04d}",
                rng.uniform(-1e9, 1e9),
                f"{rng.randint(1000, 9999)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                f"{rng.randint(1000, 9999)}-01-02 03:04:05.{rng.randint(0, 999999):06d}",
                f"20{rng.randint(10, 37)}-05-06 07:08:09.{rng.randint(0, 999):03d}",
                "".join(rng.choice('aé🐍"\\ z') for _ in range(rng.randint(0, 20))),
                rng.choice(["sad", "ok", "happy", None]),
                bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 4))),
            ),
        )


def _make_fast(mariadb: PrivateMariaDB, database: str, rows: int) -> int:
    """``fast`` with the edge rows and ``rows`` random ones, made after the returned SCN."""
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SET sql_mode = ''")  # zero dates and zero date parts are allowed
        cur.execute(FAST_DDL)
        start = end_scn(conn)
        for values in EDGES:
            cur.execute(f"INSERT INTO fast VALUES {values}")
        _insert_fast(cur, 3, rows)
    conn.close()
    return start


def _seed(
    mariadb: PrivateMariaDB, spark: Any, store_dir: Path, source: str, start: int, chunk: int
) -> tuple[SeedJob, SeedReport]:
    BootstrapStore(str(store_dir)).create(start, (source,))
    job = SeedJob(SeedConfig(mariadb.url, (source,), str(store_dir), chunk))
    job.prepare()
    assert source in job.jdbc, "the table should take the JDBC path"
    return job, job.run(spark)


def _chunk_rows(store_dir: Path, source: str) -> dict[tuple[str, str], dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((store_dir / "seeds" / source).glob("gen=*/chunk-*.parquet")):
        for row in pq.read_table(path).to_pylist():
            assert (row["source"], row["key"]) not in rows, "a row in two chunks"
            rows[(row["source"], row["key"])] = row
    return rows


def test_jdbc_seeded_rows_are_byte_identical_to_captured_ones(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    source = f"{database}.fast"
    start = _make_fast(mariadb, database, 300)
    conn = mariadb.connect(database)
    stop = end_scn(conn)
    conn.close()
    captured, registry = _captured(mariadb, (source,), start, stop)
    job, report = _seed(mariadb, spark, tmp_path / "store", source, start, 40)
    total = len(job.plans[0].ranges)
    assert total > 5
    assert report.jdbc_chunks == total, "every chunk through Spark's JDBC source"
    seeded = _chunk_rows(tmp_path / "store", source)
    assert len(seeded) == 304
    _assert_same(seeded, captured, registry)
    # Every chunk read at rest is stamped with the server's end: its snapshot's position.
    assert {d.scn for d in job.records.done(source, 1).values()} == {stop}


def test_an_empty_chunk_is_read_by_the_row_path(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Rows deleted between planning and reading: the chunk comes back empty, no row tells
    its snapshot's SCN, so the row path reads it (and stamps it)."""
    source = f"{database}.fast"
    start = _make_fast(mariadb, database, 100)
    store = tmp_path / "store"
    BootstrapStore(str(store)).create(start, (source,))
    job = SeedJob(SeedConfig(mariadb.url, (source,), str(store), 20))
    job.prepare()
    second = job.plans[0].ranges[1]
    assert second.lower is not None and second.upper is not None
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute(
            "DELETE FROM fast WHERE id > %s AND id <= %s", (second.lower[0], second.upper[0])
        )
    stop = end_scn(conn)
    conn.close()
    report = job.run(spark)
    assert report.jdbc_chunks == len(job.plans[0].ranges) - 1
    done = job.records.done(source, 1)
    assert done[1].rows == 0 and done[1].scn == stop
    assert len(_chunk_rows(store, source)) == 84


def _replay(
    windows: list[Any], registry: SchemaRegistry, source: str
) -> list[tuple[int, dict[str, bytes | None]]]:
    """After each window: its SCN and the change it made (key -> insert payload, or None)."""
    out = []
    for w in windows:
        changes: dict[str, bytes | None] = {}
        for raw in w.events:
            from sluice.core import wire

            event = next(iter(wire.decode_events(wire.encode_window(w.scn, 0, 0, [raw]))))
            codec = registry.codec(event.source, event.schema_version)
            key = codec.payload_key(event.payload)
            changes[key] = None if event.op == "d" else codec.snapshot_payload(event.payload)
        out.append((w.scn, changes))
    return out


def _in_range(key: str, bounds: KeyRange) -> bool:
    value = json.loads(key)["id"]
    lower = bounds.lower is None or value > bounds.lower[0]
    return lower and (bounds.upper is None or value <= bounds.upper[0])


def test_each_chunk_equals_the_table_at_its_scn_while_writers_run(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    source = f"{database}.fast"
    start = _make_fast(mariadb, database, 2000)
    stopping = threading.Event()

    def write() -> None:
        rng = random.Random(5)
        conn = mariadb.connect(database)
        with conn.cursor() as cur:
            n = 0
            while not stopping.is_set() or n < 50:
                n += 1
                key = rng.randrange(10, 2010) * 3
                if rng.random() < 0.2:
                    cur.execute("DELETE FROM fast WHERE id = %s", (key,))
                else:
                    cur.execute("UPDATE fast SET bi = %s WHERE id = %s", (n, key))
        conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        job, report = _seed(mariadb, spark, tmp_path / "store", source, start, 150)
    finally:
        stopping.set()
        writer.join()
    assert report.jdbc_chunks == len(job.plans[0].ranges)
    conn = mariadb.connect(database)
    stop = end_scn(conn)
    conn.close()
    windows, registry = _capture(mariadb, (source,), start, stop)
    history = _replay(windows, registry, source)
    seeded = _chunk_rows(tmp_path / "store", source)
    done = job.records.done(source, 1)
    assert len({d.scn for d in done.values()}) > 1, "the writer ran while chunks were read"
    for index, bounds in enumerate(job.plans[0].ranges):
        state: dict[str, bytes | None] = {}
        for scn, changes in history:
            if scn > done[index].scn:
                break
            state.update(changes)
        expected = {k: p for k, p in state.items() if p is not None and _in_range(k, bounds)}
        got = {k[1]: r["payload"] for k, r in seeded.items() if _in_range(k[1], bounds)}
        assert got == expected, f"chunk {index} differs from the table at its SCN"


@pytest.mark.parametrize("ddl", ["f FLOAT", "s SET('a','b')", "tm TIME", "n DECIMAL(20,2)"])
def test_tables_with_other_kinds_take_the_row_path(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, ddl: str
) -> None:
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE other (id INT PRIMARY KEY, {ddl})")
        cur.execute("INSERT INTO other (id) VALUES (1)")
        start = end_scn(conn)
    conn.close()
    BootstrapStore(str(tmp_path / "s")).create(start, (f"{database}.other",))
    job = SeedJob(SeedConfig(mariadb.url, (f"{database}.other",), str(tmp_path / "s"), 10))
    job.prepare()
    job.close()
    assert job.jdbc == {}


def _broken_fast_path(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, **changes: Any
) -> tuple[SeedJob, str, Path]:
    """A prepared seed of ``fast`` whose JDBC chunks are changed as given."""
    source = f"{database}.fast"
    start = _make_fast(mariadb, database, 50)
    store = tmp_path / "store"
    BootstrapStore(str(store)).create(start, (source,))
    job = SeedJob(SeedConfig(mariadb.url, (source,), str(store), 20))
    job.prepare()
    job.jdbc[source] = dataclasses.replace(job.jdbc[source], **changes)
    return job, source, store


def test_a_refused_login_on_the_fast_path_stops_the_seed(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """Spark's JDBC connections refused (here: a wrong password on them) is the account's
    problem, not the fast path's: the seed stops with what to fix, never a quiet 4x."""
    job, source, _store = _broken_fast_path(mariadb, database, tmp_path)
    chunks = job.jdbc[source]
    wrong = tuple((k, "wrong" if k == "password" else v) for k, v in chunks.properties)
    job.jdbc[source] = dataclasses.replace(chunks, properties=(*wrong, ("password", "wrong")))
    with pytest.raises(ConfigError) as caught:
        job.run(spark)
    message = str(caught.value)
    assert "refused Spark's JDBC connections" in message and "Access denied" in message
    assert "--no-jdbc" in message and "wrong" not in message  # no password in the message
    assert caught.value.source == source
    assert SeedRecords(BootstrapStore(job.config.store)).seeded(source) is None


def test_a_fast_path_the_server_rejects_falls_back_said_and_recorded(
    mariadb: PrivateMariaDB,
    database: str,
    tmp_path: Path,
    spark: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A query Spark's JDBC source cannot run (here: a table that is not there): the row
    path reads every chunk, and that is a WARNING saying why and what it costs, in the
    seed's record (the bootstrap server's /stats, /metrics) and in the report."""
    job, source, store = _broken_fast_path(
        mariadb, database, tmp_path, table=f"`{database}`.`no_such_table`"
    )
    with caplog.at_level(logging.WARNING):
        report = job.run(spark)
    assert report.jdbc_chunks == 0 and len(_chunk_rows(store, source)) == 54
    seeded = report.seeded[0]
    assert seeded.fallback_chunks == len(job.plans[0].ranges)
    assert seeded.fallback is not None and "no_such_table" in seeded.fallback
    assert SeedRecords(BootstrapStore(str(store))).seeded(source) == seeded
    assert any(
        r.levelno == logging.WARNING
        and "go through the row path (about 4x slower" in r.getMessage()
        and "no_such_table" in r.getMessage()
        for r in caplog.records
    )
    server = BootstrapServer(str(store), port=0)
    assert server._stats()["tables"][source]["seeded"]["fallback_chunks"] == seeded.chunks


def test_no_jdbc_reads_every_chunk_through_the_row_path(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    source = f"{database}.fast"
    start = _make_fast(mariadb, database, 5)
    store = tmp_path / "store"
    BootstrapStore(str(store)).create(start, (source,))
    job = SeedJob(SeedConfig(mariadb.url, (source,), str(store), 20, jdbc=False))
    job.prepare()
    job.close()
    assert job.jdbc == {}
