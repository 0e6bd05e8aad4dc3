"""PostgreSQL capture through the relay (logical replication, pgoutput): changes, whole
transactions in commit order, types, restart without repeats or gaps, the slot confirmed only
up to what the relay persisted, and clear errors for a server that is not set up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sluice.errors import SluiceError
from sluice.relay import RelayConfig
from sluice.testing import RecordingConsumer, RelayThread, ReplicaConsumer
from sluice.testing.postgres import PrivatePostgres
from tests.integration.support import SLUICE, consume, get_json, http_status, wait_for


def _config(
    pg: PrivatePostgres, db: str, tables: list[str], data: Path, **extra: Any
) -> RelayConfig:
    return RelayConfig(source=pg.source_url(db), tables=tables, data_dir=data, port=0, **extra)


def _current_lsn(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
        return int(cur.fetchone()[0])


def _caught_up(relay_url: str, conn: Any) -> None:
    target = _current_lsn(conn)
    wait_for(
        lambda: (
            get_json(relay_url + "/stats")["capture"]["last_scn"] >= target
            or get_json(relay_url + "/stats")["capture"]["source_end_scn"] >= target
        ),
        60,
        "capture to reach the server's WAL end",
    )


def _truth(conn: Any, table: str) -> dict[str, dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, v FROM {table}")
        return {json.dumps({"id": i}, separators=(",", ":")): {"id": i, "v": v} for i, v in cur}


def test_changes_and_transactions_are_captured_in_commit_order(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id int PRIMARY KEY, v text)")
        cur.execute("CREATE TABLE b (id int PRIMARY KEY, v text)")
        cur.execute("CREATE TABLE other (id int PRIMARY KEY)")
    config = _config(postgres, pg_database, ["public.a", "public.b"], tmp_path / "relay")
    with RelayThread(config) as relay:
        start = get_json(relay.url + "/stats")["min_scn"]
        with conn.cursor() as cur:
            cur.execute("INSERT INTO a VALUES (1, 'one'), (2, 'two')")
            cur.execute("BEGIN")
            cur.execute("UPDATE a SET v = 'uno' WHERE id = 1")
            cur.execute("INSERT INTO b VALUES (1, 'b-one')")
            cur.execute("INSERT INTO other VALUES (1)")
            cur.execute("COMMIT")
            cur.execute("BEGIN")
            cur.execute("INSERT INTO a VALUES (3, 'rolled back')")
            cur.execute("ROLLBACK")
            cur.execute("UPDATE a SET id = 20 WHERE id = 2")  # a primary key change
            cur.execute("DELETE FROM b WHERE id = 1")
        _caught_up(relay.url, conn)
        recorder = RecordingConsumer()
        consume(relay.url, recorder, since_scn=start)
        replica = ReplicaConsumer()
        consume(relay.url, replica, since_scn=start)
        sources = {s["source"] for s in get_json(relay.url + "/sources")["sources"]}
    assert sources == {"public.a", "public.b"}
    ops = [(e.source, e.op, (e.key or {}).get("id")) for e in recorder.events]
    assert ops == [
        ("public.a", "c", 1),
        ("public.a", "c", 2),
        ("public.a", "u", 1),
        ("public.b", "c", 1),
        ("public.a", "d", 2),
        ("public.a", "c", 20),
        ("public.b", "d", 1),
    ]
    windows = list(recorder.windows)
    assert [len(w.events) for w in windows] == [2, 2, 2, 1]  # whole transactions
    assert [w.scn for w in windows] == sorted(w.scn for w in windows)
    assert replica.snapshot("public.a") == _truth(conn, "a")
    assert replica.snapshot("public.b") == {}
    conn.close()


def test_types_map_to_their_json_values(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE typed (id bigint PRIMARY KEY, s smallint, i integer, n numeric(10,2), "
            "nn numeric, r real, d double precision, b boolean, t text, vc varchar(10), "
            "c char(3), by bytea, dt date, tm time, ts timestamp, tz timestamptz, j json, "
            "jb jsonb, u uuid, iv interval, ai int[], at text[], an numeric[], a2 int[][])"
        )
    with RelayThread(_config(postgres, pg_database, ["public.typed"], tmp_path / "r")) as relay:
        start = get_json(relay.url + "/stats")["min_scn"]
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO typed VALUES (9007199254740993, -32768, 2147483647, -12.50, "
                "'NaN', 0.1, 'Infinity', false, 'ünï', 'x', 'ab', '\\x00ff10', '2024-02-29', "
                "'23:59:59.999999', '2024-01-02 03:04:05.5', '2024-01-02 03:04:05+05:30', "
                "'{\"a\": 1}', '{\"b\": [1, null]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
                "'1 day 02:00:00', '{1,NULL,3}', '{\"a, b\",NULL,\"NULL\",\"{x}\"}', "
                "'{1.50,NaN}', '{{1,2},{3,4}}')"
            )
            cur.execute("INSERT INTO typed (id, dt, ts) VALUES (2, 'infinity', '-infinity')")
        _caught_up(relay.url, conn)
        replica = ReplicaConsumer()
        consume(relay.url, replica, since_scn=start)
        captured = get_json(relay.url + "/schemas/public.typed")["versions"][-1]
    # `sluice schema generate` gives the schema capture registered.
    generated = subprocess.run(
        [
            *SLUICE,
            "schema",
            "generate",
            "--source",
            postgres.source_url(pg_database),
            "--table",
            "public.typed",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert generated.returncode == 0, generated.stderr
    assert json.loads(generated.stdout) == captured
    rows = replica.snapshot("public.typed")
    assert rows['{"id":9007199254740993}'] == {
        "id": 9007199254740993,
        "s": -32768,
        "i": 2147483647,
        "n": "-12.50",
        "nn": "NaN",
        "r": 0.10000000149011612,
        "d": "Infinity",  # strict JSON: the non-finite floats are strings
        "b": False,
        "t": "ünï",
        "vc": "x",
        "c": "ab ",
        "by": "AP8Q",
        "dt": "2024-02-29",
        "tm": "23:59:59.999999",
        "ts": "2024-01-02T03:04:05.500000",
        "tz": "2024-01-01T21:34:05Z",
        "j": {"a": 1},
        "jb": {"b": [1, None]},
        "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        "iv": "P1DT2H",
        "ai": [1, None, 3],
        "at": ["a, b", None, "NULL", "{x}"],
        "an": ["1.50", "NaN"],
        "a2": [[1, 2], [3, 4]],
    }
    # infinity is PostgreSQL's text (it was null, which a NULL is too)
    assert rows['{"id":2}']["dt"] == "infinity" and rows['{"id":2}']["ts"] == "-infinity"
    conn.close()


def test_a_restarted_relay_resumes_without_repeats_or_gaps_and_confirms_only_what_it_holds(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id int PRIMARY KEY, v text)")
        cur.execute("CREATE TABLE busy (id serial PRIMARY KEY, pad text)")
    config = _config(postgres, pg_database, ["public.a"], tmp_path / "relay")
    recorder = RecordingConsumer()
    with RelayThread(config) as relay:
        start = get_json(relay.url + "/stats")["min_scn"]
        with conn.cursor() as cur:
            for n in range(20):
                cur.execute("INSERT INTO a VALUES (%s, 'first')", (n,))
        _caught_up(relay.url, conn)
        held = get_json(relay.url + "/stats")["max_scn"]
        wait_for(lambda: _confirmed(conn) >= held, 30, "the slot to be confirmed")
        assert _confirmed(conn) <= _current_lsn(conn)
    with conn.cursor() as cur:  # changes while the relay is down stay in the slot
        for n in range(20, 40):
            cur.execute("INSERT INTO a VALUES (%s, 'while down')", (n,))
    assert _confirmed(conn) <= _current_lsn(conn)
    with RelayThread(config) as relay:
        with conn.cursor() as cur:
            cur.execute("UPDATE a SET v = 'after' WHERE id < 5")
            # A busy database whose captured tables are idle: the slot still advances.
            cur.execute(
                "INSERT INTO busy (pad) SELECT repeat('x', 500) FROM generate_series(1, 2000)"
            )
        _caught_up(relay.url, conn)
        consume(relay.url, recorder, since_scn=start)
        end = _current_lsn(conn)
        wait_for(lambda: _confirmed(conn) >= end, 30, "the slot to follow an idle table")
        slot = get_json(relay.url + "/stats")["capture"]["source"]
        assert slot["slot"] == "sluice" and slot["retained_wal_bytes"] >= 0
        assert set(slot) >= {"server_lsn", "confirmed_lsn"}
        with urllib.request.urlopen(relay.url + "/metrics", timeout=30) as resp:
            metrics = resp.read().decode()
        assert "sluice_relay_capture_source_retained_wal_bytes" in metrics
        assert "sluice_relay_capture_source_confirmed_scn" in metrics
    ids = [e.key["id"] for e in recorder.events if e.op == "c"]  # type: ignore[index]
    assert ids == list(range(40))  # each row once, in commit order, none lost while down
    assert sum(1 for e in recorder.events if e.op == "u") == 5
    conn.close()


def _confirmed(conn: Any) -> int:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
            "WHERE database = current_database()"
        )
        row = cur.fetchone()
        return int(row[0]) if row and row[0] is not None else 0


def test_a_server_not_set_up_for_capture_gets_one_clear_error(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id int PRIMARY KEY)")
        cur.execute("CREATE ROLE plain LOGIN")
        cur.execute(
            f"CREATE DATABASE {pg_database}_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' "
            "LC_CTYPE 'C' TEMPLATE template0"
        )
    cases = [
        (["public.nope"], postgres.source_url(pg_database), "unknown table 'public.nope'"),
        (
            ["public.a"],
            postgres.source_url(pg_database).replace("postgres@", "plain@"),
            "ALTER ROLE plain REPLICATION",
        ),
        (["public.a"], postgres.source_url(pg_database, slot="Bad-Name"), "slot name"),
        (["public.a"], postgres.source_url(f"{pg_database}_latin1"), "encoding LATIN1"),
    ]
    for tables, url, expected in cases:
        config = RelayConfig(source=url, tables=tables, data_dir=tmp_path / "r", port=0)
        with pytest.raises(SluiceError, match=expected), RelayThread(config):
            pass
    conn.close()


def test_the_generated_transcoder_equals_the_value_path_byte_for_byte(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every change is decoded both ways (generated transcoder and values + the schema's
    encoder): the wire events must be identical. (The compiled transcoder, which would take
    most of them first, is off: ``test_pg_compiled.py`` checks it.)"""
    monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
    from sluice.capture.postgres import pgoutput
    from sluice.capture.postgres.tables import PgTable
    from sluice.capture.postgres.transcode import Slow

    compared: list[int] = []
    mismatches: list[str] = []

    def both(table: Any, payload: bytes) -> list[bytes]:
        slow = table.change_events(pgoutput.parse(payload))
        try:
            fast = table.fast(payload[0], payload)
        except Slow:
            return slow  # where the fast path defers (unchanged TOAST)
        compared.append(1)
        if fast != slow:
            mismatches.append(f"{payload[:60]!r}")
        return slow

    monkeypatch.setattr(PgTable, "row_events", both)
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE typed (id bigint, k text, s smallint, n numeric(10,2), r real, "
            "d double precision, b boolean, t text NOT NULL, by bytea, dt date, tm time, "
            "ts timestamp, tz timestamptz, j jsonb, u uuid, iv interval, ai int[], at text[], "
            "PRIMARY KEY (id, k))"
        )
        cur.execute("CREATE TABLE full_id (id int PRIMARY KEY, v text, w int)")
        cur.execute("ALTER TABLE full_id REPLICA IDENTITY FULL")
    tables = ["public.typed", "public.full_id"]
    with RelayThread(_config(postgres, pg_database, tables, tmp_path / "r")) as relay:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO typed VALUES (1, 'ä \"q\"', 7, 1.25, 1.5, -0.0, true, 'x', "
                "'\\x', '1999-12-31', '00:00:00', '1970-01-01 00:00:00.000001', "
                "'2038-01-19 03:14:08+00', '[]', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
                "'-1 mons', '{1,NULL}', '{\"x y\",z}')"
            )
            cur.execute("INSERT INTO typed (id, k, t) VALUES (-9223372036854775808, '', '')")
            cur.execute(
                "INSERT INTO typed (id, k, t, d, dt, ts, tz) SELECT g, 'k' || g, repeat('y', g), "
                "g / 3.0, 'infinity', '-infinity', now() FROM generate_series(2, 300) g"
            )
            cur.execute("UPDATE typed SET s = 1, b = false WHERE id < 50")
            cur.execute("UPDATE typed SET k = k || '!' WHERE id BETWEEN 50 AND 60")  # key change
            cur.execute("DELETE FROM typed WHERE id > 250")
            cur.execute("INSERT INTO full_id SELECT g, 'v' || g, g FROM generate_series(1, 50) g")
            cur.execute("UPDATE full_id SET w = NULL WHERE id < 10")
            cur.execute("UPDATE full_id SET id = id + 100 WHERE id > 40")
            cur.execute("DELETE FROM full_id WHERE id < 5")
        _caught_up(relay.url, conn)
    assert mismatches == [] and len(compared) > 450
    conn.close()


