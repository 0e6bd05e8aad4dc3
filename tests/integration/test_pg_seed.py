"""Seeding PostgreSQL: rows read in one exported snapshot are byte-identical to captured ones,
a live seed beside a writer folds to the source's exact state, and bad input is one line."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.bootstrap.job import BootstrapJob, JobConfig
from sluice.bootstrap.seed.chunk import run_chunk
from sluice.bootstrap.seed.job import SeedConfig, SeedJob
from sluice.bootstrap.server import BootstrapServer
from sluice.bootstrap.store import BootstrapStore
from sluice.capture import CapturedWindow
from sluice.capture.source import CaptureSettings, open_capture
from sluice.client import Client, ClientConfig
from sluice.core import wire
from sluice.errors import ConfigError
from sluice.relay import RelayConfig
from sluice.schemas import SchemaRegistry
from sluice.testing import RelayThread, ReplicaConsumer, ServiceThread
from sluice.testing.postgres import PrivatePostgres
from tests.integration.support import get_json, run_sluice, wait_for

TYPED = (
    "CREATE TABLE typed (k text, id bigint, s smallint, n numeric(10,2), nn numeric, r real, "
    "d double precision, b boolean, t text, c char(3), by bytea, dt date, tm time, "
    "ts timestamp, tz timestamptz, j json, jb jsonb, u uuid, iv interval, ip inet, "
    "ai int[], at text[], PRIMARY KEY (k, id))"
)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _typed_row(rng: random.Random, i: int) -> str:
    """One row of ``typed`` as SQL, about a fifth of its values NULL."""
    key = rng.choice(["a", "ä b", "Z", "", "x'y", "%s"]) + str(i % 7)
    values = [
        str(rng.randint(-32768, 32767)),
        f"{rng.uniform(-1e6, 1e6):.2f}",
        rng.choice(["'NaN'", "1e-20", "123456789012345678901234567890.5"]),
        repr(rng.uniform(-10, 10)),
        rng.choice(["0.1", "'-0.0'", "'Infinity'"]),
        rng.choice(["true", "false"]),
        _lit("t" * rng.randint(0, 30)),
        _lit("ab"),
        _lit("\\x00ff" + f"{i % 256:02x}"),
        rng.choice(["'2024-02-29'", "'infinity'", "'0001-01-01'"]),
        _lit(f"{i % 24:02d}:30:00.{i:06d}"),
        rng.choice([_lit(f"2001-02-03 04:05:06.{i % 999999:06d}"), "'-infinity'"]),
        rng.choice([_lit("2024-01-02 03:04:05+05:30"), "'infinity'", "'-infinity'"]),
        _lit('{"a": [1, null]}'),
        _lit('{"b": 2}'),
        "gen_random_uuid()",
        _lit(f"{i} days 02:00:00"),
        _lit("10.1.2.3"),
        _lit("{1,NULL,3}"),
        _lit('{"a, b",NULL}'),
    ]
    shown = ["NULL" if rng.random() < 0.2 else v for v in values]
    return f"({_lit(key)}, {i * 7919 - 10**6}, {', '.join(shown)})"


def _capture_inserts(
    pg: PrivatePostgres, db: str, source: str, statements: list[str], count: int
) -> tuple[dict[str, wire.RawEvent], SchemaRegistry]:
    """Capture ``statements`` (``count`` inserted rows): key text -> the raw insert event."""
    registry, windows = SchemaRegistry(), []
    events: dict[str, wire.RawEvent] = {}
    lock = threading.Lock()

    def sink(window: CapturedWindow) -> None:
        with lock:
            windows.append(window)

    settings = CaptureSettings((source,), registry, sink)
    capture = open_capture(pg.source_url(db, slot="difftest"), settings)
    capture.start(None)
    try:
        conn = pg.connect(db)
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
        conn.close()

        def decoded() -> int:
            with lock:
                for w in windows:
                    record = wire.encode_window(w.scn, 0, w.ts_ms, w.events)
                    for raw in wire.decode_events(record):
                        codec = registry.codec(raw.source, raw.schema_version)
                        events[codec.decode_text(raw.payload, True)[0]] = raw
                windows.clear()
            return len(events)

        wait_for(lambda: decoded() >= count, 60, f"{count} captured inserts")
    finally:
        capture.stop()
    return events, registry


def _seed_in_process(
    url: str, store_dir: Path, sources: tuple[str, ...], chunk_rows: int
) -> tuple[SeedJob, dict[str, dict[str, Any]]]:
    """Seed without Spark (each chunk task run here): key text -> the seeded row."""
    BootstrapStore(str(store_dir)).create(0, sources)
    job = SeedJob(SeedConfig(url, sources, str(store_dir), chunk_rows))
    job.prepare()
    try:
        for task in job.tasks():
            run_chunk(task)
    finally:
        job.close()
    rows: dict[str, dict[str, Any]] = {}
    for path in sorted(store_dir.glob("seeds/*/gen=*/chunk-*.parquet")):
        for row in pq.read_table(path).to_pylist():
            assert row["key"] not in rows, "a row in two chunks"
            rows[row["key"]] = row
    return job, rows


def test_seeded_rows_of_every_type_are_byte_identical_to_captured_ones(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute(TYPED)
    conn.close()
    rng = random.Random(7)
    inserts = [f"INSERT INTO typed VALUES {_typed_row(rng, i)}" for i in range(300)]
    captured, registry = _capture_inserts(postgres, pg_database, "public.typed", inserts, 300)
    url = postgres.source_url(pg_database, slot=f"s_{pg_database}")
    job, seeded = _seed_in_process(url, tmp_path / "store", ("public.typed",), 37)
    assert len(job.plans[0].ranges) >= 8  # a composite text key cut into ranges
    assert job.schemas["public.typed"].same_shape(registry.versions("public.typed")[-1])
    assert set(seeded) == set(captured)
    scns = {row["scn"] for row in seeded.values()}
    assert len(scns) == 1  # every chunk in the one exported snapshot
    for key, row in seeded.items():
        raw = captured[key]
        assert raw.op == "c"
        assert row["payload"] == raw.payload, key
        assert row["key_hash"] == raw.key_hash, key
        assert row["schema_version"] == raw.schema_version
    check = postgres.connect(pg_database)
    with check.cursor() as cur:  # the temporary slot went with the driver's connection
        cur.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'sluice_seed%'")
        assert cur.fetchone()[0] == 0
    check.close()


class _Writer(threading.Thread):
    """Updates, deletes, inserts and key changes until stopped."""

    def __init__(self, conn: Any) -> None:
        super().__init__(daemon=True)
        self.conn, self.rng = conn, random.Random(5)
        self.stop_event = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self._transaction()
                self.transactions += 1
        except BaseException as exc:
            self.error = exc

    def _transaction(self) -> None:
        rng = self.rng
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 4)):
                num = rng.randrange(20_000)
                action = rng.choice(("update", "delete", "insert", "move"))
                if action == "update":
                    cur.execute(
                        "UPDATE orders SET qty = qty + 1, note = NULL, amount = amount * 2 "
                        "WHERE num = %s",
                        (num,),
                    )
                elif action == "delete":
                    cur.execute("DELETE FROM orders WHERE num = %s", (num,))
                elif action == "insert":
                    cur.execute(
                        "INSERT INTO orders VALUES ('new', %s, 1, 'n', 1.5) ON CONFLICT DO NOTHING",
                        (rng.randrange(10**6),),
                    )
                else:  # a primary key change, possibly into another chunk
                    cur.execute(
                        "UPDATE orders SET region = 'moved', num = num + %s WHERE num = %s "
                        "AND region IN ('eu', 'us', 'ap') "
                        "AND NOT EXISTS (SELECT 1 FROM orders WHERE region = 'moved' AND "
                        "num = %s)",
                        (10**6, num, num + 10**6),
                    )
            cur.execute("COMMIT")


def _truth(conn: Any) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute("SELECT region, num, qty, note, amount::text FROM orders")
        return sorted(cur.fetchall(), key=repr)


def test_a_live_seed_beside_a_writer_folds_to_the_exact_table(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path, spark: Any
) -> None:
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE orders (region text, num bigint, qty int, note text, "
            "amount numeric(14,2), PRIMARY KEY (region, num))"
        )
        cur.execute(
            "INSERT INTO orders SELECT (ARRAY['eu','us','ap'])[1 + g % 3], g, g % 500, "
            "CASE WHEN g % 5 = 0 THEN NULL ELSE 'item-' || g END, g / 7.0 "
            "FROM generate_series(1, 20000) g"
        )
    url = postgres.source_url(pg_database, slot=f"s_{pg_database}")
    store = str(tmp_path / "store")
    config = RelayConfig(source=url, tables=["public.orders"], data_dir=tmp_path / "r", port=0)
    with RelayThread(config) as relay:
        writer = _Writer(postgres.connect(pg_database))
        writer.start()
        job = JobConfig(
            (relay.url,), ("public.orders",), store, once=True, seed=url, seed_chunk_rows=3000
        )
        BootstrapJob(job, spark).run()  # the stream in place, then the seed, while writing
        writer.stop_event.set()
        writer.join(30)
        assert writer.error is None and writer.transactions > 5
        target = _lsn(conn)
        wait_for(
            lambda: (
                max(
                    get_json(relay.url + "/stats")["capture"][k]
                    for k in ("last_scn", "source_end_scn")
                )
                >= target
            ),
            60,
            "capture to reach the writer's last commit",
        )
        BootstrapJob(job, spark).run()  # the rest of the log, folded
        with ServiceThread(BootstrapServer(store, port=0)) as server:
            seeded = get_json(server.url + "/stats")["tables"]["public.orders"]["seeded"]
            assert seeded["chunks"] >= 6 and seeded["min_scn"] == seeded["max_scn"]
            replica = ReplicaConsumer()
            client = ClientConfig(relays=(relay.url,), since_scn=0, bootstrap=server.url)
            Client(client, replica).run(until_caught_up=True)
    rows = replica.snapshot("public.orders").values()
    mine = sorted(
        ((r["region"], r["num"], r["qty"], r["note"], r["amount"]) for r in rows), key=repr
    )
    assert len(mine) > 19_000
    assert mine == _truth(conn)
    conn.close()


def _lsn(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
        return int(cur.fetchone()[0])


def test_what_cannot_be_seeded_is_one_clear_line(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE keyless (v int)")
        cur.execute("CREATE TABLE secret (id int PRIMARY KEY)")
        cur.execute("CREATE ROLE reader LOGIN")  # no REPLICATION, no SELECT on secret
        cur.execute("GRANT USAGE ON SCHEMA public TO reader")
    conn.close()
    store = tmp_path / "store"
    BootstrapStore(str(store)).create(0, ("public.keyless", "public.secret"))
    url = postgres.source_url(pg_database, slot=f"s_{pg_database}")
    with pytest.raises(ConfigError, match=r"public.keyless has no primary key.*ADD PRIMARY KEY"):
        SeedJob(SeedConfig(url, ("public.keyless",), str(store))).prepare()
    reader = url.replace("postgres@", "reader@")
    with pytest.raises(ConfigError, match=r"may not read public.secret: GRANT SELECT"):
        SeedJob(SeedConfig(reader, ("public.secret",), str(store))).prepare()
    admin = postgres.connect(pg_database)
    with admin.cursor() as cur:
        cur.execute("GRANT SELECT ON secret TO reader")
    admin.close()
    result = run_sluice(
        "bootstrap", "seed", "--source", reader, "--table", "public.secret", "--store", str(store)
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "ALTER ROLE reader REPLICATION" in lines[0], result.stderr
