"""Reading the store with pyarrow (no Spark in the server): the committed log and snapshots."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sluice.bootstrap import logparts
from sluice.bootstrap.store import (
    GENERATION_SHIFT,
    ROW_MASK,
    BootstrapStore,
    Gap,
    generation_of,
    partition_dir,
)
from sluice.core import wire
from sluice.errors import SchemaError
from sluice.schemas import RowCodec, SchemaRegistry, TableSchema

_LOG_COLUMNS = ["scn", "seq", "source", "op", "ts", "schema_version", "key_hash", "payload"]
_SNAPSHOT_COLUMNS = ("key", "key_hash", "schema_version", "payload")
_SERVED_COLUMNS = ("key_hash", "schema_version", "payload")
# Rows per Parquet batch a snapshot read holds (the fold writes small row groups too).
SNAPSHOT_BATCH = 4096
_PARTITIONING = ds.partitioning(
    pa.schema([("source", pa.string()), (logparts.COLUMN, pa.int64())]), flavor="hive"
)


def _fs_path(store: BootstrapStore, uri: str) -> str:
    """A path the sink's metadata names (a URI, percent-encoded) as a pyarrow path."""
    if uri.startswith("file:"):
        return "/" + unquote(uri.split(":", 1)[1]).lstrip("/")
    if "://" in uri:
        return str(pafs.FileSystem.from_uri(uri)[1])
    return uri if uri.startswith("/") else store.path("log", uri)


def committed_files(store: BootstrapStore) -> list[str]:
    """The log's part files that Spark's file sink committed (``_spark_metadata``); a log in
    the old layout is refused (``logparts.check_layout``)."""
    meta_dir = store.path("log", "_spark_metadata")
    entries = store.fs.get_file_info(pafs.FileSelector(meta_dir, allow_not_found=True))
    batches = {}
    for info in entries:
        name = info.base_name
        if name.endswith(".compact"):
            batches[int(name.split(".")[0])] = (True, info.path)
        elif name.isdigit():
            batches[int(name)] = (False, info.path)
    compacts = [b for b, (is_compact, _p) in batches.items() if is_compact]
    first = max(compacts) if compacts else 0
    files: dict[str, bool] = {}
    for batch in sorted(b for b in batches if b >= first):
        with store.fs.open_input_stream(batches[batch][1]) as stream:
            lines = stream.read().decode().splitlines()[1:]  # line 0 is the version "v1"
        for line in lines:
            entry = json.loads(line)
            path = _fs_path(store, entry["path"])
            files[path] = entry.get("action", "add") == "add"
    committed = sorted(p for p, added in files.items() if added)
    logparts.check_layout(store.uri, committed)
    return committed


def log_buckets(store: BootstrapStore) -> list[int] | None:
    """The ``after_scn`` folders the committed log has files in, in order (None: a file
    outside them, so folders cannot tell where SCNs are; empty: no log yet)."""
    if not store.has_log():
        return []
    buckets = [logparts.bucket_of(path) for path in committed_files(store)]
    if any(b is None for b in buckets):
        return None
    return sorted({b for b in buckets if b is not None})


@dataclass(frozen=True, slots=True)
class _Run:
    """Log files whose SCN ranges overlap (one micro-batch of the job, written by several
    tasks): read and sorted together, and never more than that at once."""

    files: tuple[str, ...]
    min_scn: int
    max_scn: int


@dataclass(slots=True)
class _LogView:
    files: list[str]
    runs: list[_Run]
    max_scn: int
    gaps: list[Gap]