class _BulkRuns:
    """Watches the bulk path (``runs.py``) of the relays a test starts: the runs it took and
    handed back (their lengths), and every taken run whose events differ from the row
    path's. The compiled transcoder, which takes runs before it, is off."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
        from sluice.capture.postgres import capture as pg_capture
        from sluice.capture.postgres.runs import RunTranscoder

        self.taken: list[int] = []
        self.handed_back: list[int] = []
        self.mismatches: list[str] = []
        tables: list[Any] = []
        bulk, describe = RunTranscoder.events, pg_capture.PostgresCapture._describe

        def watched(transcoder: RunTranscoder, payloads: list[bytes]) -> list[bytes] | None:
            out = bulk(transcoder, payloads)
            if out is None:
                self.handed_back.append(len(payloads))
                return None
            self.taken.append(len(payloads))
            table = next(t for t in tables if t.runs is transcoder)
            rows = [e for p in payloads for e in table.fast(p[0], p)]  # the row path
            if rows != out:
                self.mismatches.append(f"{len(payloads)} rows from {payloads[0][:40]!r}")
            return out

        def remember(capture: Any, relation: Any) -> Any:
            table = describe(capture, relation)
            tables.append(table)
            return table

        monkeypatch.setattr(RunTranscoder, "events", watched)
        monkeypatch.setattr(pg_capture.PostgresCapture, "_describe", remember)


def test_large_transactions_take_the_bulk_path_and_give_the_row_paths_bytes(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of a relation's inserts and updates in a large transaction are transcoded at once
    (``runs.py``); every run is also transcoded row by row and must give the same events, a
    run the bulk path hands back is captured by the row path, and the replica matches."""
    runs = _BulkRuns(monkeypatch)
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE bulk (id bigint PRIMARY KEY, a int, s smallint, f double precision, "
            "d date, ts timestamp, tz timestamptz, v varchar(20), n numeric(12,3), j jsonb, "
            "u uuid, b boolean)"
        )
    with RelayThread(_config(postgres, pg_database, ["public.bulk"], tmp_path / "r")) as relay:
        start = get_json(relay.url + "/stats")["min_scn"]
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO bulk SELECT g, g * 7 - 3000, g % 32000, g / 7.0, "
                "date '2000-02-28' + g, timestamp '1999-12-31 23:59:59.5' + g * interval '1.25 s', "
                "now() - g * interval '1 day', 'ä ' || g, g / 3.0, jsonb_build_object('g', g), "
                "md5(g::text)::uuid, g % 2 = 0 FROM generate_series(-500, 500) g"
            )
            cur.execute("UPDATE bulk SET f = 'NaN', v = NULL, a = NULL, b = NULL WHERE id % 3 = 0")
            cur.execute("UPDATE bulk SET f = '-Infinity', ts = NULL WHERE id % 3 = 1")
            # a run with a date the bulk path cannot take (infinity) goes row by row
            cur.execute("UPDATE bulk SET d = 'infinity' WHERE id = 17")
            cur.execute("UPDATE bulk SET s = s + 1 WHERE id BETWEEN 0 AND 99")
        _caught_up(relay.url, conn)
        replica = ReplicaConsumer()
        consume(relay.url, replica, since_scn=start)
    assert runs.mismatches == []
    # Transactions read in one go make one run; a run refused is tried again window by
    # window, so only the windows holding the infinity date go row by row (id % 3 = 1: the
    # third update has 167 rows).
    assert sum(runs.taken) == 1001 + 333 + 167 and runs.handed_back[-1] == 100
    with conn.cursor() as cur:
        cur.execute("SELECT id, a, s, v, b, d IS NULL FROM bulk")
        truth = {json.dumps({"id": i}): rest for i, *rest in cur}
    rows = replica.rows["public.bulk"]
    assert len(rows) == len(truth) == 1001
    for key, expected in truth.items():
        row = rows[key.replace(" ", "")]
        assert [row["a"], row["s"], row["v"], row["b"], row["d"] is None] == expected, key
    assert rows['{"id":17}']["d"] == "infinity"
    conn.close()


