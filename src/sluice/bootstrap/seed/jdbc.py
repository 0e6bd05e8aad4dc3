"""The seed's fast path: Spark's own JDBC source reads the chunks in its JVM (one partition
per chunk, each in its own consistent snapshot), and a Python task per chunk encodes whole
Arrow batches (``schemas/arrow_encoder.py``) and writes the chunk's file and done record, as
the row path does (``chunk.py``): same bytes, same resumability.

A chunk this path cannot finish exactly (it came back empty, so no row carried its
snapshot's SCN; or a value the Arrow encoder refuses) is left to the row path, which the job
runs for every chunk still missing.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.bootstrap.seed.chunk import (
    RESULT_DDL,
    ChunkResult,
    ChunkTask,
    result_batch,
    snapshot_batch,
    write_chunk,
)
from sluice.capture.seeding import JdbcChunks
from sluice.errors import SourceError, SourceSetupError
from sluice.schemas.arrow_encoder import ArrowEncoder, Unencodable, key_hashes

log = logging.getLogger(__name__)
# A refusal of the account (login, privileges): not the fast path's limit but the user's to
# fix, so the seed stops with it rather than read every chunk ~4x slower (MariaDB/MySQL:
# "Access denied for user", "SELECT command denied", SQLSTATE 28000; PostgreSQL: "password
# authentication failed", "permission denied", 28P01).
_REFUSED = re.compile(
    r"access denied|command denied|authentication failed|permission denied|"
    r"\b28000\b|\b28P01\b|SQLInvalidAuthorizationSpec",
    re.IGNORECASE,
)


class _Skip(Exception):
    """This chunk goes to the row path."""


@dataclass(frozen=True, slots=True)
class _ChunkWriter:
    """``mapInArrow``'s function: partition ``i`` is ``tasks[i]`` (pickled to executors)."""

    tasks: tuple[ChunkTask, ...]
    chunks: JdbcChunks

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext  # noqa: PLC0415 - only inside a Spark task

        context = TaskContext.get()
        task = self.tasks[context.partitionId() if context else 0]
        first = next((b for b in batches if b.num_rows), None)
        if first is None:
            return  # no row told the snapshot's SCN: the row path reads this chunk
        scn = self._scn(first)
        encoder = ArrowEncoder(task.schema)

        def encoded() -> Iterator[pa.RecordBatch]:
            yield self._encode(encoder, scn, first)
            for batch in batches:
                if batch.num_rows:
                    yield self._encode(encoder, scn, batch)

        with contextlib.suppress(_Skip):
            yield result_batch(write_chunk(task, scn, encoded()))

    def _scn(self, batch: pa.RecordBatch) -> int:
        """The SCN of the snapshot the chunk was read in (every row carries its position)."""
        names = self.chunks.position_columns
        first = tuple(batch.column(n)[0].as_py() for n in names)
        last = tuple(batch.column(n)[batch.num_rows - 1].as_py() for n in names)
        if first != last:  # one connection, one snapshot: never expected
            raise SourceError(f"a chunk's rows came from two snapshots ({first} and {last})")
        return self.chunks.scn_of(first)

    def _encode(self, encoder: ArrowEncoder, scn: int, batch: pa.RecordBatch) -> pa.RecordBatch:
        columns = [batch.column(n) for n in self.chunks.columns]
        try:
            payloads = encoder.payloads(columns)
        except Unencodable as exc:
            log.warning("a chunk goes to the row path (slower): %s", exc)
            raise _Skip from None
        keys = encoder.keys(columns)
        hashes = pa.array(key_hashes(keys).astype(np.int64))
        if scn != self._scn(batch):
            raise SourceError("a chunk's rows came from two snapshots")
        return snapshot_batch(encoder.schema, scn, keys, hashes, payloads)


def read_chunks(
    spark: Any, chunks: JdbcChunks, tasks: list[ChunkTask]
) -> tuple[list[ChunkResult], str | None]:
    """Read ``tasks`` (chunks of one table) through Spark's JDBC source: the results of the
    chunks it finished (the others are left to the row path) and, when it could not read
    them all, why. Nothing when Spark cannot open the table (no JDBC driver, a query the
    server rejects): the row path reads it all, ~4x slower, and the seed records why
    (``Seeded.fallback``). A refused login or privilege is ``SourceSetupError``: the seed
    stops, saying what to fix."""
    predicates = [chunks.predicates[t.index] for t in tasks]
    try:
        frame = spark.read.jdbc(
            chunks.url, chunks.table, predicates=predicates, properties=dict(chunks.properties)
        )
    except Exception as exc:  # any other refusal here: the row path reads instead
        text = _cause(exc)
        if any(_REFUSED.search(line) for line in (text, *_chain(exc))):
            raise _refused(chunks, tasks[0].schema.source, text) from None
        jar = " ".join(chunks.jars) or f"a JAR with {chunks.driver}"
        why = f"Spark's JDBC source could not open the table: {text}"
        if "suitable driver" in text or "ClassNotFound" in text:
            why += f" (put {jar} on spark.jars)"
        return [], why
    frame = frame.select(*chunks.columns, *chunks.position_columns)
    done = frame.mapInArrow(_ChunkWriter(tuple(tasks), chunks), RESULT_DDL).collect()
    results = [ChunkResult(r.source, r.chunk, r.scn, r.rows, r.seconds) for r in done]
    if len(results) < len(tasks):
        return results, (
            "the fast path could not finish them (an empty chunk tells no snapshot SCN, or a "
            "value it cannot encode exactly: see the job's WARNINGs)"
        )
    return results, None


def _refused(chunks: JdbcChunks, source: str, text: str) -> SourceSetupError:
    return SourceSetupError(
        f"seed of {source}: the server refused Spark's JDBC connections ({chunks.url}): "
        f"{text}. The seed's own connection logged in with the same user and password, so "
        "the server tells Spark's apart (the account's grants for the host Spark connects "
        "from, an authentication plugin the JDBC driver lacks): fix the account, or seed "
        "with --no-jdbc to read every chunk through the ~4x slower row path",
        source=source,
    )


def _cause(exc: BaseException) -> str:
    """The first line of a JVM failure and, when it has one, its deepest cause's (a refused
    login says so there, not in Spark's first line)."""
    chain = _chain(exc)
    first = _first_line(exc)
    if chain and first.startswith("An error occurred while calling"):  # py4j says only that
        first = chain[0]
    root = chain[-1] if chain else ""
    said = root.partition(": ")[2] or root
    return first + (f" (caused by: {root[:200]})" if root and said not in first else "")


def _chain(exc: BaseException) -> list[str]:
    """The JVM exception's causes, one line each, outermost first: py4j's
    ``java_exception`` and its causes, or PySpark's captured exception (``_cause``, and the
    ``Caused by:`` lines of its stack trace)."""
    lines: list[str] = []
    java = getattr(exc, "java_exception", None)
    while java is not None and len(lines) < 20:
        lines.append(_first_line(Exception(str(java.toString()))))
        java = java.getCause()
    deepest = exc
    while (cause := getattr(deepest, "_cause", None)) is not None and len(lines) < 40:
        lines.append(_first_line(cause))
        deepest = cause
    stack = str(getattr(exc, "_stackTrace", "") or "")
    lines += [
        line.strip().removeprefix("Caused by:").strip()
        for line in stack.splitlines()
        if line.strip().startswith("Caused by:")
    ]
    return lines


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0][:200] if lines else repr(exc)
