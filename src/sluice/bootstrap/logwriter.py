"""The bootstrap log written by the job itself: relay windows straight into Parquet.

Spark's own streaming sink cost as much JVM CPU per event as Spark's whole Parquet ->
Parquet path, on top of the Python source that decodes the windows, so the log could not keep
pace with Spark's own sources. Here one thread plans micro-batches with the ``sluice`` source's
reader (the same offsets, cold reads and gap markers, no Spark session), builds each batch's
columns (``spark/logcols.py``) and writes them with pyarrow, in the layout Spark's file sink
writes: part files under ``source=S/after_scn=X`` (a run of batches, ``logparts.py``) and
their commit record in ``_spark_metadata``. So Spark (the fold) and pyarrow (the bootstrap
server) both read the log, and a part file counts only once its batch is committed there.
A log in the older layout (folders by binlog file) is refused, not extended. A restart
resumes after the highest SCN the committed files hold: windows after it that held no event
of these sources are read again and give nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.streaming.datasource import ReadMaxRows

from sluice.bootstrap import logparts
from sluice.bootstrap.reader import StoreReader, committed_files
from sluice.bootstrap.store import BootstrapStore, dictionary_columns, partition_dir
from sluice.errors import RelayUnavailable
from sluice.spark.options import parse_options
from sluice.spark.source import SluiceStreamReader

log = logging.getLogger(__name__)
COMPACT_INTERVAL = 10  # Spark's spark.sql.streaming.fileSink.log.compactInterval default
_BLOCK_SIZE = 32 << 20
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 10.0  # backoff while the relay is unreachable
_URI_SAFE = "/@!$&'()*+,;=:"  # what java.net.URI leaves as is in a path


class SinkLog:
    """``log/_spark_metadata``: which part files are committed, as Spark's file sink records
    it (``v1`` then one JSON line per file). Batch N is written whole as ``N.compact`` when
    ``(N + 1) % COMPACT_INTERVAL == 0``: Spark's reader of the log expects those files."""

    def __init__(self, store: BootstrapStore) -> None:
        self.store = store
        self.dir = store.path("log", "_spark_metadata")

    def last_batch(self) -> int:
        infos = self.store.fs.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True))
        ids = [int(i.base_name.split(".")[0]) for i in infos if _is_batch(i.base_name)]
        return max(ids, default=-1)

    def commit(self, batch: int, files: list[dict[str, Any]]) -> None:
        entries = files
        if (batch + 1) % COMPACT_INTERVAL == 0:
            entries = [*self._valid_entries(batch), *files]
        name = f"{batch}.compact" if (batch + 1) % COMPACT_INTERVAL == 0 else str(batch)
        body = "\n".join(["v1", *(json.dumps(e, separators=(",", ":")) for e in entries)])
        target = f"{self.dir}/{name}"
        tmp = f"{self.dir}/.{name}.{uuid.uuid4().hex}.tmp"
        self.store.fs.create_dir(self.dir, recursive=True)
        with self.store.fs.open_output_stream(tmp) as stream:
            stream.write(body.encode())
        self.store.fs.move(tmp, target)  # the commit: readers list the batch or they do not

    def _valid_entries(self, batch: int) -> list[dict[str, Any]]:
        """Every file added by the batches before ``batch`` (from the last compaction on)."""
        start = max(0, (batch + 1) // COMPACT_INTERVAL * COMPACT_INTERVAL - COMPACT_INTERVAL - 1)
        found: dict[str, dict[str, Any]] = {}
        for n in range(start, batch):
            name = f"{n}.compact" if (n + 1) % COMPACT_INTERVAL == 0 else str(n)
            path = f"{self.dir}/{name}"
            if self.store.fs.get_file_info(path).type == pafs.FileType.NotFound:
                continue
            with self.store.fs.open_input_stream(path) as stream:
                for line in stream.read().decode().splitlines()[1:]:
                    entry = json.loads(line)
                    if entry.get("action", "add") == "add":
                        found[entry["path"]] = entry
                    else:
                        found.pop(entry["path"], None)
        return list(found.values())


def _is_batch(name: str) -> bool:
    return name.isdigit() or (
        name.endswith(".compact") and name.split(".", maxsplit=1)[0].isdigit()
    )


class LogWriter:
    """Start with ``start()``; ``stop()`` ends it after the batch it writes. ``error`` holds
    what ended it otherwise; with ``once`` it ends when it has what the relay held at start.
    An unreachable relay (restarted, a network cut) does not end a continuous writer: it
    retries with backoff (``failing`` says why meanwhile) and goes on where its log ends."""

    def __init__(
        self,
        store: BootstrapStore,
        options: dict[str, str],
        *,
        max_events: int,
        trigger_s: float,
        once: bool,
        bucket_batches: int = logparts.BUCKET_BATCHES,
    ) -> None:
        self.store = store
        self.options = options
        self.max_events = max_events
        self.trigger_s = trigger_s
        self.once = once
        self.bucket_batches = bucket_batches
        self.sink = SinkLog(store)
        self.error: BaseException | None = None
        self.end_scn: int | None = None  # where the last committed batch ends
        self.batches = 0
        self.events = 0
        # (events, seconds) of the latest batches: progress and benchmarks (bounded)
        self.timings: deque[tuple[int, float]] = deque(maxlen=1000)
        self.failing: str | None = None  # why the relay cannot be read now (None: it can)
        self._delay = RETRY_FIRST_S
        self._pending: list[str] = []  # part files of the batch being written
        self._bucket: int | None = None  # the after_scn folder batches go into now
        self._bucket_read = False  # whether _bucket was read from the committed log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sluice-log-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wait()

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def is_active(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._stream()
        except BaseException as exc:  # the job reports it (one line) and stops
            self.error = exc

    def _stream(self) -> None:
        reader = SluiceStreamReader(parse_options(self.options), None)
        offset = reader.initialOffset()
        resume = self.resume_scn()
        if resume is not None and resume > int(offset["scn"]):
            offset = {"scn": resume, "phase": "log"}
        self.end_scn = int(offset["scn"])  # the log holds every event up to here
        if self.once:
            reader.prepareForTriggerAvailableNow()
        limit = ReadMaxRows(self.max_events)
        batch = self.sink.last_batch() + 1
        while not self._stop.is_set():
            try:
                end = self._batch(reader, offset, limit, batch)
            except RelayUnavailable as exc:
                if self.once:
                    raise  # a one-shot run reports it; the next run resumes
                self._unreachable(exc)
                continue
            if end is None:
                if self.once:
                    return
                self._stop.wait(self.trigger_s)
                continue
            offset, batch = end, batch + 1

    def _batch(
        self, reader: SluiceStreamReader, offset: dict[str, Any], limit: ReadMaxRows, batch: int
    ) -> dict[str, Any] | None:
        """Write and commit the next batch; its end offset (None: nothing new)."""
        end = reader.latestOffset(offset, limit)
        if int(end["scn"]) <= int(offset["scn"]):
            self._reachable()
            return None
        parts = (reader.read(part) for part in reader.partitions(offset, end))
        self.write_batch(batch, int(offset["scn"]), int(end["scn"]), parts)
        self._reachable()
        return {"scn": int(end["scn"]), "phase": "log"}

    def write_batch(
        self,
        batch: int,
        start_scn: int,
        end_scn: int,
        parts: Iterable[Iterable[pa.RecordBatch]],
    ) -> None:
        """Write and commit batch number ``batch``: the log's rows of the windows
        ``(start_scn, end_scn]``, as the reader's partitions give them. Batches are
        written in order, each starting where the one before ended."""
        if not self._bucket_read:
            self._bucket = self._newest_bucket()
            self._bucket_read = True
        began, events = time.perf_counter(), self.events
        self._pending = []
        files: list[dict[str, Any]] = []
        bucket = logparts.next_bucket(self._bucket, batch, start_scn, self.bucket_batches)
        try:
            for index, rows in enumerate(parts):
                files += self._write(rows, batch, index, bucket)
        except BaseException:
            self.events = events
            self._discard()
            raise
        self.sink.commit(batch, files)
        self._bucket = bucket
        self.batches += 1
        self.end_scn = end_scn
        self.timings.append((self.events - events, time.perf_counter() - began))

    def _discard(self) -> None:
        """Remove the part files of a batch that will not be committed (readers ignore them
        anyway; this keeps the folder clean)."""
        for path in self._pending:
            with contextlib.suppress(OSError):
                self.store.fs.delete_file(path)
        self._pending = []

    def _unreachable(self, exc: RelayUnavailable) -> None:
        """A relay restart or a network cut: wait and read the batch again, with backoff."""
        if self.failing is None:
            log.warning(
                "the bootstrap log waits for the relay (%s); retrying every %.0f s at most, "
                "from SCN %s",
                exc,
                RETRY_MAX_S,
                self.end_scn,
            )
        self.failing = str(exc)
        self._stop.wait(self._delay)
        self._delay = min(self._delay * 2, RETRY_MAX_S)

    def _reachable(self) -> None:
        if self.failing is not None:
            log.warning(
                "the relay answers again: the bootstrap log goes on after SCN %s", self.end_scn
            )
        self.failing = None
        self._delay = RETRY_FIRST_S

    def resume_scn(self) -> int | None:
        """The highest SCN the committed log holds (None: nothing committed yet)."""
        if not self.store.has_log():
            return None
        files = committed_files(self.store)
        if not files:
            return None
        reader = StoreReader(self.store)
        return max(reader.scn_range(f)[1] for f in files)

    def _newest_bucket(self) -> int | None:
        """The committed log's newest ``after_scn`` folder: a restarted writer goes on
        filling it (None: nothing committed yet)."""
        if not self.store.has_log():
            return None
        found = (logparts.bucket_of(path) for path in committed_files(self.store))
        return max((b for b in found if b is not None), default=None)

    def _write(
        self, batches: Iterable[pa.RecordBatch], batch: int, part: int, bucket: int
    ) -> list[dict[str, Any]]:
        """One part file per source of a partition's events, in the batch's folder."""
        writers: dict[str, tuple[str, pq.ParquetWriter]] = {}
        try:
            for record in batches:
                if not record.num_rows:
                    continue
                self.events += record.num_rows
                for source, rows in _by_source(record):
                    if source not in writers:
                        writers[source] = self._open(source, bucket, batch, part, rows.schema)
                        self._pending.append(writers[source][0])
                    writers[source][1].write_batch(rows)
        finally:
            for _path, writer in writers.values():
                writer.close()
        # Written under a hidden name (Spark and pyarrow skip names starting with "."), then
        # moved to the part file's name: no reader that lists the folder sees a file being
        # written; only the commit in _spark_metadata makes it part of the log.
        finals = []
        for hidden, _writer in writers.values():
            final = _visible(hidden)
            self._pending.append(final)
            self.store.fs.move(hidden, final)
            finals.append(final)
        return [self._entry(path) for path in finals]

    def _open(
        self, source: str, bucket: int, batch: int, part: int, schema: pa.Schema
    ) -> tuple[str, pq.ParquetWriter]:
        folder = self.store.path(
            "log", partition_dir("source", source), partition_dir(logparts.COLUMN, str(bucket))
        )
        self.store.fs.create_dir(folder, recursive=True)
        path = f"{folder}/.part-{batch:05d}-{part:03d}-{uuid.uuid4().hex}.c000.snappy.parquet"
        # INT96 timestamps, as Spark's sink writes them: one type across the log's files
        writer = pq.ParquetWriter(
            path,
            schema,
            filesystem=self.store.fs,
            compression="snappy",
            use_dictionary=dictionary_columns(schema),
            use_deprecated_int96_timestamps=True,
        )
        return path, writer

    def _entry(self, path: str) -> dict[str, Any]:
        info = self.store.fs.get_file_info(path)
        uri = self.store.spark_path(path.removeprefix(self.store.root).lstrip("/"))
        scheme, _, rest = uri.rpartition("://") if "://" in uri else ("file", "", uri)
        host, _, local = rest.partition("/") if scheme != "file" else ("", "", rest.lstrip("/"))
        return {
            # a URI, as Spark's sink records it: a source name may hold `, %, # or spaces
            "path": f"{scheme}://{host}/{quote(local, safe=_URI_SAFE)}",
            "size": info.size,
            "isDir": False,
            "modificationTime": int(info.mtime.timestamp() * 1000) if info.mtime else 0,
            "blockReplication": 1,
            "blockSize": _BLOCK_SIZE,
            "action": "add",
        }


def _visible(hidden: str) -> str:
    """The part file's name, for the hidden one it is written under."""
    folder, _, name = hidden.rpartition("/")
    return f"{folder}/{name.removeprefix('.')}"


def _by_source(record: pa.RecordBatch) -> Iterable[tuple[str, pa.RecordBatch]]:
    """A batch's rows by source, without the source column (the folder holds it)."""
    sources = record.column("source")
    rest = record.drop_columns(["source"])
    first = sources[0].as_py()
    if pc.all(pc.equal(sources, first)).as_py():
        yield first, rest  # the usual case: one table
        return
    encoded = sources.dictionary_encode()
    for code, name in enumerate(encoded.dictionary.to_pylist()):
        mask = pc.equal(encoded.indices, pa.scalar(code, encoded.indices.type))
        yield name, rest.filter(mask)
