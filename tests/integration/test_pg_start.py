"""PostgreSQL capture's start: the captured tables' catalog facts are read ahead while the
server starts decoding, and a table's first Relation message uses them only when its columns
are the catalog's (a generated column, which pgoutput leaves out, makes it ask again): the
schemas and events are those of a capture that reads nothing ahead."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sluice.capture import CapturedWindow, CaptureSettings
from sluice.capture.postgres import capture as pg_capture
from sluice.capture.postgres.capture import PostgresCapture
from sluice.capture.postgres.setup import parse_pg_url
from sluice.schemas import SchemaRegistry
from sluice.testing.postgres import PrivatePostgres

TABLES = ("public.gen", "public.plain")


def _capture(url: str, start: int, stop: int) -> tuple[list[CapturedWindow], SchemaRegistry]:
    windows: list[CapturedWindow] = []
    done = threading.Event()

    def sink(window: CapturedWindow) -> None:
        windows.append(window)
        if window.scn > stop:  # the commit after stop: every earlier one is in
            done.set()

    registry = SchemaRegistry()
    capture = PostgresCapture(parse_pg_url(url), CaptureSettings(TABLES, registry, sink))
    capture.start(start)
    assert done.wait(60), "capture did not reach the workload's end"
    capture.stop()
    return windows, registry


def test_catalog_facts_read_ahead_give_the_same_schemas_and_events(
    postgres: PrivatePostgres, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = postgres.connect(pg_database)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("CREATE DOMAIN posint AS int CHECK (VALUE > 0)")
        cur.execute(
            "CREATE TABLE gen (id int PRIMARY KEY, a int, "
            "g int GENERATED ALWAYS AS (a * 2) STORED, d posint)"
        )
        cur.execute("CREATE TABLE plain (id int PRIMARY KEY, v text NOT NULL DEFAULT 'x')")
    urls = [postgres.source_url(pg_database, slot=s, publication="sluice") for s in "ab"]
    for url in urls:  # both slots made before the workload: they read the same WAL
        settings = CaptureSettings(TABLES, SchemaRegistry(), lambda window: None)
        start = PostgresCapture(parse_pg_url(url), settings).check().end_scn
    with conn.cursor() as cur:
        cur.execute("INSERT INTO gen (id, a, d) SELECT g, g, g FROM generate_series(1, 100) g")
        cur.execute("INSERT INTO plain (id) SELECT g FROM generate_series(1, 100) g")
        cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
        (stop,) = cur.fetchone()
        cur.execute("INSERT INTO plain VALUES (0, 'last')")  # a commit after stop
    conn.close()

    asked: list[tuple[str, bool]] = []  # (table, with the Relation message's columns)
    facts = pg_capture.catalog_facts

    def counted(conn: Any, namespace: str, table: str, columns: Any = None) -> Any:
        asked.append((table, columns is not None))
        return facts(conn, namespace, table, columns)

    monkeypatch.setattr(pg_capture, "catalog_facts", counted)
    ahead, ahead_registry = _capture(urls[0], start, stop)
    # read ahead for both; gen's Relation message lacks its generated column: asked again
    assert sorted(asked) == [("gen", False), ("gen", True), ("plain", False)]
    asked.clear()
    monkeypatch.setattr(pg_capture, "PREFETCH_TABLES", 0)
    plain, plain_registry = _capture(urls[1], start, stop)
    assert sorted(asked) == [("gen", True), ("plain", True)]

    assert [(w.scn, w.events) for w in ahead] == [(w.scn, w.events) for w in plain]
    assert sum(len(w.events) for w in ahead) == 201
    for source in TABLES:
        schema = ahead_registry.get(source, 1)
        assert schema == plain_registry.get(source, 1)
    gen = ahead_registry.get("public.gen", 1)
    assert [(c.name, c.kind) for c in gen.columns] == [("id", "int"), ("a", "int"), ("d", "int")]
    (v,) = [c for c in ahead_registry.get("public.plain", 1).columns if c.name == "v"]
    assert v.default == "x" and v.source_nullable is False
