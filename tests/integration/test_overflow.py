"""A client behind the buffer gets 410; the relay keeps serving the others."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pymysql
import pytest

from sluice.client import RetryPolicy
from sluice.client import client as client_module
from sluice.core import wire
from sluice.core.event import JsonWindow
from sluice.core.pieces import Piece
from sluice.errors import BootstrapRequired
from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread
from tests.integration.support import (
    consume,
    get_json,
    http_status,
    relay_config,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)


def test_overflow_gives_410_and_others_keep_streaming(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    source = f"{database}.blob_log"
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE blob_log (id INT PRIMARY KEY, body VARBINARY(2000))")
    config = relay_config(mariadb, [source], tmp_path / "relay", buffer_size=64 * 1024)
    with RelayThread(config) as relay, conn.cursor() as cur:
        start = get_json(relay.url + "/stats")["min_scn"]
        for i in range(200):  # ~400 KB through a 64 KB buffer
            cur.execute("INSERT INTO blob_log VALUES (%s, %s)", (i, bytes([i % 256]) * 2000))
        wait_relay_caught_up(relay.url, conn)
        stats = get_json(relay.url + "/stats")
        assert stats["min_scn"] > start and stats["bytes"] <= stats["buffer_capacity"]

        status, body = http_status(f"{relay.url}/stream?since_scn={start}")
        assert status == 410 and body["oldest_scn"] == stats["min_scn"]

        with pytest.raises(BootstrapRequired) as info:
            consume(relay.url, RecordingConsumer(), since_scn=start)
        assert "bootstrap" in str(info.value)

        tail = run_sluice(
            "tail", "--relay", relay.url, "--since-scn", str(start), "--until-caught-up", timeout=60
        )
        assert tail.returncode == 1 and "bootstrap" in tail.stderr
        assert "Traceback" not in tail.stderr

        recent = RecordingConsumer()
        consume(relay.url, recent, since_scn=stats["min_scn"])
        ids = [e.key["id"] for e in recent.events]  # type: ignore[index]
        assert ids == list(range(ids[0], 200)) and len(ids) == stats["events"]
        cur.execute("INSERT INTO blob_log VALUES (1000, 'still capturing')")
        wait_relay_caught_up(relay.url, conn)
        more = RecordingConsumer()
        consume(relay.url, more, since_scn=get_json(relay.url + "/stats")["min_scn"])
        assert more.events[-1].key == {"id": 1000}


def _big_table(conn: pymysql.Connection[Any], database: str) -> str:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, body VARBINARY(2000))")
    return f"{database}.big"


def _wait_held(relay_url: str, conn: pymysql.Connection[Any]) -> None:
    """Until the buffer holds everything the server has logged (not just captured)."""
    target = wait_relay_caught_up(relay_url, conn)
    wait_for(lambda: get_json(relay_url + "/stats")["max_scn"] >= target, 30, "the buffer")


def _big_transaction(cur: Any, first: int, count: int, size: int = 2000) -> None:
    cur.execute("BEGIN")
    cur.executemany(
        "INSERT INTO big VALUES (%s, %s)",
        [(i, bytes([i % 251]) * size) for i in range(first, first + count)],
    )
    cur.execute("COMMIT")


def test_a_transaction_bigger_than_the_buffer_is_served_whole(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    """A transaction of ~6x the buffer is held in a file beside it and served whole, in SCN
    order, raw, as JSON and by key partition, to a live reader and to one that comes later,
    and again after a restart."""
    source = _big_table(conn, database)
    config = relay_config(mariadb, [source], tmp_path / "relay", buffer_size=64 * 1024)
    with RelayThread(config) as relay, conn.cursor() as cur:
        start = get_json(relay.url + "/stats")["min_scn"]
        cur.execute("INSERT INTO big VALUES (0, 'before')")
        _big_transaction(cur, 1, 200)  # ~400 KB
        cur.execute("INSERT INTO big VALUES (1000, 'after')")
        _wait_held(relay.url, conn)
        stats = get_json(relay.url + "/stats")
        assert stats["window_files"]["windows"] == 1
        assert stats["window_files"]["bytes"] > 6 * stats["buffer_capacity"]
        assert stats["bytes"] <= stats["buffer_capacity"] and stats["min_scn"] == start

        live = RecordingConsumer()
        consume(relay.url, live, since_scn=start)
        ids = [e.key["id"] for e in live.events]  # type: ignore[index]
        assert ids == [0, *range(1, 201), 1000]
        scns = [e.scn for e in live.events]
        assert len(set(scns[1:201])) == 1 and scns[0] < scns[1] < scns[201]
        body = base64.b64encode(bytes([150]) * 2000).decode()
        assert live.events[150].after == {"id": 150, "body": body}

        parts = [RecordingConsumer(), RecordingConsumer()]
        for i, part in enumerate(parts):
            consume(relay.url, part, since_scn=start, partition=f"{i}/2")
        split = sorted(e.key["id"] for p in parts for e in p.events)  # type: ignore[index]
        assert split == sorted(ids) and all(p.events for p in parts)

        tail = run_sluice(
            "tail", "--relay", relay.url, "--since-scn", str(start), "--until-caught-up"
        )
        lines = [json.loads(line) for line in tail.stdout.splitlines()]
        assert [line["key"]["id"] for line in lines] == ids

        offsets = get_json(f"{relay.url}/offsets?since_scn={start}&max_events=100")
        assert offsets["scn"] == scns[0]  # whole windows only: the big one does not fit
        offsets = get_json(f"{relay.url}/offsets?since_scn={scns[0]}&max_events=1&sources={source}")
        assert offsets == {"scn": scns[1], "events": 200, "max_scn": stats["max_scn"]}

    with RelayThread(config) as relay:  # restored from the buffer and the window's file
        again = RecordingConsumer()
        consume(relay.url, again, since_scn=start)
        assert [e.key["id"] for e in again.events] == ids  # type: ignore[index]


def test_held_windows_evict_older_ones_within_their_disk_limit(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    """The files of held windows stay under window_files_bytes: older windows are evicted
    (their readers get 410) and their files removed; one transaction bigger than the whole
    limit stops capture with an error naming the setting."""
    source = _big_table(conn, database)
    config = relay_config(
        mariadb, [source], tmp_path / "relay", buffer_size=64 * 1024, window_files_bytes=1 << 20
    )
    files = tmp_path / "relay" / "windows"
    with RelayThread(config) as relay, conn.cursor() as cur:
        start = get_json(relay.url + "/stats")["min_scn"]
        for n in range(4):  # 4 x ~400 KB through a 1 MiB limit
            _big_transaction(cur, 1 + n * 200, 200)
        _wait_held(relay.url, conn)
        stats = get_json(relay.url + "/stats")
        held = stats["window_files"]
        assert held["windows"] == 2 and held["bytes"] <= 1 << 20
        assert len(list(files.iterdir())) == 2
        status, _ = http_status(f"{relay.url}/stream?since_scn={start}")
        assert status == 410
        newest = RecordingConsumer()
        consume(relay.url, newest, since_scn=stats["min_scn"])
        assert [e.key["id"] for e in newest.events] == list(range(401, 801))  # type: ignore[index]

        _big_transaction(cur, 2000, 600)  # ~1.2 MB: more than the whole limit

        def unhealthy() -> bool:
            return http_status(relay.url + "/healthz")[0] == 503

        wait_for(unhealthy, 30, "the relay to report the refused window")
        health = http_status(relay.url + "/healthz")[1]
        assert "--window-files-bytes" in health["error"]
        assert not (files / "open.tmp").exists()


def test_the_bootstrap_log_takes_a_big_window_in_pieces(
    mariadb: PrivateMariaDB,
    database: str,
    conn: pymysql.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sluice source's reader (here driven by the bootstrap log's writer) takes a window
    bigger than a piece in pieces, never whole: the log gets every event once, numbered
    0..n-1 within the window as if it had come whole."""
    from sluice.bootstrap.logwriter import LogWriter
    from sluice.bootstrap.reader import committed_files
    from sluice.bootstrap.store import BootstrapStore
    from sluice.spark import fetch

    monkeypatch.setattr(fetch, "PIECE_BYTES", 256 * 1024)  # ~24 pieces
    pieces: list[int] = []
    whole = fetch.frames_in_pieces

    def spy(*args: Any) -> Any:
        for frame in whole(*args):
            if isinstance(frame, Piece):
                pieces.append(frame.first_seq)
            yield frame

    monkeypatch.setattr(fetch, "frames_in_pieces", spy)
    source = _big_table(conn, database)
    config = relay_config(mariadb, [source], tmp_path / "relay", buffer_size=1 << 20)
    with RelayThread(config) as relay, conn.cursor() as cur:
        start = get_json(relay.url + "/stats")["max_scn"]
        cur.execute("INSERT INTO big VALUES (0, 'before')")
        _big_transaction(cur, 1, 3000)  # ~6 MB: held in a file, read in pieces
        _wait_held(relay.url, conn)
        store = BootstrapStore(str(tmp_path / "store"))
        store.create(start, (source,), new_source_start=start)
        options = {"relay": relay.url, "sources": source, "startingScn": str(start)}
        options |= {"includeRaw": "true", "images": "false", "partitions": "1"}
        writer = LogWriter(store, options, max_events=100_000, trigger_s=0.1, once=True)
        writer.start()
        writer.wait(120)
        assert writer.error is None and not writer.is_active
    log = pq.ParquetDataset(committed_files(store)).read().to_pylist()
    first = min(r["scn"] for r in log)
    big = sorted((r for r in log if r["scn"] != first), key=lambda r: r["seq"])
    assert len(log) == 3001 and len(pieces) > 10 and pieces == sorted(pieces)
    assert [r["seq"] for r in big] == list(range(3000))
    assert len({r["scn"] for r in big}) == 1
    assert sorted(json.loads(r["key"])["id"] for r in log) == list(range(3001))


