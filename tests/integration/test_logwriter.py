"""The bootstrap log's own writer: Spark's file-sink layout that Spark and pyarrow both read,
across compactions of its commit record, resumed without repeats or holes."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.bootstrap.fold import read_log
from sluice.bootstrap.logwriter import COMPACT_INTERVAL, LogWriter, SinkLog
from sluice.bootstrap.reader import StoreReader, committed_files
from sluice.bootstrap.store import BootstrapStore
from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread, free_port, key_text
from tests.integration.support import (
    consume,
    create_database,
    get_json,
    relay_config,
    wait_for,
    wait_relay_caught_up,
)

SOURCES = ("lw.kv", "lw.other")


@pytest.fixture(scope="module")
def relay(
    mariadb: PrivateMariaDB, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RelayThread, pymysql.Connection[Any]]]:
    conn = create_database(
        mariadb,
        "lw",
        "kv (k INT PRIMARY KEY, v VARCHAR(40))",
        "other (name VARCHAR(20) PRIMARY KEY, n INT)",
    )
    config = relay_config(mariadb, list(SOURCES), tmp_path_factory.mktemp("lw") / "data")
    with RelayThread(config) as service:
        yield service, conn
    conn.close()


def _work(conn: pymysql.Connection[Any], start: int, count: int) -> None:
    with conn.cursor() as cur:
        for k in range(start, start + count):
            cur.execute("BEGIN")
            cur.execute("INSERT INTO kv VALUES (%s, %s)", (k, f"v{k}"))
            cur.execute("REPLACE INTO other VALUES (%s, %s)", (f"n{k % 5}", k))
            cur.execute("COMMIT")
        cur.execute("DELETE FROM kv WHERE k %% 9 = 0 AND k >= %s", (start,))


def _writer(store: BootstrapStore, relay_url: str, start: int, *, once: bool = True) -> LogWriter:
    options = {
        "relay": relay_url,
        "sources": ",".join(SOURCES),
        "startingScn": str(start),
        "includeRaw": "true",
        "images": "false",
        "partitions": "1",
    }
    return LogWriter(store, options, max_events=40, trigger_s=0.1, once=once)


def _run(writer: LogWriter) -> None:
    writer.start()
    writer.wait(120)
    assert not writer.is_active, "the log writer did not finish"
    assert writer.error is None, writer.error


def _relay_events(url: str, after: int) -> Counter[tuple[Any, ...]]:
    recorder = RecordingConsumer()
    consume(url, recorder)
    return Counter(
        (e.scn, e.source, e.op, key_text(e.key)) for e in recorder.events if e.scn > after
    )


def test_the_log_is_read_alike_by_spark_and_pyarrow_and_resumes_exactly(
    relay: tuple[RelayThread, pymysql.Connection[Any]], spark: Any, tmp_path: Path
) -> None:
    service, conn = relay
    start = int(get_json(f"{service.url}/stats")["max_scn"])
    store = BootstrapStore(str(tmp_path / "store"))
    store.create(start, SOURCES, new_source_start=start)
    _work(conn, 0, 300)
    wait_relay_caught_up(service.url, conn)

    first = _writer(store, service.url, start)
    _run(first)
    # 40 events a batch: more than COMPACT_INTERVAL batches, so Spark's reader of the commit
    # record has to find the writer's compactions
    assert first.batches > COMPACT_INTERVAL
    sink = store.path("log", "_spark_metadata")
    assert Path(sink, f"{COMPACT_INTERVAL - 1}.compact").is_file()
    assert _log_events(spark, store) == _relay_events(service.url, start)

    # A part file left by a writer killed before its commit is not part of the log.
    stray = Path(committed_files(store)[0]).with_name("part-99999-000-stray.parquet")
    stray.write_bytes(Path(committed_files(store)[0]).read_bytes())
    assert str(stray) not in committed_files(store)

    # Nothing new: a second writer resumes where the log ends and commits no batch.
    again = _writer(store, service.url, start)
    resumed = again.resume_scn()
    _run(again)
    assert again.batches == 0 and again.end_scn == resumed

    _work(conn, 1000, 120)
    wait_relay_caught_up(service.url, conn)
    third = _writer(store, service.url, start)
    _run(third)
    assert third.batches > 0
    expected = _relay_events(service.url, start)
    assert _log_events(spark, store) == expected
    # the bootstrap server's reader sees the same committed files and SCN ranges
    view = StoreReader(store).view()
    assert view.files == committed_files(store)
    assert view.max_scn == max(scn for scn, *_ in expected)
    assert SinkLog(store).last_batch() == first.batches + third.batches - 1
    # fewer batches than a folder takes (logparts.BUCKET_BATCHES): the restarted writers went
    # on in the first writer's folder, named by the SCN the log starts after
    for source in SOURCES:
        folders = [p.name for p in Path(store.path("log", f"source={source}")).iterdir()]
        assert folders == [f"after_scn={start}"]


def _log_events(spark: Any, store: BootstrapStore) -> Counter[tuple[Any, ...]]:
    rows = read_log(spark, store).select("scn", "source", "op", "key").collect()
    return Counter(
        (r["scn"], r["source"], r["op"], key_text(json.loads(r["key"]) if r["key"] else None))
        for r in rows
    )


def test_a_relay_restart_does_not_end_the_log(
    mariadb: PrivateMariaDB, spark: Any, tmp_path: Path
) -> None:
    """The relay goes away while the writer runs and comes back on the same port: the writer
    waits (saying why), goes on where its log ended, and the log is still exact."""
    conn = create_database(mariadb, "lw_restart", "kv (k INT PRIMARY KEY, v VARCHAR(40))")
    config = relay_config(mariadb, ["lw_restart.kv"], tmp_path / "relay").model_copy(
        update={"port": free_port()}
    )
    url = f"http://127.0.0.1:{config.port}"

    def work(start: int, count: int) -> None:
        with conn.cursor() as cur:
            for k in range(start, start + count):
                cur.execute("INSERT INTO kv VALUES (%s, %s)", (k, f"v{k}"))
            cur.execute("DELETE FROM kv WHERE k %% 7 = 0 AND k >= %s", (start,))

    def caught_up() -> None:
        wait_relay_caught_up(url, conn)
        newest = int(get_json(f"{url}/stats")["max_scn"])
        wait_for(lambda: (writer.end_scn or 0) >= newest, what=f"the log to reach SCN {newest}")

    store = BootstrapStore(str(tmp_path / "store"))
    relay = RelayThread(config).start()
    start = int(get_json(f"{url}/stats")["max_scn"])
    store.create(start, ("lw_restart.kv",), new_source_start=start)
    options = {
        "relay": url,
        "sources": "lw_restart.kv",
        "startingScn": str(start),
        "includeRaw": "true",
        "images": "false",
        "partitions": "1",
    }
    writer = LogWriter(store, options, max_events=40, trigger_s=0.1, once=False)
    writer.start()
    try:
        work(0, 100)
        caught_up()
        relay.stop()  # the database goes on while the relay is away
        wait_for(lambda: writer.failing is not None, what="the writer to see the relay gone")
        assert writer.is_active and writer.error is None
        work(500, 100)
        relay = RelayThread(config).start()
        caught_up()
        assert writer.failing is None and writer.error is None
        expected = _relay_events(url, start)
    finally:
        writer.stop()
        relay.stop()
        conn.close()
    assert _log_events(spark, store) == expected
    # no part file is left behind by the batches the restart cut short
    written = {str(p) for p in Path(store.path("log")).rglob("*.parquet")}
    assert written == set(committed_files(store))


def test_no_reader_sees_a_part_file_before_its_batch_is_committed(
    relay: tuple[RelayThread, pymysql.Connection[Any]], spark: Any, tmp_path: Path
) -> None:
    """A part file being written (here: garbage under the part name, as a writer cut short
    leaves it) is not read before the log's first commit: Spark would list the folders
    itself and fail on its footer. The writer writes under hidden names, moved at the end."""
    service, conn = relay
    start = int(get_json(f"{service.url}/stats")["max_scn"])
    store = BootstrapStore(str(tmp_path / "store"))
    store.create(start, SOURCES, new_source_start=start)
    folder = Path(store.path("log", "source=lw.kv", f"after_scn={start}"))
    folder.mkdir(parents=True)
    (folder / "part-00000-000-cut.c000.snappy.parquet").write_bytes(b"PAR1 cut short")
    assert not store.has_log() and read_log(spark, store) is None
    assert StoreReader(store).view().files == []
    _work(conn, 5000, 5)
    wait_relay_caught_up(service.url, conn)
    _run(_writer(store, service.url, start))
    assert store.has_log() and read_log(spark, store).count() > 0
    files = committed_files(store)
    assert files and not any(Path(f).name.startswith(".") for f in files)
    assert not list(Path(store.path("log")).rglob(".part-*"))  # nothing left hidden