def test_a_backlog_of_small_transactions_is_read_in_runs_and_keeps_its_windows(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Transactions read in one go (a relay catching up) make runs that span windows, which
    the bulk path transcodes at once; every window still holds exactly its own transaction's
    events, in commit order, with a window the bulk path refuses, a transaction over two
    tables and a TRUNCATE among them."""
    runs = _BulkRuns(monkeypatch)
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE small (id bigint PRIMARY KEY, a int, v varchar(20), d date)")
        cur.execute("CREATE TABLE side (id int PRIMARY KEY)")
    config = _config(postgres, pg_database, ["public.small", "public.side"], tmp_path / "r")
    with RelayThread(config) as relay:  # makes the slot; the workload then waits in it
        start = get_json(relay.url + "/stats")["min_scn"]
    expected: list[list[tuple[str, str, int | None]]] = []
    with conn.cursor() as cur:
        for i in range(600):
            if i % 150 == 75:  # one transaction, two tables: the run of small is cut by it
                cur.execute("BEGIN")
                cur.execute(f"INSERT INTO small VALUES ({i}, {i}, 'v{i}', '2024-01-01')")
                cur.execute(f"INSERT INTO side VALUES ({i})")
                cur.execute(f"INSERT INTO small VALUES ({i + 10_000}, 0, NULL, NULL)")
                cur.execute("COMMIT")
                expected.append([("small", "c", i), ("side", "c", i), ("small", "c", i + 10_000)])
            elif i == 300:  # the bulk path refuses infinity: its window goes row by row
                cur.execute(f"INSERT INTO small VALUES ({i}, {i}, 'inf', 'infinity')")
                expected.append([("small", "c", i)])
            elif i == 450:
                cur.execute("TRUNCATE side")
                expected.append([("side", "t", None)])
            else:
                cur.execute(f"INSERT INTO small VALUES ({i}, {i * 3}, 'v{i}', '2024-01-01')")
                expected.append([("small", "c", i)])
    with RelayThread(config.model_copy(update={"since_scn": start})) as relay:
        _caught_up(relay.url, conn)
        recorder = RecordingConsumer()
        consume(relay.url, recorder, since_scn=start)
    got = [
        [(e.source.split(".")[1], e.op, e.key["id"] if e.key else None) for e in w.events]
        for w in recorder.windows
    ]
    assert got == expected
    scns = [w.scn for w in recorder.windows]
    assert scns == sorted(set(scns))
    # one or two rows of small per transaction: a run of more than 64 spans windows
    assert runs.taken and max(runs.taken) > 64 and runs.mismatches == []
    by_id = {e.key["id"]: e.after for e in recorder.events if e.source == "public.small"}
    assert by_id[299] == {"id": 299, "a": 897, "v": "v299", "d": "2024-01-01"}
    assert by_id[300]["d"] == "infinity"
    assert by_id[10_075] == {"id": 10_075, "a": 0, "v": None, "d": None}
    conn.close()


def test_a_transaction_bigger_than_the_buffer_is_held_beside_it_within_its_limit(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    """A transaction 40 times the buffer is handed over in parts as it is read: over the
    disk limit for held windows it is refused naming the setting (the windows before it are
    still served); under it, it is served whole, in one window."""
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE huge (id int PRIMARY KEY, v text)")
    config = _config(postgres, pg_database, ["public.huge"], tmp_path / "r", buffer_size=64 * 1024)
    with RelayThread(config) as relay:  # makes the slot; the workload then waits in it
        start = get_json(relay.url + "/stats")["min_scn"]
    with conn.cursor() as cur:
        cur.execute("INSERT INTO huge VALUES (0, 'small')")
        # ~20,000 events of ~130 bytes: ~2.6 MB, 40 times the buffer
        cur.execute("INSERT INTO huge SELECT g, repeat('x', 100) FROM generate_series(1, 20000) g")
    with RelayThread(config.model_copy(update={"since_scn": start})) as relay:
        health: dict[str, Any] = {}

        def unhealthy() -> bool:
            nonlocal health
            status, health = http_status(relay.url + "/healthz")
            return status == 503

        wait_for(unhealthy, 30, "the relay to report the refused transaction")
        assert "--window-files-bytes" in str(health["error"])  # 16 x 64 KiB by default
        recorder = RecordingConsumer()
        consume(relay.url, recorder)  # still serves what it holds
        assert [e.key for e in recorder.events] == [{"id": 0}]
    bigger = {"since_scn": start, "window_files_bytes": 8 << 20}
    with RelayThread(config.model_copy(update=bigger)) as relay:
        _caught_up(relay.url, conn)
        wait_for(lambda: get_json(relay.url + "/stats")["events"] == 20_001, 30, "the window")
        assert get_json(relay.url + "/stats")["window_files"]["windows"] == 1
        replica = ReplicaConsumer()
        consume(relay.url, replica, since_scn=start)
        recorder = RecordingConsumer()
        consume(relay.url, recorder, since_scn=start)
    assert [len(w.events) for w in recorder.windows] == [1, 20_000]
    assert len(replica.snapshot("public.huge")) == 20_001
    conn.close()


def test_a_slot_in_use_is_refused_and_a_restarted_server_is_resumed(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE a (id int PRIMARY KEY, v text)")
    config = _config(postgres, pg_database, ["public.a"], tmp_path / "one")
    with RelayThread(config) as relay:
        start = get_json(relay.url + "/stats")["min_scn"]
        # A second relay on the same slot: one clear line, before it serves anything.
        second = subprocess.run(
            [
                *SLUICE,
                "relay",
                "--source",
                postgres.source_url(pg_database),
                "--table",
                "public.a",
                "--port",
                "0",
                "--data-dir",
                str(tmp_path / "two"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode != 0 and "Traceback" not in second.stderr
        assert "replication slot sluice is in use" in second.stderr
        with conn.cursor() as cur:
            cur.execute("INSERT INTO a VALUES (1, 'before the restart')")
        _caught_up(relay.url, conn)
        conn.close()
        postgres.stop_server()  # the server goes away and comes back on the same port
        postgres.start()
        conn = postgres.connect(pg_database)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO a VALUES (2, 'after the restart')")
        wait_for(
            lambda: get_json(relay.url + "/stats")["capture"]["reconnects"] >= 1, 60, "reconnect"
        )
        _caught_up(relay.url, conn)
        replica = ReplicaConsumer()
        consume(relay.url, replica, since_scn=start)
    assert replica.snapshot("public.a") == _truth(conn, "a")
    assert len(replica.snapshot("public.a")) == 2
    conn.close()


def test_replica_identity_default_and_full_give_the_documented_before_images(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    """DEFAULT: no before image for an update, the key alone for a delete, and an unchanged
    TOASTed text the server did not send is the marker, never null. FULL: whole images."""
    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        for name in ("def_id", "full_id"):
            cur.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, n int, big text)")
            cur.execute(f"ALTER TABLE {name} ALTER COLUMN big SET STORAGE EXTERNAL")
        cur.execute("ALTER TABLE full_id REPLICA IDENTITY FULL")
    tables = ["public.def_id", "public.full_id"]
    big = "".join(f"{n:08x}" for n in range(2000))  # 16 KB, stored out of line (TOAST)
    with RelayThread(_config(postgres, pg_database, tables, tmp_path / "r")) as relay:
        start = get_json(relay.url + "/stats")["min_scn"]
        with conn.cursor() as cur:
            for name in ("def_id", "full_id"):
                cur.execute(f"INSERT INTO {name} VALUES (1, 1, %s), (2, 2, 'small')", (big,))
                cur.execute(f"UPDATE {name} SET n = 10 WHERE id = 1")  # big unchanged
                cur.execute(f"DELETE FROM {name} WHERE id = 2")
        _caught_up(relay.url, conn)
        recorder = RecordingConsumer()
        consume(relay.url, recorder, since_scn=start)
        sources = {s["source"]: s for s in get_json(relay.url + "/sources")["sources"]}
    assert sources["public.def_id"]["replica_identity"] == "DEFAULT"
    assert sources["public.full_id"]["replica_identity"] == "FULL"
    events = {(e.source, e.op): e for e in recorder.events}
    update = events[("public.def_id", "u")]
    assert update.before is None
    assert update.after == {"id": 1, "n": 10, "big": "__sluice_unchanged_toast__"}
    delete = events[("public.def_id", "d")]
    assert delete.before == {"id": 2, "n": None, "big": None} and delete.after is None
    update = events[("public.full_id", "u")]
    assert update.before == {"id": 1, "n": 1, "big": big}
    assert update.after == {"id": 1, "n": 10, "big": big}
    assert events[("public.full_id", "d")].before == {"id": 2, "n": 2, "big": "small"}
    conn.close()


def _server_pids(pg: PrivatePostgres) -> list[int]:
    """Every process of the server: its children call setsid(), so not one process group."""
    assert pg._proc is not None
    pids = [pg._proc.pid]
    for pid in pids:  # grows while walked: children of children
        children = Path(f"/proc/{pid}/task/{pid}/children")
        if children.exists():
            pids += [int(p) for p in children.read_text().split()]
    return pids


def test_a_frozen_server_shows_in_healthz_and_capture_resumes(
    tmp_path: Path,
) -> None:
    with PrivatePostgres(tmp_path / "pg") as pg:
        conn = pg.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE kv (k int PRIMARY KEY, v int)")
        config = _config(pg, "postgres", ["public.kv"], tmp_path / "relay")
        with RelayThread(config) as relay:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO kv SELECT g, g FROM generate_series(1, 20) g")
            _caught_up(relay.url, conn)
            assert _health(relay.url) == "ok"
            pids = _server_pids(pg)
            for pid in pids:  # frozen, as a paused VM: keepalives stop
                os.kill(pid, signal.SIGSTOP)
            try:
                wait_for(lambda: _health(relay.url) == "source silent", 30, "health: silent")
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
            wait_for(lambda: _health(relay.url) == "ok", 60, "health: ok again")
            with conn.cursor() as cur:
                cur.execute("UPDATE kv SET v = -1 WHERE k < 5")
            _caught_up(relay.url, conn)
            replica = ReplicaConsumer()
            consume(relay.url, replica, since_scn=get_json(relay.url + "/stats")["min_scn"])
            assert replica.snapshot("public.kv") == {
                json.dumps({"k": k}, separators=(",", ":")): {"k": k, "v": -1 if k < 5 else k}
                for k in range(1, 21)
            }
        conn.close()
        pg.kill()  # a thawed server's fast shutdown can hang for its full 30 s here


def _health(url: str) -> str:
    status, body = http_status(url + "/healthz")
    if status == 200:
        return "ok"
    return str(body.get("status")) if isinstance(body, dict) else str(status)


def test_a_relay_killed_between_flushes_loses_and_repeats_nothing(
    postgres: PrivatePostgres, pg_database: str, tmp_path: Path
) -> None:
    """With ``persist_interval_ms`` long, windows captured after a flush are held but not
    flushed, and the slot is not confirmed past the flush; after SIGKILL the restarted relay
    holds every window once (from its buffer's intact pages or read again from the slot)."""
    from sluice.testing import RelayProcess, free_port

    conn = postgres.connect(pg_database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE flushed (id int PRIMARY KEY, v text)")
    (tmp_path / "relay.toml").write_text("persist_interval_ms = 60000\n")
    args = ["--source", postgres.source_url(pg_database), "--table", "public.flushed"]
    args += ["--port", str(free_port()), "--data-dir", str(tmp_path / "r")]
    relay = RelayProcess([*args, "--config", str(tmp_path / "relay.toml")], tmp_path / "log")
    relay.start()
    try:
        start = get_json(relay.url + "/stats")["min_scn"]
        with conn.cursor() as cur:
            cur.execute("INSERT INTO flushed VALUES (1, 'flushed')")
        _caught_up(relay.url, conn)
        # captured is not yet in the buffer: wait for the window itself
        wait_for(lambda: get_json(relay.url + "/stats")["events"] == 1, 30, "the window")
        first = get_json(relay.url + "/stats")["max_scn"]
        wait_for(
            lambda: get_json(relay.url + "/stats")["persist"]["persisted_scn"] >= first,
            30,
            "the first flush",
        )
        with conn.cursor() as cur:
            cur.execute("INSERT INTO flushed VALUES (2, 'held')")
            cur.execute("UPDATE flushed SET v = 'held too' WHERE id = 1")
        _caught_up(relay.url, conn)
        wait_for(lambda: get_json(relay.url + "/stats")["events"] == 3, 30, "the windows")
        stats = get_json(relay.url + "/stats")
        assert stats["persist"]["persisted_scn"] == first < stats["max_scn"]
        with conn.cursor() as cur:
            cur.execute(
                "SELECT confirmed_flush_lsn - '0/0'::pg_lsn FROM pg_replication_slots "
                "WHERE database = %s",
                (pg_database,),
            )
            assert int(cur.fetchone()[0]) <= first  # never past what was flushed
    finally:
        relay.kill()
    relay = RelayProcess(args, tmp_path / "log2").start()
    try:
        _caught_up(relay.url, conn)
        recorder = RecordingConsumer()
        consume(relay.url, recorder, since_scn=start)
        replica = ReplicaConsumer()
        consume(relay.url, replica, since_scn=start)
    finally:
        relay.stop()
    scns = [window.scn for window in recorder.windows]
    assert len(scns) == len(set(scns)) == 3
    assert {k: r["v"] for k, r in replica.rows["public.flushed"].items()} == {
        '{"id":1}': "held too",
        '{"id":2}': "held",
    }
    conn.close()
