"""One seed chunk, run inside a Spark task: read a key range in a consistent snapshot and write
its rows as one Parquet file in the snapshot's columns, streamed batch by batch.

Each row is encoded by the schema's own codec, exactly as the relay encodes an insert of that
row (payload, canonical key, key hash), so a seeded row differs from a captured one only by
its ``op`` (``r``) and its SCN.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from zlib import crc32

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sluice.bootstrap.seed.records import SeedRecords
from sluice.bootstrap.store import BootstrapStore, dictionary_columns
from sluice.capture.seeding import ChunkReader, KeyRange
from sluice.errors import SourceError, SourceSetupError
from sluice.schemas import RowCodec, TableSchema

SNAPSHOT_ARROW = pa.schema(
    [
        ("source", pa.string()),
        ("key", pa.string()),
        ("key_hash", pa.int64()),
        ("scn", pa.int64()),
        ("seq", pa.int32()),
        ("schema_version", pa.int32()),
        ("payload", pa.binary()),
    ]
)
_BATCH = 8192


@dataclass(frozen=True, slots=True)
class ChunkTask:
    """Everything a Spark task needs (pickled to executors; the password travels with it)."""

    store: str
    reader: ChunkReader
    schema: TableSchema
    generation: int
    index: int
    bounds: KeyRange
    where: str | None


@dataclass(frozen=True, slots=True)
class ChunkResult:
    source: str
    index: int
    scn: int
    rows: int
    seconds: float


RESULT_DDL = "source string, chunk int, scn long, rows long, seconds double"
RESULT_ARROW = pa.schema(
    [
        ("source", pa.string()),
        ("chunk", pa.int32()),
        ("scn", pa.int64()),
        ("rows", pa.int64()),
        ("seconds", pa.float64()),
    ]
)


def result_batch(result: ChunkResult) -> pa.RecordBatch:
    """A finished chunk as the one row a Spark task gives back (``RESULT_DDL``)."""
    row = {
        "source": result.source,
        "chunk": result.index,
        "scn": result.scn,
        "rows": result.rows,
        "seconds": result.seconds,
    }
    return pa.RecordBatch.from_pylist([row], schema=RESULT_ARROW)


@dataclass(frozen=True, slots=True)
class RowChunks:
    """``mapInArrow``'s function over ``spark.range(len(tasks))``: each id's chunk by the row
    path. A DataFrame, not an RDD, so it runs on Spark Connect as on a classic session."""

    tasks: tuple[ChunkTask, ...]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield result_batch(run_chunk(self.tasks[index]))


def run_chunks(spark: Any, tasks: list[ChunkTask]) -> list[ChunkResult]:
    """Run ``tasks`` by the row path, a Spark task each."""
    ids = spark.range(0, len(tasks), 1, len(tasks))
    done = ids.mapInArrow(RowChunks(tuple(tasks)), RESULT_DDL).collect()
    return [ChunkResult(r.source, r.chunk, r.scn, r.rows, r.seconds) for r in done]


def run_chunk(task: ChunkTask) -> ChunkResult:
    try:
        return _run_chunk(task)
    except SourceSetupError:
        raise
    except SourceError as exc:  # the server went away, a timeout, a kill
        raise SourceError(
            f"chunk {task.index}: {exc}; run the seed again: finished chunks are kept",
            source=task.schema.source,
        ) from None


def _run_chunk(task: ChunkTask) -> ChunkResult:
    read = task.reader.read(task.schema, task.bounds, task.where)
    encoder = _RowEncoder(RowCodec(task.schema), read.scn)

    def batches() -> Iterator[pa.RecordBatch]:
        batch: list[list[Any]] = []
        for values in read.rows:
            batch.append(values)
            if len(batch) >= _BATCH:
                yield encoder.batch(batch)
                batch = []
        if batch:
            yield encoder.batch(batch)

    return write_chunk(task, read.scn, batches())


def write_chunk(task: ChunkTask, scn: int, batches: Iterable[pa.RecordBatch]) -> ChunkResult:
    """Write a chunk's rows (``SNAPSHOT_ARROW`` batches) as its file, then its done record:
    a task killed midway leaves only an ignored temp file."""
    started = time.monotonic()
    store = BootstrapStore(task.store)
    records = SeedRecords(store)
    source, generation = task.schema.source, task.generation
    target = store.path(*records.chunk_file(source, generation, task.index))
    tmp = f"{target}.{time.time_ns()}.tmp"
    rows = 0
    try:
        with (
            store.fs.open_output_stream(tmp) as stream,
            pq.ParquetWriter(
                stream,
                SNAPSHOT_ARROW,
                compression="snappy",
                use_dictionary=dictionary_columns(SNAPSHOT_ARROW),
            ) as writer,
        ):
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
    except BaseException:
        with contextlib.suppress(OSError):
            store.fs.delete_file(tmp)
        raise
    store.fs.move(tmp, target)
    done = {"scn": scn, "rows": rows, "finished_at": time.time()}  # the seed's pace (ETA)
    store.write_json(done, *records.done_file(source, generation, task.index))
    return ChunkResult(source, task.index, scn, rows, time.monotonic() - started)


def snapshot_batch(
    schema: TableSchema, scn: int, keys: pa.Array, hashes: pa.Array, payloads: pa.Array
) -> pa.RecordBatch:
    """A chunk file's rows: what capture gives for inserts of them, stamped with ``scn``."""
    n = len(payloads)
    arrays = [
        pa.array([schema.source] * n, pa.string()),
        keys,
        hashes,
        pa.array(np.full(n, scn, dtype=np.int64)),
        pa.array(np.zeros(n, dtype=np.int32)),
        pa.array(np.full(n, schema.version, dtype=np.int32)),
        payloads,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=SNAPSHOT_ARROW)


class _RowEncoder:
    def __init__(self, codec: RowCodec, scn: int) -> None:
        self.codec = codec
        self.scn = scn

    def batch(self, rows: list[list[Any]]) -> pa.RecordBatch:
        encode, key_text = self.codec.encode, self.codec.key_text
        keys: list[str] = []
        hashes: list[int] = []
        payloads: list[bytes] = []
        for values in rows:
            payload = encode(None, values)  # what capture writes for an insert of this row
            key = key_text(values) or ""  # the canonical key capture hashes (seeds need a key)
            keys.append(key)
            hashes.append(crc32(key.encode()))
            payloads.append(payload)
        return snapshot_batch(
            self.codec.schema,
            self.scn,
            pa.array(keys, pa.string()),
            pa.array(hashes, pa.int64()),
            pa.array(payloads, pa.binary()),
        )