class _JsonPieces:
    """A JSON consumer that records every call and fails once on its third."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[int]]] = []
        self.rollbacks: list[int] = []

    def on_json_window(self, window: JsonWindow) -> None:
        self.calls.append((window.scn, [json.loads(line)["key"]["id"] for line in window.lines]))
        if len(self.calls) == 3:
            raise RuntimeError("injected: the third call fails")

    def on_rollback(self, scn: int, error: BaseException) -> None:
        self.rollbacks.append(scn)


def test_a_json_consumer_takes_a_big_window_in_pieces_and_again_after_a_failure(
    mariadb: PrivateMariaDB,
    database: str,
    conn: pymysql.Connection[Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_module, "PIECE_BYTES", 64 * 1024)
    source = _big_table(conn, database)
    config = relay_config(mariadb, [source], tmp_path / "relay", buffer_size=64 * 1024)
    with RelayThread(config) as relay, conn.cursor() as cur:
        start = get_json(relay.url + "/stats")["min_scn"]
        _big_transaction(cur, 1, 200)  # ~400 KB: ~7 pieces of 64 KiB
        _wait_held(relay.url, conn)
        consumer = _JsonPieces()
        scn = consume(relay.url, consumer, since_scn=start, retry=RetryPolicy(initial_s=0.01))
    big = consumer.calls[0][0]
    assert scn == big and consumer.rollbacks == [big]
    assert all(s == big for s, _ in consumer.calls) and len(consumer.calls) > 5
    # the first two pieces, then (after the failed third) the whole window again from its start
    again = [i for _, ids in consumer.calls[3:] for i in ids]
    assert again == list(range(1, 201))
    first = [i for _, ids in consumer.calls[:2] for i in ids]
    assert first == again[: len(first)]


def test_a_cold_read_gives_a_big_transaction_whole(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    """A big window evicted from the relay, read again from the binlog (``cold=true``):
    capture hands it over in parts, the cold read frames it whole."""
    source = _big_table(conn, database)
    config = relay_config(
        mariadb, [source], tmp_path / "relay", buffer_size=64 * 1024, window_files_bytes=512 << 10
    )
    with RelayThread(config) as relay, conn.cursor() as cur:
        start = get_json(relay.url + "/stats")["min_scn"]
        for n in range(4):  # ~200 KB each: the first is evicted by the files' limit
            _big_transaction(cur, 1 + n * 100, 100)
        _wait_held(relay.url, conn)
        assert get_json(relay.url + "/stats")["min_scn"] > start
        status, body = http_status(f"{relay.url}/stream?since_scn={start}&cold=true")
        assert status == 200
        windows = [f for f in wire.FrameParser().feed(body) if isinstance(f, bytes)]
        first = wire.decode_events(windows[0])
        assert len(first) == 100 and len(windows) >= 1
        assert wire.read_window_header(windows[0]).scn > start
