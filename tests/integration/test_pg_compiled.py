"""PostgreSQL capture's compiled transcoder (``capture/postgres/_runs.c``) on a real server:
the same WAL read by two slots, once with it and once with the Python paths
(``SLUICE_PURE_PYTHON=1``), gives the same windows byte for byte; and every run it takes is
also transcoded by the row path and must give the same events. Edge values of every kind it
reads, NULLs, composite keys with JSON escapes, key changes, REPLICA IDENTITY FULL, a table
without a key, runs it hands back (key changes), small and large transactions. Since issue 40
no table keeps the Python paths: real, time, timetz, bytea, interval, json, jsonb and arrays
of every mapped element type (``kinds``), keys of real, time, bytea and int[] (``odd_keys``)
and of jsonb (``json_key``) are all read by it, and their runs are never handed back."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from sluice.capture import CapturedWindow, CaptureSettings
from sluice.capture.postgres import capture as pg_capture
from sluice.capture.postgres import compiled, pending
from sluice.capture.postgres.capture import PostgresCapture
from sluice.capture.postgres.setup import parse_pg_url
from sluice.schemas import SchemaRegistry
from sluice.testing.postgres import PrivatePostgres

# Under CI a missing build fails (test_pg_compiled's test_the_transcoder_is_built and
# these), never skips.
pytestmark = pytest.mark.skipif(
    compiled.unavailable() != "" and os.environ.get("CI") != "true",
    reason=f"no compiled path: {compiled.unavailable()}",
)
TABLES = (
    "public.edge",
    "public.full_id",
    "public.loose",
    "public.timed",
    "public.kinds",
    "public.odd_keys",
    "public.json_key",
)
_ALL_BYTES = "'\\x" + bytes(range(256)).hex() + "'"
# issue 40: the kinds that kept the Python paths before, their edge values
KINDS = (
    "CREATE TABLE kinds (id int PRIMARY KEY, r real, tm time, t6 time(6), ttz timetz, by bytea, "
    "ai int[], a8 bigint[], a2 smallint[][], af float8[], ar real[], ab boolean[], at text[], "
    "an numeric[], ad date[], ats timestamp[], atz timestamptz[], atm time[], au uuid[], "
    "aj jsonb[], ajs json[], aby bytea[], avc varchar[], ach char(2)[], j json, jb jsonb, "
    "iv interval)",
    "CREATE TABLE odd_keys (r real, tm time, by bytea, ai int[], v text, "
    "PRIMARY KEY (r, tm, by, ai))",
    "CREATE TABLE json_key (jb jsonb PRIMARY KEY, v int)",
)
KIND_EDGES = [
    "(1, 'NaN', '24:00:00', '00:00:00', '24:00:00-15:59', '\\x', '{}', '{}', '{}', '{}', "
    "'{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', "
    "'{}', '{}', '0')",
    "(2, 'Infinity', '23:59:59.999999', '00:00:00.000001', '12:34:56.5+05:30', "
    + _ALL_BYTES
    + ", '{1,NULL,-2147483648,2147483647}', "
    "'{-9223372036854775808,9223372036854775807}', '{{1,2},{3,NULL}}', "
    "'{NaN,Infinity,-Infinity,-0,5e-324,1.7976931348623157e308,0.1}', "
    "'{NaN,1.1,3.4028235e38,1.4e-45,-0}', '{t,f,NULL}', "
    "ARRAY['', 'NULL', NULL, '\"', '\\', ',', '{}', ' ', 'é😀', E'\n\t', 'a b'], "
    "'{NaN,1.50,-0.001,Infinity}', '{infinity,-infinity,2024-01-02,0044-03-15 BC}', "
    "'{\"2024-01-02 03:04:05.5\",infinity}', '{\"2024-01-02 03:04:05+00\"}', "
    "'{24:00:00,00:00:00.5}', '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}', "
    "ARRAY['{\"a\": [1, \"ü\"]}'::jsonb, 'null', '\"x\\\\y\"'], "
    "ARRAY['{\"b\":1, \"a\" : 2}'::json], ARRAY['\\x00ff'::bytea, '\\x', NULL], "
    "ARRAY['q\"', 'é'], ARRAY['a', NULL], '{\"b\": 1, \"a\": [1.0, \"\\u00e9\"]}', "
    '\'{"b": 1, "a": [1.0, "\\u00e9"]}\', \'-1 year 2 days 03:04:05.5\')',
    "(3, '-0', NULL, NULL, NULL, NULL, '[0:2]={1,2,3}', NULL, '[-1:0][2:3]={{1,2},{3,4}}', "
    "NULL, NULL, NULL, '{{{{{{a}}}}}}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL)",
    "(4, '1.17549435e-38', '12:00', '12:00:00.123456', '00:00:00+00', '\\xdeadbeef', "
    "'{0}', '{0}', '{{0}}', '{-0}', '{-0}', '{f}', '{\"\"}', '{0}', '{1970-01-01}', "
    "'{\"1970-01-01 00:00:00\"}', '{\"1970-01-01 00:00:00+00\"}', '{00:00:00}', NULL, "
    "'{}', '{}', '{}', '{\"\"}', '{\"  \"}', 'null', 'null', '0 seconds')",
]
DDL = (
    "CREATE TABLE edge (id bigint, k text, s smallint, i int, f double precision, b boolean, "
    "t text, v varchar(10), n numeric, d date, ts timestamp, tz timestamptz, j jsonb, u uuid, "
    "PRIMARY KEY (id, k))",
    "CREATE TABLE full_id (id int PRIMARY KEY, v text, w int)",
    "ALTER TABLE full_id REPLICA IDENTITY FULL",
    "CREATE TABLE loose (a int, b text)",
    "ALTER TABLE loose REPLICA IDENTITY FULL",  # no key: updates need the whole old row
    "CREATE TABLE timed (id int PRIMARY KEY, at time)",  # a kind it did not read before
    *KINDS,
)
EDGES = [
    "(-9223372036854775808, '', -32768, -2147483648, 'NaN', true, 'x', '', 0, "
    "'0001-01-01', '0001-01-01 00:00:00', '0001-01-01 00:00:00+00', 'null', "
    "'00000000-0000-0000-0000-000000000000')",
    "(9223372036854775807, 'ä \"q\" \\ \n\t', 32767, 2147483647, '-Infinity', false, "
    "repeat('é', 300), 'abcdefghij', -12345678901234567890.125, '9999-12-31', "
    "'9999-12-31 23:59:59.999999', '9999-12-31 23:59:59.999999+00', '{\"a\": [1, \"ü\"]}', "
    "'ffffffff-ffff-ffff-ffff-ffffffffffff')",
    "(0, '😀', 0, 0, '-0', NULL, NULL, NULL, NULL, '1969-12-31', '1969-12-31 23:59:59.5', "
    "'1970-01-01 00:00:00.000001+00', NULL, NULL)",
    "(1, 'k', 1, 1, 5e-324, true, 't', 'v', 1.5, '2000-02-29', '2000-02-29 12:34:56.789', "
    "'2024-06-30 23:00:00+00', '[]', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11')",
    "(2, 'k', 2, 2, 1.7976931348623157e308, false, 'f', 'w', 0.1, 'infinity', '-infinity', "
    "'infinity', '{}', NULL)",  # infinity: the schemas' sentinels (read since issue 40)
]


def _workload(conn: Any) -> None:
    with conn.cursor() as cur:
        for row in EDGES:  # one transaction each
            cur.execute(f"INSERT INTO edge VALUES {row}")
        conn.autocommit = False
        cur.execute(  # a large transaction: runs of thousands of rows
            "INSERT INTO edge SELECT g, 'k' || g, g % 32000, g * 7, g / 7.0, g % 2 = 0, "
            "repeat('y', g % 50), 'v' || (g % 100), g / 3.0, date '2000-01-01' + g, "
            "timestamp '1999-12-31 23:59:59.5' + g * interval '1.25 s', "
            "timestamptz '2020-01-01 00:00:00+00' - g * interval '1 day', "
            "jsonb_build_object('g', g), md5(g::text)::uuid FROM generate_series(10, 5000) g"
        )
        conn.commit()
        conn.autocommit = True
        cur.execute("UPDATE edge SET f = 'Infinity', t = NULL WHERE id % 3 = 0 AND id > 5")
        # key changes (a delete and an insert each): the Python paths take their window
        cur.execute("UPDATE edge SET k = k || '!' WHERE id BETWEEN 20 AND 30")
        cur.execute("DELETE FROM edge WHERE id > 4900")
        cur.execute("INSERT INTO full_id SELECT g, 'v' || g, g FROM generate_series(1, 300) g")
        cur.execute("UPDATE full_id SET w = NULL WHERE id < 100")
        cur.execute("UPDATE full_id SET id = id + 1000 WHERE id > 280")
        cur.execute("DELETE FROM full_id WHERE id < 50")
        cur.execute("INSERT INTO loose SELECT g, 'b' || g FROM generate_series(1, 200) g")
        cur.execute("UPDATE loose SET b = NULL WHERE a < 50")
        cur.execute("DELETE FROM loose WHERE a > 150")
        cur.execute("INSERT INTO timed SELECT g, '12:00' FROM generate_series(1, 100) g")
        _kinds_workload(cur)
        for g in range(300):  # small transactions: runs that span windows
            cur.execute(f"INSERT INTO full_id VALUES ({2000 + g}, 'small', {g})")
            cur.execute(f"UPDATE edge SET i = i + 1 WHERE id = {10 + g}")
        # edge's catalog entry changes (as an ANALYZE's would): the server sends its Relation
        # again before its next change, and what capture counted for it must survive that
        cur.execute("ALTER TABLE edge ALTER COLUMN s SET STATISTICS 200")
        cur.execute("UPDATE edge SET i = i + 1 WHERE id = 1")


def _kinds_workload(cur: Any) -> None:
    for row in KIND_EDGES:
        cur.execute(f"INSERT INTO kinds VALUES {row}")
    cur.execute(  # runs of thousands of rows of every kind
        "INSERT INTO kinds SELECT g, g / 7.0, time '00:00' + g * interval '17.123457 s', "
        "time '23:59:59.999999' - g * interval '1 ms', "
        "(time '01:02:03' + g * interval '1 s')::timetz, decode(md5(g::text), 'hex'), "
        "ARRAY[g, NULL, -g], ARRAY[g::bigint * 3000000000], ARRAY[ARRAY[g % 100, 1]], "
        "ARRAY[g / 3.0::float8, 'NaN'], ARRAY[(g / 9.0)::real], ARRAY[g % 2 = 0, NULL], "
        "ARRAY['a' || g, 'b \"' || g || '\\', NULL, '{' || g || '}', ''], "
        "ARRAY[g / 3.0, NULL], ARRAY[date '2000-01-01' + g], "
        "ARRAY[timestamp '2000-01-01' + g * interval '1.5 s'], "
        "ARRAY[timestamptz '2020-01-01 00:00:00+00' - g * interval '1 h'], "
        "ARRAY[time '12:00' + g * interval '1 s'], ARRAY[md5(g::text)::uuid], "
        "ARRAY[jsonb_build_object('g', g, 'a', 'x\"y')], ARRAY[json_build_array(g, 'é')], "
        "ARRAY[decode(lpad(to_hex(g), 8, '0'), 'hex')], ARRAY['v' || g], ARRAY[chr(65 + g % 26)], "
        "json_build_object('g', g), jsonb_build_object('g', g, 'b', ARRAY[g, 2]), "
        "g * interval '1 min' FROM generate_series(10, 3000) g"
    )
    cur.execute(
        "UPDATE kinds SET r = r * 2, at = at || 'x'::text, by = NULL WHERE id % 3 = 0 AND id > 5"
    )
    cur.execute("DELETE FROM kinds WHERE id > 2900")
    cur.execute(
        "INSERT INTO odd_keys SELECT (g / 3.0)::real, time '00:00' + g * interval '1.5 s', "
        "decode(md5(g::text), 'hex'), ARRAY[g, NULL], 'v' FROM generate_series(1, 500) g"
    )
    cur.execute(
        "INSERT INTO odd_keys VALUES ('NaN', '24:00:00', '', '{}', 'edge'), "
        "('-Infinity', '00:00:00.000001', " + _ALL_BYTES + ", '{{1,2},{3,4}}', 'edge'), "
        "('1.4e-45', '23:59:59.999999', '\\x00', '[0:0]={-1}', 'edge')"
    )
    cur.execute("UPDATE odd_keys SET v = 'w' WHERE ai[1] % 2 = 0")  # the key kept
    cur.execute("DELETE FROM odd_keys WHERE ai[1] % 5 = 0 OR v = 'edge'")  # old keys of each
    cur.execute(
        'INSERT INTO json_key VALUES (\'{"b": 1, "a": [1, 2.50]}\', 1), '
        "('1e400', 2), ('{\"a\": \"é\\u0001\", \"\": null}', 3), ('[]', 4), ('\"x\"', 5)"
    )
    cur.execute(
        "INSERT INTO json_key SELECT jsonb_build_object('g', g), g FROM generate_series(1, 300) g"
    )
    cur.execute("UPDATE json_key SET v = -v")
    cur.execute("DELETE FROM json_key WHERE v % 2 = 0")


def _capture(url: str, start: int, stop: int) -> tuple[list[CapturedWindow], dict[str, Any]]:
    windows: list[CapturedWindow] = []
    done = threading.Event()

    def sink(window: CapturedWindow) -> None:
        # the workload's windows only: the commit made after ``stop`` (or a window at ``stop``)
        # ends the wait, and what arrives before ``stop()`` takes effect varies by run
        if window.scn <= stop:
            windows.append(window)
        if window.scn >= stop:
            done.set()

    settings = CaptureSettings(TABLES, SchemaRegistry(), sink)
    capture = PostgresCapture(parse_pg_url(url), settings)
    capture.start(start)
    assert done.wait(120), "capture did not reach the workload's end"
    capture.stop()
    return windows, {"tables": dict(capture.stats.tables), **capture.stats.details}


def _check_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[int], list[str], dict[str, int]]:
    """Every run the compiled path takes is transcoded by the row path too."""
    taken: list[int] = []
    mismatches: list[str] = []
    by_table: dict[str, int] = {}  # messages the compiled path took, per table
    bulk = pending.bulk_events

    def watched(table: Any, run: list[Any]) -> list[bytes] | None:
        payloads = [message.payload for message in run]
        if table.compiled is not None and table.compiled.events(payloads) is not None:
            out = table.compiled.events(payloads)
            taken.append(len(run))
            by_table[table.source] = by_table.get(table.source, 0) + len(run)
            if out != [e for p in payloads for e in table.row_events(p)]:
                mismatches.append(f"{len(run)} messages from {payloads[0][:40]!r}")
        return bulk(table, run)

    monkeypatch.setattr(pg_capture, "bulk_events", watched)
    return taken, mismatches, by_table


def test_the_compiled_path_gives_the_python_paths_bytes_on_a_real_server(
    postgres: PrivatePostgres, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = postgres.connect(pg_database)
    conn.autocommit = True
    with conn.cursor() as cur:
        for statement in DDL:
            cur.execute(statement)
    urls = [postgres.source_url(pg_database, slot=s, publication="sluice") for s in "ab"]
    for url in urls:  # both slots made before the workload: they read the same WAL
        settings = CaptureSettings(TABLES, SchemaRegistry(), lambda window: None)
        start = PostgresCapture(parse_pg_url(url), settings).check().end_scn
    _workload(conn)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
        (stop,) = cur.fetchone()
        cur.execute("INSERT INTO timed VALUES (0, NULL)")  # a commit at or after stop
    conn.close()

    taken, mismatches, by_table = _check_runs(monkeypatch)
    fast, report = _capture(urls[0], start, stop)
    monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
    python, python_report = _capture(urls[1], start, stop)

    assert mismatches == []
    # all but the key changes' windows, the large transaction's runs of thousands too
    # (how a run is cut depends on what one read of the stream held: not always MAX_RUN)
    assert sum(taken) > 8000 and max(taken) > 1000
    assert [(w.scn, w.events) for w in fast] == [(w.scn, w.events) for w in python]
    assert sum(len(w.events) for w in fast) > 8000
    tables = report["tables"]
    # no table keeps the Python paths (issue 40), and no run of the kinds it reads since then
    # is handed back: they are read whole, keys of real, time, bytea, int[] and jsonb too
    assert {s: tables[s]["transcoder"] for s in TABLES} == dict.fromkeys(TABLES, "compiled")
    assert report.get("python_transcoder_tables", 0) == 0
    for source in ("public.timed", "public.kinds", "public.odd_keys", "public.json_key"):
        assert "compiled_refused_messages" not in tables[source], source
    assert by_table["public.kinds"] == 2991 + 4 + 997 + 100  # inserts, updates, deletes
    assert by_table["public.odd_keys"] > 600 and by_table["public.json_key"] == 305 * 2 + 152
    assert python_report["python_transcoder_tables"] == len(TABLES)
    assert {info["transcoder_why"] for info in python_report["tables"].values()} == {
        "SLUICE_PURE_PYTHON is set"
    }
    # the runs it handed back (key changes) are counted, for /metrics too
    assert tables["public.edge"]["compiled_refused_messages"] > 0
    assert report["compiled_refused_messages"] >= tables["public.edge"]["compiled_refused_messages"]
    assert "compiled_refused_messages" not in python_report
