"""Differential test: Sluice's decoder and python-mysql-replication read the same binlog.

Randomized rows of every type go through both; python-mysql-replication's values are mapped
to the design brief's JSON, and its known decoding bugs (../shared/facts/binlog.md) are
normalized away on both sides before comparing, so the test checks our decoder everywhere
the reference is right.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import re
import threading
from decimal import Decimal
from typing import Any

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from sluice.capture import CapturedWindow
from sluice.capture.mysql.capture import MySQLCapture
from sluice.capture.mysql.metadata import end_scn
from sluice.capture.mysql.scn import scn_position
from sluice.capture.mysql.tables import TableDecoder
from sluice.capture.mysql.url import parse_source_url
from sluice.core.event import Event
from sluice.core.wire import encode_window
from sluice.schemas import SchemaRegistry
from sluice.schemas.columns import json_converter, shortest_float32
from sluice.schemas.events import decode_window, window_json
from sluice.testing import PrivateMariaDB
from tests.integration.workload import ALL_TYPES_DDL, random_all_types

_BINARY_PADDED = {"bn": 8}
_SETS = {"st": ["a", "b", "c", "d"]}


def _reference_value(name: str, kind: str, value: Any) -> Any:
    """python-mysql-replication's value as our JSON, with its known bugs normalized."""
    if kind == "set" and not value:
        return "<empty-set-or-null>"  # the reference gives None for both
    if value is None:
        return None
    if kind == "year" and value == 1900:
        return 0  # YEAR 0000: the reference adds 1900 to the stored 0
    if kind == "string" and isinstance(value, bytes):
        return value.decode("utf-16-be")  # the reference leaves ucs2 text undecoded
    if kind == "set":
        members = value if isinstance(value, set) else set(value.split(",")) - {""}
        return [m for m in _SETS[name] if m in members]
    if kind == "bit":
        return int(value, 2) if isinstance(value, str) else int(value)
    if kind == "uint64":
        return int(value, 2) if isinstance(value, str) else int(value)
    if kind in ("bytes", "geometry"):
        raw = value.encode() if isinstance(value, str) else value
        return base64.b64encode(raw.rstrip(b"\0") if name in _BINARY_PADDED else raw).decode()
    if kind in ("uuid", "inet6"):
        return "<padded-binary>"  # reference returns raw bytes minus trailing zeros
    if kind == "decimal":
        return format(Decimal(value), "f")
    if kind == "float":
        return shortest_float32(value)
    if kind == "time":
        if value < dt.timedelta(0) and value.microseconds:
            return "<negative-time-with-fraction>"  # reference is wrong here
        return json_converter("time")(
            value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
        )
    if kind == "date":
        return value.isoformat() if isinstance(value, dt.date) else None
    if kind == "datetime":
        return value.isoformat() if isinstance(value, dt.datetime) else None
    if kind == "timestamp":
        if not isinstance(value, dt.datetime):
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat() + "Z"
    if kind == "json":
        return json.loads(value)
    return value


def _normalize_ours(
    row: dict[str, Any] | None, kinds: dict[str, str], ref: dict[str, Any] | None
) -> dict[str, Any] | None:
    if row is None or ref is None:
        return row
    out = dict(row)
    for name in kinds:
        if isinstance(ref.get(name), str) and ref[name].startswith("<"):
            out[name] = ref[name]  # a known reference bug: compared elsewhere (truth tests)
        elif name in _BINARY_PADDED and out[name] is not None:
            raw = base64.b64decode(out[name]).rstrip(b"\0")
            out[name] = base64.b64encode(raw).decode()
    return out


def _workload(conn: pymysql.Connection[Any], rows: int) -> None:
    rng = random.Random(99)
    with conn.cursor() as cur:
        for i in range(rows):
            row = random_all_types(rng, nulls=i % 2 == 0)  # odd rows take the no-NULL path
            cols = ", ".join(["id", *row])
            cur.execute(
                f"INSERT INTO alltypes ({cols}) VALUES ({', '.join(['%s'] * (len(row) + 1))})",
                (i, *row.values()),
            )
            if i % 3 == 0:
                upd = random_all_types(rng, nulls=i % 2 == 0)
                cur.execute(
                    f"UPDATE alltypes SET {', '.join(f'{c}=%s' for c in upd)} WHERE id=%s",
                    (*upd.values(), i),
                )
            if i % 7 == 0:
                cur.execute("DELETE FROM alltypes WHERE id=%s", (i,))


