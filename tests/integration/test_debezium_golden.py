"""``format=debezium`` against Debezium itself: the statements Debezium's PostgreSQL connector
was recorded on (``tests/golden/debezium/postgresql.json``, made by ``make interop``) are run
again here, captured by Sluice, and each event is compared with Debezium's field by field:
values, key, op, the source block's identity fields, and each column's Kafka Connect schema.
Differences Sluice has on purpose, or has not closed yet, are listed here and in the README.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from sluice.capture import CapturedWindow
from sluice.capture.mysql.metadata import end_scn
from sluice.capture.postgres.capture import described_source
from sluice.capture.source import CaptureSettings, open_capture, source_info
from sluice.core import wire
from sluice.relay import RelayConfig
from sluice.schemas import SchemaRegistry
from sluice.schemas.debezium import DebeziumFormatter, DebeziumOptions, DebeziumWindows
from sluice.testing import PrivateMariaDB, RelayThread
from sluice.testing.postgres import PrivatePostgres
from tests.integration.support import (
    get_json,
    http_status,
    relay_config,
    run_sluice,
    wait_for,
)
from tests.integration.test_differential import _capture

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "debezium" / "postgresql.json"
# Column schemas that differ on purpose (README: "Debezium events"): enums without 'allowed'.
SCHEMA_KNOWN = {
    "m": "an enum is a plain string: no io.debezium.data.Enum name, no 'allowed' labels",
}
# Values Sluice's events do not carry (README): none left (infinite dates and timestamps
# were null; they are Debezium's sentinels now, rows 4 and 5 of the recording).
VALUE_KNOWN: dict[str, set[Any]] = {}
# Source fields that depend on the run (times, positions, transaction ids) or on Debezium.
SOURCE_SAME = ("connector", "name", "db", "schema", "table", "snapshot")
# As recorded: every operation (Debezium's default skips TRUNCATE), keys and tombstones.
RECORDED = {"schemas.enable": "true", "keys": "true", "skipped.operations": "none"}


def _formatted(
    windows: list[CapturedWindow],
    registry: SchemaRegistry,
    source: dict[str, Any],
    settings: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The windows as Debezium's ``{"key", "value"}`` lines (tombstones too), topic prefix
    "golden"."""
    options = DebeziumOptions.parse(RECORDED if settings is None else settings, name="golden")
    stream = DebeziumWindows(source, options)
    out = []
    for window in windows:
        record = wire.encode_window(window.scn, 0, window.ts_ms, window.events)
        out.extend(json.loads(line) for line in stream.lines(record, registry.codec))
    return out


def _without_allowed(schema: dict[str, Any], columns: dict[str, str]) -> dict[str, Any]:
    """The envelope schema with ``columns`` reduced to what Sluice knows of them (type,
    nullability, default): no ``allowed`` labels, and a PostgreSQL enum is a plain string."""
    text = json.loads(json.dumps(schema))
    for image in text["fields"][:2]:
        for field in image["fields"]:
            if field["field"] in columns:
                for extra in ("name", "version", "parameters"):
                    field.pop(extra, None)
    return dict(text)


def assert_same_events(
    ours: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    source_same: tuple[str, ...],
    schema_known: dict[str, str],
    value_known: dict[str, set[Any]],
) -> None:
    """Event by event: keys (schema and payload), tombstones, op, both images, the source
    block's identity and field set, and the whole envelope schema."""
    assert [e["value"] is None for e in ours] == [e["value"] is None for e in theirs]
    for mine, their in zip(ours, theirs, strict=True):
        assert mine["key"] == their["key"]
        if their["value"] is None:
            continue
        m, t = mine["value"]["payload"], their["value"]["payload"]
        where = (t["op"], t["source"]["table"])
        assert m["op"] == t["op"], where
        for image in ("before", "after"):
            if t[image] is None or m[image] is None:
                assert m[image] == t[image], (where, image)
                continue
            assert set(m[image]) == set(t[image])
            for column, value in t[image].items():
                if column in value_known and value in value_known[column]:
                    assert m[image][column] is None, (where, image, column)
                else:
                    assert m[image][column] == value, (where, image, column)
        for name in source_same:
            assert m["source"][name] == t["source"][name], (where, name)
        assert set(m["source"]) == set(t["source"]), where
        assert set(m) == set(t), where
        want = _without_allowed(their["value"]["schema"], schema_known)
        assert _without_allowed(mine["value"]["schema"], schema_known) == want, where


