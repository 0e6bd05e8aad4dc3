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
_PARTITIONING = ds.partitioning(
    pa.schema([("source", pa.string()), ("log_file", pa.int64())]), flavor="hive"
)


def _fs_path(store: BootstrapStore, uri: str) -> str:
    """A path the sink's metadata names (a URI, percent-encoded) as a pyarrow path."""
    if uri.startswith("file:"):
        return "/" + unquote(uri.split(":", 1)[1]).lstrip("/")
    if "://" in uri:
        return str(pafs.FileSystem.from_uri(uri)[1])
    return uri if uri.startswith("/") else store.path("log", uri)


def committed_files(store: BootstrapStore) -> list[str]:
    """The log's part files that Spark's file sink committed (``_spark_metadata``)."""
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
    return sorted(p for p, added in files.items() if added)


@dataclass(slots=True)
class _LogView:
    files: list[str]
    dataset: ds.Dataset
    log_files: list[int]
    max_scn: int
    gaps: list[Gap]


class StoreReader:
    """Thread-safe; refreshes its view of the log when Spark commits new files."""

    def __init__(self, store: BootstrapStore) -> None:
        self.store = store
        self.meta = store.meta()
        self.registry = SchemaRegistry()
        self._lock = threading.Lock()
        self._view: _LogView | None = None
        self._snapshots: dict[str, pa.Table] = {}  # by folder (one SCN can be republished)

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
        dataset = ds.dataset(
            files,
            filesystem=self.store.fs,
            format="parquet",
            partitioning=_PARTITIONING,
            partition_base_dir=self.store.path("log"),
        )
        log_files = sorted({int(p.split("log_file=")[1].split("/")[0]) for p in files})
        max_scn = self.meta.log_start_scn
        gaps: list[Gap] = []
        if files:
            column = dataset.to_table(columns=["scn"]).column("scn")
            max_scn = max(max_scn, pc.max(column).as_py() or 0)
            markers = dataset.to_table(
                columns=["source", "scn", "after"], filter=pc.field("op") == "g"
            ).to_pylist()
            gaps = sorted(Gap.from_marker(m["source"], m["scn"], m["after"]) for m in markers)
        view = _LogView(files, dataset, log_files, max_scn, gaps)
        with self._lock:
            self._view = view
        return view

    def log_windows(
        self, since: int, flt: wire.Filter, max_bytes: int
    ) -> Iterator[bytes | wire.Heartbeat]:
        """Windows after ``since`` in SCN order; a heartbeat once the log's end is reached."""
        view = self.view()
        sent = 0
        prev = since
        for log_file in (f for f in view.log_files if f >= since >> 32):
            condition = (
                (pc.field("log_file") == log_file)
                & (pc.field("scn") > since)
                & (pc.field("op") != "g")  # gap markers are refused before reading
            )
            if flt.sources is not None:
                condition &= pc.field("source").isin([s.decode() for s in flt.sources])
            table = view.dataset.to_table(columns=_LOG_COLUMNS, filter=condition)
            table = table.sort_by([("scn", "ascending"), ("seq", "ascending")])
            for record in _windows_of(table, flt, prev):
                yield record
                prev = wire.read_window_header(record).scn
                sent += len(record)
                if sent >= max_bytes:
                    return
        yield wire.Heartbeat(max(view.max_scn, since))

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot_table(self, scn: int, source: str, generation: str | None = None) -> pa.Table:
        """Rows of ``source`` in snapshot ``scn`` (its current folder, or the folder
        ``generation``)."""
        folder = self.store.path(
            generation or self.store.snapshot_dir(scn), partition_dir("source", source)
        )
        with self._lock:
            cached = self._snapshots.get(folder)
        if cached is not None:
            return cached
        if self.store.fs.get_file_info(folder).type == pafs.FileType.NotFound:
            table = pa.table({"key": pa.array([], pa.string())})
        else:
            table = ds.dataset(folder, filesystem=self.store.fs, format="parquet").to_table(
                columns=["key", "key_hash", "schema_version", "payload"]
            )
            table = table.sort_by([("key", "ascending")])
        current = self.store.current()
        keep = {folder.rsplit("/", 1)[0]}  # this generation's tables, and the current one's
        if current is not None:
            keep.add(self.store.path(self.store.snapshot_dir(int(current["scn"]))))
        with self._lock:
            self._snapshots = {
                k: v for k, v in self._snapshots.items() if k.rsplit("/", 1)[0] in keep
            }
            self._snapshots[folder] = table
        return table

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
        """``r`` events of the snapshot in (source, key) order; a heartbeat when complete.
        Each window's ``prev_scn`` is the cursor to resume after it (``after``)."""
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
        table = self.snapshot_table(scn, source, folder)
        cursor = generation_of(folder) << GENERATION_SHIFT
        if not table.num_rows:
            return
        name = source.encode()
        hashes = table.column("key_hash").to_pylist()
        versions = table.column("schema_version").to_pylist()
        payloads = table.column("payload")
        events: list[bytes] = []
        for row in range(first, table.num_rows):
            if flt.keeps(hashes[row] & 0xFFFFFFFF, name):
                codec = self.codec(source, versions[row])
                payload = codec.snapshot_payload(payloads[row].as_py())
                events.append(
                    wire.encode_event(
                        wire.RawEvent(source, "r", versions[row], hashes[row] & 0xFFFFFFFF, payload)
                    )
                )
            if len(events) >= per_window or (row == table.num_rows - 1 and events):
                yield wire.encode_window(scn, cursor | row, 0, events)
                events = []

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
    table = reader.snapshot_table(scn, source)
    if not table.num_rows:
        return {}
    out: dict[str, dict[str, Any]] = {}
    keys = table.column("key").to_pylist()
    versions = table.column("schema_version").to_pylist()
    for key, version, payload in zip(
        keys, versions, table.column("payload").to_pylist(), strict=True
    ):
        codec = reader.codec(source, version)
        _key, _before, after = codec.decode_event(codec.snapshot_payload(payload))
        assert after is not None
        out[key] = after
    return out