def _check_against_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    """Make every rows event also go through the slow path (values, then the schema's
    encoder); returns the lists that collect differing pairs and checked event counts."""
    mismatches: list[tuple[bytes, bytes]] = []
    checked_counts: list[int] = []
    fast = TableDecoder.events

    def checked(self: TableDecoder, event_type: int, body: bytes) -> list[bytes]:
        ours = fast(self, event_type, body)
        slow = list(self.reference_events(event_type, body))
        mismatches.extend((a, b) for a, b in zip(ours, slow, strict=True) if a != b)
        if len(ours) != len(slow):
            mismatches.append((b"count", b"%d != %d" % (len(ours), len(slow))))
        checked_counts.append(len(ours))
        return ours

    monkeypatch.setattr(TableDecoder, "events", checked)
    return mismatches, checked_counts


def _capture(
    mariadb: PrivateMariaDB,
    sources: tuple[str, ...],
    start: int,
    stop: int,
    tables: dict[str, Any] | None = None,
) -> tuple[list[CapturedWindow], SchemaRegistry]:
    """Capture ``sources`` over (start, stop]: the windows and the schemas they use; what
    capture reports of each table goes into ``tables``."""
    registry, windows, done = SchemaRegistry(), [], threading.Event()

    def sink(window: CapturedWindow) -> None:
        windows.append(window)
        if window.scn >= stop:
            done.set()

    capture = MySQLCapture(parse_source_url(mariadb.url).params(), sources, registry, sink)
    capture.start(start)
    assert done.wait(120)
    capture.stop()
    if tables is not None:
        tables.update(capture.stats.tables)
    return windows, registry


def _events(windows: list[CapturedWindow], registry: SchemaRegistry) -> list[Event]:
    return [
        e
        for w in windows
        for e in decode_window(encode_window(w.scn, 0, w.ts_ms, w.events), registry.codec).events
    ]