def _sluice_windows(
    pg: PrivatePostgres, golden: dict[str, Any]
) -> tuple[list[CapturedWindow], SchemaRegistry]:
    admin = pg.connect()
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE golden")
    conn = pg.connect("golden")
    conn.autocommit = True
    with conn.cursor() as cur:
        for sql in golden["setup"]:
            cur.execute(sql)
    registry, lock = SchemaRegistry(), threading.Lock()
    windows: list[CapturedWindow] = []

    def sink(window: CapturedWindow) -> None:
        with lock:
            windows.append(window)

    tables = tuple(golden["settings"]["table.include.list"].split(","))
    capture = open_capture(
        pg.source_url("golden", slot="golden_test"), CaptureSettings(tables, registry, sink)
    )
    capture.start(None)
    try:
        with conn.cursor() as cur:
            for sql in golden["statements"]:
                cur.execute(sql)
        wait_for(lambda: len(windows) >= len(golden["statements"]), 60, "captured statements")
    finally:
        capture.stop()
        conn.close()
    return windows, registry


def test_postgresql_events_equal_debeziums_field_by_field(postgres: PrivatePostgres) -> None:
    golden = json.loads(GOLDEN.read_text())
    windows, registry = _sluice_windows(postgres, golden)
    info = source_info(postgres.source_url("golden"))
    ours = _formatted(windows, registry, info)
    assert len(golden["events"]) == 16  # 14 changes, 2 tombstones
    assert_same_events(ours, golden["events"], SOURCE_SAME, SCHEMA_KNOWN, VALUE_KNOWN)
    # Debezium's defaults: skipped.operations=t drops the TRUNCATE; tombstones only come
    # with keys (a value-only line would be a bare null) unless tombstones.on.delete=false
    keyed = _formatted(windows, registry, info, {"keys": "true"})
    assert len(keyed) == 15 and "t" not in {e["value"]["op"] for e in keyed if e["value"]}
    plain = _formatted(windows, registry, info, {})
    assert len(plain) == 13 and all(v is not None for v in plain)
    assert [e["op"] for e in plain] == [e["value"]["op"] for e in keyed if e["value"]]
    quiet = _formatted(windows, registry, info, {"keys": "true", "tombstones.on.delete": "false"})
    assert len(quiet) == 13 and all(e["value"] is not None for e in quiet)
    # strict JSON: NaN and the infinities are strings, as Debezium writes them
    lines = [json.dumps(e, allow_nan=False) for e in plain]
    assert '"r": "NaN"' in lines[5] and '"d": "-Infinity"' in lines[6]


# PostgreSQL's infinite dates and timestamps as Debezium 3.6 gives them (PostgresValueConverter:
# the Instant of PGStatement.DATE_POSITIVE/NEGATIVE_INFINITY read as micros, in micros or
# millis by precision; dates -5877611-06-21/22 as epoch days; ZonedTimestamp its text).
# The golden recording has date, timestamp and timestamptz; timestamp(3) -infinity measured.
_MICROS = {"infinity": 9223372036825200000, "-infinity": -9223372036832400000}
_MILLIS = {"infinity": 9223372036825200, "-infinity": -9223372036832400}
_DAYS = {"infinity": -2147472692, "-infinity": -2147472691}
_STAMPS = ("t0", "t1", "t3", "t4", "t6", "t")