class StoreReader:
    """Thread-safe; refreshes its view of the log when Spark commits new files.

    Memory: a log read holds one run (a micro-batch of the bootstrap job) and a snapshot read
    one Parquet batch of ``SNAPSHOT_BATCH`` rows, whatever the store's size."""

    def __init__(self, store: BootstrapStore) -> None:
        self.store = store
        self.meta = store.meta()
        if store.has_log():
            committed_files(store)  # refuses a log in the old layout before serving anything
        self.registry = SchemaRegistry()
        self._lock = threading.Lock()
        self._view: _LogView | None = None
        self._ranges: dict[str, tuple[int, int]] = {}  # file -> SCN range (files never change)

    # -- log ---------------------------------------------------------------------------------
    def refresh_meta(self) -> None:
        """Re-read the store's marker: a table added to the store is served without restart."""
        self.meta = self.store.meta()

    def view(self) -> _LogView:
        self.refresh_meta()
        files = committed_files(self.store) if self.store.has_log() else []
        with self._lock:
            if self._view is not None and self._view.files == files:
                return self._view
        ranges = {f: self.scn_range(f) for f in files}
        runs = _runs(ranges)
        max_scn = max([self.meta.log_start_scn, *(r.max_scn for r in runs)])
        gaps: list[Gap] = []
        if files:
            markers = (
                self._dataset(files)
                .to_table(columns=["source", "scn", "after"], filter=pc.field("op") == "g")
                .to_pylist()
            )
            gaps = sorted(Gap.from_marker(m["source"], m["scn"], m["after"]) for m in markers)
        view = _LogView(files, runs, max_scn, gaps)
        with self._lock:
            self._view = view
            self._ranges = {f: ranges[f] for f in files}
        return view

    def scn_range(self, path: str) -> tuple[int, int]:
        """A log file's lowest and highest SCN, from its footer's statistics (read once)."""
        with self._lock:
            known = self._ranges.get(path)
        if known is not None:
            return known
        meta = pq.read_metadata(path, filesystem=self.store.fs)
        index = meta.schema.names.index("scn")
        low, high = None, None
        for group in range(meta.num_row_groups):
            stats = meta.row_group(group).column(index).statistics
            if stats is None or not stats.has_min_max:
                column = pq.read_table(path, columns=["scn"], filesystem=self.store.fs)["scn"]
                return int(pc.min(column).as_py() or 0), int(pc.max(column).as_py() or 0)
            low = stats.min if low is None else min(low, stats.min)
            high = stats.max if high is None else max(high, stats.max)
        return int(low or 0), int(high or 0)

    def _dataset(self, files: list[str] | tuple[str, ...]) -> ds.Dataset:
        return ds.dataset(
            list(files),
            filesystem=self.store.fs,
            format="parquet",
            partitioning=_PARTITIONING,
            partition_base_dir=self.store.path("log"),
        )

    def log_windows(
        self, since: int, flt: wire.Filter, max_bytes: int
    ) -> Iterator[bytes | wire.Heartbeat]:
        """Windows after ``since`` in SCN order; a heartbeat once the log's end is reached."""
        view = self.view()
        sent = 0
        prev = since
        condition = (pc.field("scn") > since) & (pc.field("op") != "g")  # gaps: refused before
        if flt.sources is not None:
            condition &= pc.field("source").isin([s.decode() for s in flt.sources])
        for run in view.runs:
            if run.max_scn <= since:
                continue
            table = self._dataset(run.files).to_table(columns=_LOG_COLUMNS, filter=condition)
            table = table.sort_by([("scn", "ascending"), ("seq", "ascending")])
            for record in _windows_of(table, flt, prev):
                yield record
                prev = wire.read_window_header(record).scn
                sent += len(record)
                if sent >= max_bytes:
                    return
            del table
        yield wire.Heartbeat(max(view.max_scn, since))

    # -- snapshots ---------------------------------------------------------------------------
    def _snapshot_files(self, scn: int, source: str, generation: str | None) -> list[str]:
        """The Parquet files of ``source`` in snapshot ``scn`` (its current folder, or the
        folder ``generation``), in name order: a row's position counts across them."""
        folder = self.store.path(
            generation or self.store.snapshot_dir(scn), partition_dir("source", source)
        )
        infos = self.store.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        return sorted(
            i.path
            for i in infos
            if i.type == pafs.FileType.File
            and i.base_name.endswith(".parquet")
            and not i.base_name.startswith(("_", "."))
        )

    def snapshot_batches(
        self,
        scn: int,
        source: str,
        generation: str | None = None,
        first: int = 0,
        columns: tuple[str, ...] = _SNAPSHOT_COLUMNS,
    ) -> Iterator[tuple[int, pa.RecordBatch]]:
        """``(position of its first row, batch)`` for the snapshot's rows from position
        ``first`` on, file by file in name order (each sorted by key, or an adopted seed
        chunk in primary-key order), read a batch at a time."""
        at = 0
        for path in self._snapshot_files(scn, source, generation):
            parquet = pq.ParquetFile(path, filesystem=self.store.fs)
            rows = parquet.metadata.num_rows
            if at + rows <= first:
                at += rows
                continue
            groups, group_at = [], at
            for group in range(parquet.num_row_groups):
                size = parquet.metadata.row_group(group).num_rows
                if group_at + size > first:
                    groups.append(group)
                else:
                    at += size
                group_at += size
            for batch in parquet.iter_batches(
                batch_size=SNAPSHOT_BATCH, row_groups=groups, columns=list(columns)
            ):
                if at + batch.num_rows > first:
                    skip = max(0, first - at)
                    yield at + skip, batch.slice(skip)
                at += batch.num_rows

    def snapshot_windows(
        self,
        scn: int,
        sources: list[str],
        flt: wire.Filter,
        after: tuple[str, int] | None,
        max_bytes: int,
        per_window: int = 500,
        folder: str | None = None,
    ) -> Iterator[bytes | wire.Heartbeat]:
        """``r`` events of the snapshot source by source (file by file); a heartbeat
        when complete. Each window's ``prev_scn`` is the cursor to resume after it (``after``)."""
        folder = folder or self.store.snapshot_dir(scn)
        sent = 0
        for source in sorted(sources):
            if after is not None and source < after[0]:
                continue
            at = after[1] if after is not None and source == after[0] else -1
            first = (at & ROW_MASK) + 1 if at >= 0 else 0
            rows = self._source_rows(scn, source, flt, first, per_window, folder)
            for record in rows:
                yield record
                sent += len(record)
                if sent >= max_bytes:
                    return
        yield wire.Heartbeat(scn)

    def _source_rows(
        self, scn: int, source: str, flt: wire.Filter, first: int, per_window: int, folder: str
    ) -> Iterator[bytes]:
        cursor = generation_of(folder) << GENERATION_SHIFT
        name = source.encode()
        events: list[bytes] = []
        last = -1
        for at, batch in self.snapshot_batches(scn, source, folder, first, _SERVED_COLUMNS):
            hashes = batch.column("key_hash").to_pylist()
            versions = batch.column("schema_version").to_pylist()
            payloads = batch.column("payload").to_pylist()
            for i, key_hash in enumerate(hashes):
                last = at + i
                if flt.keeps(key_hash & 0xFFFFFFFF, name):
                    codec = self.codec(source, versions[i])
                    payload = codec.snapshot_payload(payloads[i])
                    events.append(
                        wire.encode_event(
                            wire.RawEvent(source, "r", versions[i], key_hash & 0xFFFFFFFF, payload)
                        )
                    )
                if len(events) >= per_window:
                    yield wire.encode_window(scn, cursor | last, 0, events)
                    events = []
        if events:
            yield wire.encode_window(scn, cursor | last, 0, events)

    # -- schemas -----------------------------------------------------------------------------
    def codec(self, source: str, version: int) -> RowCodec:
        try:
            return self.registry.codec(source, version)
        except SchemaError:
            self.reload_schemas()
            return self.registry.codec(source, version)

    def reload_schemas(self) -> dict[str, list[Any]]:
        body = self.store.read_schemas()
        for versions in body.values():
            for schema in versions:
                self.registry.add(TableSchema.from_avro(schema))
        return body