def test_decoders_agree_on_randomized_rows_of_every_type(
    mariadb: PrivateMariaDB, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mismatches, checked = _check_against_reference(monkeypatch)
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(ALL_TYPES_DDL)
    start = end_scn(conn)
    _workload(conn, 300)
    stop = end_scn(conn)
    conn.close()

    source = f"{database}.alltypes"
    windows, registry = _capture(mariadb, (source,), start, stop)
    ours = _events(windows, registry)
    kinds = {c.name: c.kind for c in registry.versions(source)[-1].columns}
    # The client's Avro -> JSON text path (sluice tail) writes what the event path writes.
    encoder = json.JSONEncoder(ensure_ascii=False)
    for w in windows:
        record = encode_window(w.scn, 0, w.ts_ms, w.events)
        assert list(window_json(record, registry.codec).lines) == [
            encoder.encode(e.to_json_dict()) for e in decode_window(record, registry.codec).events
        ]

    reader = BinLogStreamReader(
        connection_settings={
            "host": "127.0.0.1",
            "port": mariadb.port,
            "user": "root",
            "password": "",
        },
        server_id=5151,
        log_file=f"binlog.{start >> 32:06d}",
        log_pos=scn_position(start),
        resume_stream=True,
        blocking=False,
        only_tables=["alltypes"],
        only_schemas=[database],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    reference: list[tuple[str, Any, Any]] = []
    for event in reader:
        for row in event.rows:
            if isinstance(event, WriteRowsEvent):
                reference.append(("c", None, row["values"]))
            elif isinstance(event, UpdateRowsEvent):
                reference.append(("u", row["before_values"], row["after_values"]))
            else:
                reference.append(("d", row["values"], None))
    reader.close()

    def ref_row(values: dict[str, Any] | None) -> dict[str, Any] | None:
        if values is None:
            return None
        return {name: _reference_value(name, kinds[name], values[name]) for name in kinds}

    assert len(ours) == len(reference) > 300
    # The generated transcoder and the value-by-value path give the same bytes.
    assert sum(checked) == len(ours)
    assert mismatches == []
    for event, (op, before, after) in zip(ours, reference, strict=True):
        ref_before, ref_after = ref_row(before), ref_row(after)
        assert event.op == op
        assert _normalize_ours(event.before, kinds, ref_before) == ref_before
        assert _normalize_ours(event.after, kinds, ref_after) == ref_after


def test_keys_of_every_kind_match_the_value_path(
    mariadb: PrivateMariaDB, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Composite keys of text, temporal and decimal columns, and a table without a key: same
    bytes, key hashes and primary-key-change split as the value-by-value path."""
    mismatches, checked = _check_against_reference(monkeypatch)
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE keyed (name VARCHAR(20), at DATETIME(6), amount DECIMAL(8,2), "
            "v INT, note VARCHAR(10), PRIMARY KEY (name, at, amount)) ENGINE=InnoDB"
        )
        cur.execute("CREATE TABLE nokey (a INT, b VARCHAR(5)) ENGINE=InnoDB")
    start = end_scn(conn)
    rng = random.Random(7)
    with conn.cursor() as cur:
        for i in range(60):
            at = dt.datetime(1960 + i, 1 + i % 12, 1 + i % 28, i % 24, 0, 0, i * 1001)
            cur.execute(
                "INSERT INTO keyed VALUES (%s, %s, %s, %s, %s)",
                (
                    f"né-{i}",
                    at,
                    Decimal(rng.randint(-99999, 99999)) / 100,
                    i,
                    None if i % 2 else "x",
                ),
            )
        cur.execute("UPDATE keyed SET v = v + 1 WHERE v % 3 = 0")  # same key
        cur.execute("UPDATE keyed SET amount = amount + 1 WHERE v % 5 = 0")  # key changes
        cur.execute("DELETE FROM keyed WHERE v % 4 = 0")
        cur.executemany("INSERT INTO nokey VALUES (%s, %s)", [(n, str(n)) for n in range(6)])
        cur.execute("UPDATE nokey SET b = 'x' WHERE a < 2")
        cur.execute("DELETE FROM nokey WHERE a = 5")
    stop = end_scn(conn)
    conn.close()

    windows, registry = _capture(mariadb, (f"{database}.keyed", f"{database}.nokey"), start, stop)
    events = _events(windows, registry)
    assert mismatches == []
    assert sum(checked) == len(events)
    assert "".join(e.op for e in events if e.source.endswith(".nokey")) == "ccccccuud"
    ops = "".join(e.op for e in events if e.source.endswith(".keyed"))
    assert ops.count("c") == 60 + 12 and ops.count("u") == 20
    assert ops.count("d") == 12 + 15 and "dc" * 12 in ops  # key changes: delete + insert


# Every column kind takes the compiled transcoder (issue 40): all of ALL_TYPES_DDL, a
# Laravel-style table (BIGINT UNSIGNED AUTO_INCREMENT key, SET, TIME(6)), and keys of those.
_COMPILED_DDL = ALL_TYPES_DDL.replace("alltypes", "compiled")
_PRODUCT_DDL = """
CREATE TABLE product (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100) NOT NULL,
  tags SET('new','sale','gift') NOT NULL DEFAULT '', opens TIME(6), price DECIMAL(10,2),
  stock BIGINT UNSIGNED, flags BIT(8), created_at TIMESTAMP NULL DEFAULT NULL
) ENGINE=InnoDB
"""
_MEMBERS = ", ".join(f"'m{n}'" for n in range(64))
_SLOT_DDL = f"""
CREATE TABLE slot (
  tags SET({_MEMBERS}) NOT NULL, at TIME(6) NOT NULL, n BIGINT UNSIGNED NOT NULL,
  b BIT(10) NOT NULL, v INT, PRIMARY KEY (tags, at, n, b)
) ENGINE=InnoDB
"""
_TIMES = ["00:00:00", "-00:00:00.000001", "-12:34:56.789012", "838:59:59.999999",
          "-838:59:59", "25:00:00.5", "23:59:59.000001"]  # fmt: skip
_UINT64 = [0, 1, 2**63 - 1, 2**63, 2**64 - 1]


def _issue40_rows(cur: Any) -> None:
    """Products and slots with the edge values of uint64, SET, TIME(6) and BIT; updates
    that keep and that change the key; deletes."""
    every = ",".join(f"m{n}" for n in range(64))
    for i in range(60):
        tags = ["", "new", "new,sale,gift", "gift"][i % 4]
        cur.execute(
            "INSERT INTO product (name, tags, opens, price, stock, flags, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (f"p{i}", tags, _TIMES[i % 7], Decimal(i) / 4, _UINT64[i % 5], i % 256,
             None if i % 3 else "2024-06-30 12:00:00"),
        )  # fmt: skip
        cur.execute(
            "INSERT INTO slot VALUES (%s, %s, %s, %s, %s)",
            (["", "m0", "m63", every, "m1,m2,m40"][i % 5], _TIMES[i % 7], _UINT64[i % 5] - i % 2
             if _UINT64[i % 5] else i, i % 1024, i),
        )  # fmt: skip
    cur.execute("INSERT INTO product (id, name) VALUES (18446744073709551615, 'max')")
    cur.execute("UPDATE product SET tags = 'sale', opens = '-01:00:00.25' WHERE id % 3 = 0")
    cur.execute("UPDATE product SET id = id + 1000 WHERE id % 10 = 1")  # key changes
    cur.execute("DELETE FROM product WHERE id % 7 = 0")
    cur.execute("UPDATE slot SET v = v + 1")  # same key
    cur.execute("UPDATE slot SET at = '-00:00:01.5' WHERE v % 4 = 0")  # key changes
    cur.execute("DELETE FROM slot WHERE v % 5 = 0")


def test_the_compiled_path_gives_the_python_paths_bytes_on_a_real_server(
    mariadb: PrivateMariaDB, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mismatches, checked = _check_against_reference(monkeypatch)
    conn = mariadb.connect(database)
    rng = random.Random(31)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00', sql_mode = ''")  # zero dates too
        cur.execute(_COMPILED_DDL)
        cur.execute(_PRODUCT_DDL)
        cur.execute(_SLOT_DDL)
        cur.execute("CREATE TABLE named (name VARCHAR(20), n INT, v INT, PRIMARY KEY (name, n))")
        cur.execute("CREATE TABLE loose (a INT, b VARCHAR(5))")
    start = end_scn(conn)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00', sql_mode = ''")
        columns = [c for c in re.findall(r"\b([a-z0-9]+) [A-Z]", _COMPILED_DDL) if c != "id"]
        for i in range(200):
            full = random_all_types(rng, nulls=i % 2 == 0)
            row = {c: full[c] for c in columns if c in full}
            marks = ", ".join(["%s"] * (len(row) + 1))
            cur.execute(
                f"INSERT INTO compiled (id, {', '.join(row)}) VALUES ({marks})", (i, *row.values())
            )
        cur.execute("UPDATE compiled SET i = i DIV 2, vc = 'é', dt = NULL WHERE id % 3 = 0")
        cur.execute("UPDATE compiled SET id = id + 1000 WHERE id % 10 = 1")  # key changes
        cur.execute("DELETE FROM compiled WHERE id % 7 = 0")
        names = ["plain", 'q"uote', "back\\slash", "new\nline", "tab\t", "😀 é", "\x01"]
        cur.executemany(
            "INSERT INTO named VALUES (%s, %s, %s)",
            [(name, n, n) for name in names for n in range(3)],
        )
        cur.execute("UPDATE named SET v = v + 1")
        cur.execute("UPDATE named SET n = n + 10 WHERE n = 1")
        cur.execute("DELETE FROM named WHERE n = 2")
        cur.executemany("INSERT INTO loose VALUES (%s, %s)", [(n, str(n)) for n in range(6)])
        cur.execute("UPDATE loose SET b = 'x' WHERE a < 2")
        cur.execute("DELETE FROM loose WHERE a = 5")
        _issue40_rows(cur)
    stop = end_scn(conn)
    conn.close()

    tables_made = ("compiled", "named", "loose", "product", "slot")
    sources = tuple(f"{database}.{t}" for t in tables_made)
    tables: dict[str, Any] = {}
    compiled, registry = _capture(mariadb, sources, start, stop, tables)
    monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
    python, _ = _capture(mariadb, sources, start, stop)
    assert {tables[s]["transcoder"] for s in sources} == {"compiled"}, tables
    assert mismatches == []  # the compiled path's bytes equal the value-by-value path's
    ours = [(w.scn, w.events) for w in compiled]
    assert ours == [(w.scn, w.events) for w in python]  # and the generated Python path's
    # both runs went through the check: every event of each
    assert sum(checked) == 2 * sum(len(w.events) for w in compiled) > 1000
    events = _events(compiled, registry)
    product = [e for e in events if e.source.endswith(".product")]
    assert {e.key["id"] for e in product} >= {2**64 - 1, 1}
    slots = [e.after for e in events if e.source.endswith(".slot") and e.after]
    assert {r["at"] for r in slots} >= {"-12:34:56.789012", "838:59:59.999999", "-00:00:01.500000"}
    assert {len(r["tags"]) for r in slots} == {0, 1, 3, 64}