def test_infinite_dates_and_timestamps_are_debeziums_values(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    conn = postgres.connect(pg_database)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE inf (id integer PRIMARY KEY, d date, t0 timestamp(0), "
            "t1 timestamp(1), t3 timestamp(3), t4 timestamp(4), t6 timestamp(6), t timestamp, "
            "z timestamptz, z3 timestamptz(3))"
        )
    config = RelayConfig(
        source=postgres.source_url(pg_database, slot=f"inf_{pg_database}"), tables=["public.inf"],
        data_dir=tmp_path / "pg", port=0,
    )  # fmt: skip
    with RelayThread(config) as relay:
        start = get_json(relay.url + "/stats")["max_scn"]
        with conn.cursor() as cur:
            for i, text in enumerate(("infinity", "-infinity", None)):
                value = "'2024-02-29 01:02:03.456789'" if text is None else f"'{text}'"
                day = "'2024-02-29'" if text is None else value
                cur.execute(f"INSERT INTO inf VALUES ({i}, {day}, {', '.join([value] * 8)})")
        wait_for(lambda: get_json(relay.url + "/stats")["capture"]["windows"] >= 3, 60, "3")

        def lines(*options: str) -> list[dict[str, Any]]:
            args = [a for o in options for a in ("--debezium-option", o)]
            tail = run_sluice(
                "tail", "--relay", relay.url, "--since-scn", str(start), "--until-caught-up",
                "--format", "debezium", *args, timeout=60,
            )  # fmt: skip
            assert tail.returncode == 0, tail.stderr
            return [json.loads(line)["after"] for line in tail.stdout.splitlines()]

        adaptive, connect = lines(), lines("time.precision.mode=connect")
        plain = lines("time.precision.mode=adaptive_time_microseconds")
        # Sluice's own JSON: PostgreSQL's text, where it was null (and a NULL is null)
        json_tail = run_sluice(
            "tail", "--relay", relay.url, "--since-scn", str(start), "--until-caught-up"
        )
        ours = [json.loads(line)["after"] for line in json_tail.stdout.splitlines()]
    conn.close()
    for text, row in zip(("infinity", "-infinity"), adaptive[:2], strict=True):
        assert row["d"] == _DAYS[text]
        assert [row[c] for c in _STAMPS] == [_MILLIS[text]] * 3 + [_MICROS[text]] * 3
        assert row["z"] == row["z3"] == text
    assert adaptive[1]["t3"] == -9223372036832400  # measured on Debezium 3.6.3
    assert plain == adaptive  # the mode changes times only
    for text, row in zip(("infinity", "-infinity"), connect[:2], strict=True):
        assert row["d"] == _DAYS[text] and [row[c] for c in _STAMPS] == [_MILLIS[text]] * 6
    finite = adaptive[2]
    assert finite["d"] == 19782 and finite["t"] == 1709168523456789
    assert finite["t3"] == 1709168523457 and finite["z3"] == "2024-02-29T01:02:03.457Z"
    assert ours[0] == {"id": 0, "d": "infinity", **dict.fromkeys([*_STAMPS, "z", "z3"], "infinity")}
    assert ours[1]["d"] == ours[1]["t"] == ours[1]["z"] == "-infinity"
    assert ours[2]["t"] == "2024-02-29T01:02:03.456789" and ours[2]["z"].endswith("Z")


MARIADB_GOLDEN = GOLDEN.parent / "mariadb.json"
MARIADB_SCHEMA_KNOWN = {
    "e": "an enum's schema lacks Debezium's 'allowed' parameter (its labels)",
    "s": "a set's schema lacks Debezium's 'allowed' parameter (its members)",
}
# pos: Sluice's SCN is the commit's end; Debezium gives the transaction's first event.
MARIADB_SOURCE_SAME = ("connector", "name", "db", "table", "snapshot", "server_id", "file", "row")


def _mariadb_events(db: PrivateMariaDB, golden: dict[str, Any]) -> list[dict[str, Any]]:
    conn = db.connect()
    with conn.cursor() as cur:
        for sql in golden["setup"]:
            cur.execute(sql)
        start = end_scn(conn)
        cur.execute("SET time_zone = '+00:00'")
        for sql in golden["statements"]:
            cur.execute(sql)
        stop = end_scn(conn)
    conn.close()
    tables = tuple(golden["settings"]["table.include.list"].split(","))
    windows, registry = _capture(db, tables, start, stop)
    info = source_info(db.url)
    assert info["connector"] == "mysql" and info["log_base"] == "binlog"
    return _formatted(windows, registry, info)


def test_mariadb_events_equal_debeziums_mysql_connector_field_by_field(
    mariadb: PrivateMariaDB,
) -> None:
    golden = json.loads(MARIADB_GOLDEN.read_text())
    ours = _mariadb_events(mariadb, golden)
    assert len(golden["events"]) == 11  # 9 changes, 2 tombstones
    assert_same_events(ours, golden["events"], MARIADB_SOURCE_SAME, MARIADB_SCHEMA_KNOWN, {})


def test_options_change_values_as_debezium_documents(postgres: PrivatePostgres) -> None:
    """``decimal.handling.mode``, ``time.precision.mode`` and ``binary.handling.mode``."""
    from sluice.schemas import Column, TableSchema
    from sluice.schemas.avro import RowCodec

    schema = TableSchema(
        "public.t",
        1,
        (
            Column("id", "int", False, "integer"),
            Column("n", "string", True, "numeric(10,2)"),
            Column("tm", "time", True, "time without time zone"),
            Column("ts", "datetime", True, "timestamp without time zone"),
            Column("by", "bytes", True, "bytea"),
        ),
        ("id",),
    )
    payload = RowCodec(schema).encode(None, [1, "12.30", 3_723_456_789, 1_000_123_456, b"\x00\xff"])
    source = described_source("d")

    def after(**options: str) -> dict[str, Any]:
        formatter = DebeziumFormatter(schema, source, DebeziumOptions.parse(options))
        _key, value = formatter.event("c", payload, 1, 0)
        return dict(value["after"])

    default = after()
    assert default["n"] == "BM4=" and default["tm"] == 3_723_456_789
    assert default["ts"] == 1_000_123_456 and default["by"] == "AP8="
    assert after(**{"decimal.handling.mode": "string"})["n"] == "12.30"
    assert after(**{"decimal.handling.mode": "double"})["n"] == 12.3
    connect = after(**{"time.precision.mode": "connect"})
    assert connect["tm"] == 3_723_456 and connect["ts"] == 1_000_123
    assert after(**{"binary.handling.mode": "hex"})["by"] == "00ff"


def test_the_relay_streams_debezium_lines_and_refuses_what_it_cannot_speak(
    spark: Any,
    postgres: PrivatePostgres,
    pg_database: str,
    mariadb: PrivateMariaDB,
    database: str,
    tmp_path: Path,
) -> None:
    conn = postgres.connect(pg_database)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id integer PRIMARY KEY, n numeric(6,2), d date)")
    config = RelayConfig(
        source=postgres.source_url(pg_database, slot=f"dbz_{pg_database}"), tables=["public.t"],
        data_dir=tmp_path / "pg", port=0,
    )  # fmt: skip
    with RelayThread(config) as relay:
        start = get_json(relay.url + "/stats")["max_scn"]
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1, 12.5, '2024-01-02'), (2, NULL, NULL)")
            cur.execute("UPDATE t SET n = 1 WHERE id = 2")
            cur.execute("TRUNCATE t")
        wait_for(lambda: get_json(relay.url + "/stats")["capture"]["windows"] >= 3, 60, "3")
        query = f"since_scn={start}&timeout_ms=0&format=debezium&decimal.handling.mode=string"
        status, body = http_status(f"{relay.url}/stream?{query}")
        assert status == 200
        lines = [json.loads(line) for line in body.decode().splitlines()]
        assert [v["op"] for v in lines] == ["c", "c", "u"]  # Debezium's default skips t
        every = http_status(f"{relay.url}/stream?{query}&skipped.operations=none")[1]
        lines = [json.loads(line) for line in every.decode().splitlines()]
        assert [v["op"] for v in lines] == ["c", "c", "u", "t"]
        query += "&skipped.operations=none"
        assert lines[0]["after"] == {"id": 1, "n": "12.50", "d": 19724}
        assert lines[2]["after"]["n"] == "1.00" and lines[3]["after"] is None
        assert {(v["source"]["db"], v["source"]["table"]) for v in lines} == {(pg_database, "t")}
        assert lines[0]["source"]["connector"] == "postgresql"
        tx = http_status(f"{relay.url}/stream?{query}&provide.transaction.metadata=true")[1]
        blocks = [json.loads(line)["transaction"] for line in tx.decode().splitlines()]
        assert blocks[0] == {"id": blocks[0]["id"], "total_order": 1, "data_collection_order": 1}
        assert blocks[1]["total_order"] == 2 and blocks[1]["id"] == blocks[0]["id"]
        assert blocks[2]["total_order"] == 1 and blocks[2]["id"] != blocks[0]["id"]
        assert lines[0]["transaction"] is None  # Debezium's default: no block
        keyed = http_status(f"{relay.url}/stream?{query}&keys=true")[1].decode().splitlines()
        pairs = [json.loads(line) for line in keyed]
        assert [p["key"] for p in pairs] == [{"id": 1}, {"id": 2}, {"id": 2}, None]
        assert [p["value"] for p in pairs] == lines
        bad = http_status(f"{relay.url}/stream?since_scn={start}&format=debezium&"
                          "decimal.handling.mode=exact")  # fmt: skip
        assert bad[0] == 400 and "decimal.handling.mode must be one of" in bad[1]["error"]
        with_schema = http_status(
            f"{relay.url}/stream?since_scn={start}&timeout_ms=0&format=debezium&"
            "schemas.enable=true&topic.prefix=shop"
        )[1]
        first = json.loads(with_schema.decode().splitlines()[0])
        assert first["schema"]["name"] == "shop.public.t.Envelope"
        assert first["payload"]["source"]["name"] == "shop"
        # sluice tail --format debezium: the same envelopes, made by the client
        tail = run_sluice(
            "tail", "--relay", relay.url, "--since-scn", str(start), "--until-caught-up",
            "--format", "debezium", "--debezium-option", "decimal.handling.mode=string",
            "--debezium-option", "keys=true", "--debezium-option", "skipped.operations=none",
            timeout=60,
        )  # fmt: skip
        assert tail.returncode == 0, tail.stderr
        assert [json.loads(line) for line in tail.stdout.splitlines()] == pairs
        # Spark's format=debezium: key and value columns, the same envelopes
        rows = (
            spark.read.format("sluice")
            .option("relay", relay.url)
            .option("startingScn", str(start))
            .option("format", "debezium")
            .option("debezium.decimal.handling.mode", "string")
            .option("debezium.skipped.operations", "none")
            .load()
            .orderBy("scn")
            .collect()
        )
        assert [json.loads(r["value"]) for r in rows] == lines
        assert [json.loads(r["key"]) if r["key"] else None for r in rows] == [
            {"id": 1},
            {"id": 2},
            {"id": 2},
            None,
        ]
    conn.close()
    # A MariaDB relay speaks it too (its source block: server id and binlog file) ...
    admin = mariadb.connect(database)
    with admin.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, b BIGINT UNSIGNED)")
    with RelayThread(relay_config(mariadb, [f"{database}.t"], tmp_path / "maria")) as relay:
        scn = get_json(relay.url + "/stats")["max_scn"]
        with admin.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (1, 18446744073709551615)")
        wait_for(lambda: get_json(relay.url + "/stats")["capture"]["windows"] >= 1, 60, "1")
        query = f"since_scn={scn}&timeout_ms=0&format=debezium"
        (line,) = http_status(f"{relay.url}/stream?{query}")[1].decode().splitlines()
        value = json.loads(line)
        assert value["after"] == {"id": 1, "b": -1}  # Debezium's default: a signed long
        assert value["source"]["file"].startswith("binlog.") and value["source"]["db"] == database
        precise = http_status(
            f"{relay.url}/stream?{query}&bigint.unsigned.handling.mode=precise&"
            "decimal.handling.mode=string"
        )[1]
        assert json.loads(precise.decode())["after"]["b"] == "18446744073709551615"
    admin.close()
    # ... a query source does not (yet): one sentence, from the relay and from tail
    path = tmp_path / "app.db"
    sqlite3.connect(path).execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    query_config = RelayConfig(
        source=f"query+sqlite:///{path}", tables=["main.t"], data_dir=tmp_path / "q", port=0,
        table_options={"main.t": {"mode": "bulk"}},
    )  # fmt: skip
    with RelayThread(query_config) as relay:
        status, body = http_status(f"{relay.url}/stream?since_scn=0&format=debezium")
        assert status == 400 and "not available for query+sqlite sources" in body["error"]
        tail = run_sluice(
            "tail", "--relay", relay.url, "--until-caught-up", "--format", "debezium",
            timeout=60,
        )  # fmt: skip
        assert tail.returncode == 2 and "not available for query+sqlite" in tail.stderr