def _runs(ranges: dict[str, tuple[int, int]]) -> list[_Run]:
    """Files grouped where their SCN ranges overlap, in SCN order."""
    runs: list[_Run] = []
    files: list[str] = []
    low = high = -1
    for path, (lo, hi) in sorted(ranges.items(), key=lambda item: item[1]):
        if files and lo > high:
            runs.append(_Run(tuple(files), low, high))
            files = []
        if not files:
            low, high = lo, hi
        files.append(path)
        high = max(high, hi)
    if files:
        runs.append(_Run(tuple(files), low, high))
    return runs


def _windows_of(table: pa.Table, flt: wire.Filter, prev: int) -> Iterator[bytes]:
    columns = {name: table.column(name).to_pylist() for name in _LOG_COLUMNS}
    events: list[bytes] = []
    count = table.num_rows
    for i in range(count):
        source = columns["source"][i]
        key_hash = columns["key_hash"][i] & 0xFFFFFFFF
        if flt.keeps(key_hash, source.encode(), ord(columns["op"][i])):
            events.append(
                wire.encode_event(
                    wire.RawEvent(
                        source,
                        columns["op"][i],
                        columns["schema_version"][i],
                        key_hash,
                        columns["payload"][i],
                    )
                )
            )
        scn = columns["scn"][i]
        if i == count - 1 or columns["scn"][i + 1] != scn:
            if events:
                ts_ms = int(columns["ts"][i].timestamp() * 1000)
                yield wire.encode_window(scn, prev, ts_ms, events)
                prev = scn
            events = []


def snapshot_rows(store: BootstrapStore, source: str) -> dict[str, dict[str, Any]]:
    """``{canonical key: row}`` of the current snapshot of ``source``, rows as JSON values
    (for tools and tests that read a store directly; consumers use the server)."""
    reader = StoreReader(store)
    scn = store.current_snapshot()
    if scn is None:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for _at, batch in reader.snapshot_batches(scn, source):
        for key, version, payload in zip(
            batch.column("key").to_pylist(),
            batch.column("schema_version").to_pylist(),
            batch.column("payload").to_pylist(),
            strict=True,
        ):
            codec = reader.codec(source, version)
            _key, _before, after = codec.decode_event(codec.snapshot_payload(payload))
            assert after is not None
            out[key] = after
    return out
