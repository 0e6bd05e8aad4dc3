"""The bootstrap log's folders whatever the SCNs encode: a query source's microseconds and a
PostgreSQL LSN give one folder per run of the writer's batches, the fold reads only the folders
that can hold SCNs after its previous generation, and its snapshot is exact. A log in the old
layout (folders by binlog file) is refused with the fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.bootstrap import fold as folding
from sluice.bootstrap.fold import fold, read_log
from sluice.bootstrap.logparts import first_needed
from sluice.bootstrap.logwriter import LogWriter, SinkLog
from sluice.bootstrap.reader import StoreReader, committed_files, log_buckets
from sluice.bootstrap.store import BootstrapStore
from sluice.core import wire
from sluice.errors import ConfigError
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.spark.logrows import LogRows

SOURCES = ("db.a", "db.b")
CODECS = {
    s: RowCodec(
        TableSchema(
            s, 1, (Column("id", "int", False, "int"), Column("v", "string", True, "text")), ("id",)
        )
    )
    for s in SOURCES
}
BATCHES, EVERY, WINDOWS_PER_BATCH = 120, 10, 3
# (first SCN, SCNs between windows): a day and a half of a query source's microseconds (the
# old layout cut it every 72 minutes); 22 GiB of PostgreSQL WAL from just below a 4 GiB line
# (the old layout cut it on LSN halves). The layout must not depend on either.
KINDS = {
    "query-microseconds": (1_764_115_200_000_000, 15 * 60 * 1_000_000 // WINDOWS_PER_BATCH),
    "postgresql-lsn": (0x16_FFFF_0000, (64 << 20) // WINDOWS_PER_BATCH),
}


def _events(w: int) -> list[tuple[str, str, int]]:
    """Window ``w``'s events: (source, op, id); keys come back, some are deleted, and one
    key per window is never touched again (a window the fold skipped would lack it)."""
    a = (w * 7) % 23
    return [
        ("db.a", "d" if w % 5 == 0 else "u", a),
        ("db.b", "c", (w * 11) % 17),
        ("db.b", "c", 100 + w),
    ]


def _window(scn: int, prev: int, w: int) -> bytes:
    events = []
    for source, op, key in _events(w):
        row = [key, f"v{w}"]
        payload = CODECS[source].encode(row if op == "d" else None, None if op == "d" else row)
        events.append(wire.encode_event(wire.RawEvent(source, op, 1, key, payload)))
    return wire.encode_window(scn, prev, 1_764_115_200_000 + w, events)


def _write(writer: LogWriter, first: int, step: int, batches: range) -> list[int]:
    """Write ``batches``; the SCN each one starts after."""
    starts = []
    for batch in batches:
        rows = LogRows()
        start = first + batch * WINDOWS_PER_BATCH * step
        for i in range(WINDOWS_PER_BATCH):
            w = batch * WINDOWS_PER_BATCH + i
            rows.add_window(_window(start + (i + 1) * step, start, w), lambda s, _v: CODECS[s])
        end = start + WINDOWS_PER_BATCH * step
        writer.write_batch(batch, start, end, [[rows.batch()]])
        starts.append(start)
    return starts


def _writer(store: BootstrapStore) -> LogWriter:
    return LogWriter(store, {}, max_events=1, trigger_s=1.0, once=True, bucket_batches=EVERY)


def _expected(first: int, step: int, upto: int) -> dict[tuple[str, int], int]:
    """``{(source, id): SCN}`` of the latest row per key, deletes removed, up to SCN ``upto``."""
    latest: dict[tuple[str, int], tuple[str, int]] = {}
    for w in range(BATCHES * WINDOWS_PER_BATCH):
        scn = first + (w + 1) * step
        if scn <= upto:
            for source, op, key in _events(w):
                latest[(source, key)] = (op, scn)
    return {k: scn for k, (op, scn) in latest.items() if op != "d"}


def _snapshot(spark: Any, store: BootstrapStore) -> dict[tuple[str, int], int]:
    path = store.spark_path(store.snapshot_dir(store.current_snapshot() or 0))
    rows = spark.read.parquet(path).select("source", "key", "scn").collect()
    return {(r["source"], json.loads(r["key"])["id"]): r["scn"] for r in rows}


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    yield KINDS[request.param]


def test_the_log_is_cut_by_batches_and_the_fold_prunes_exactly(
    kind: tuple[int, int], spark: Any, tmp_path: Path
) -> None:
    first, step = kind
    store = BootstrapStore(str(tmp_path / "store"))
    store.create(first, SOURCES)
    # 45 batches, a fold, then a restarted writer: the fold's SCN falls inside a folder
    starts = _write(_writer(store), first, step, range(45))
    previous = fold(spark, store)
    assert previous == starts[44] + WINDOWS_PER_BATCH * step
    assert _snapshot(spark, store) == _expected(first, step, previous)
    starts += _write(_writer(store), first, step, range(45, BATCHES))

    # One folder per EVERY batches, named by where its first batch starts, for every source:
    # 12 folders for 120 batches, however wide the SCN range.
    folders = {start for batch, start in enumerate(starts) if batch % EVERY == 0}
    for source in SOURCES:
        names = {p.name for p in Path(store.path("log", f"source={source}")).iterdir()}
        assert names == {f"after_scn={start}" for start in folders}
    assert log_buckets(store) == sorted(folders)

    # The incremental fold reads from the folder holding its previous SCN on, nothing older.
    needed = first_needed(sorted(folders), previous)
    assert needed == starts[40]
    window = folding._log_window(previous, {}, log_buckets(store))
    plan = read_log(spark, store).where(window)._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [" in plan and "after_scn#" in plan and f">= {needed})" in plan

    newest = fold(spark, store)
    assert newest == starts[-1] + WINDOWS_PER_BATCH * step
    expected = _expected(first, step, newest)
    assert _snapshot(spark, store) == expected
    fold(spark, store, full=True)  # everything read again: the same rows
    assert _snapshot(spark, store) == expected

    # The server's reader reads the same layout: every event after the previous fold.
    served = StoreReader(store).log_windows(previous, wire.Filter(), 1 << 40)
    events = sum(wire.read_window_header(r).n_events for r in served if isinstance(r, bytes))
    assert events == 3 * (BATCHES - 45) * WINDOWS_PER_BATCH


def test_a_log_in_the_old_layout_is_refused_with_the_fix(spark: Any, tmp_path: Path) -> None:
    store = BootstrapStore(str(tmp_path / "store"))
    store.create(1 << 32, ("db.a",))
    folder = Path(store.path("log", "source=db.a", "log_file=1"))
    folder.mkdir(parents=True)
    part = folder / "part-00000-0.c000.snappy.parquet"
    pq.write_table(pa.table({"scn": pa.array([(1 << 32) + 9], pa.int64())}), part)
    entry = {"path": part.as_uri(), "size": part.stat().st_size, "isDir": False}
    SinkLog(store).commit(0, [{**entry, "modificationTime": 0, "action": "add"}])

    fix = r"old layout .*run `sluice bootstrap run --seed SOURCE_URL` into a new, empty --store"
    with pytest.raises(ConfigError, match=fix):
        StoreReader(store)  # `bootstrap serve` refuses to start
    with pytest.raises(ConfigError, match=fix):
        read_log(spark, store)  # the fold
    with pytest.raises(ConfigError, match=fix):
        _writer(store).resume_scn()  # `bootstrap run`'s log
    with pytest.raises(ConfigError, match=fix):
        committed_files(store)
