"""The seam seeding reads through: a source kind's ``Seeder`` checks and describes tables and
cuts them into primary-key ranges on the driver, and hands out a picklable ``ChunkReader``
that Spark tasks use to read one range each in a consistent snapshot, stamped with the SCN
that snapshot is consistent at.

The seed job names no source kind: it calls ``open_seeder(url)`` (in ``capture/source.py``),
which picks the implementation by the URL's scheme. Values come out canonical (what capture
of that kind decodes), so the schema's own encoder gives the bytes the relay gives.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sluice.errors import SourceError, SourceSetupError, first_line
from sluice.schemas import TableSchema


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Rows with ``lower < key <= upper`` in the table's key order (None: unbounded). Bound
    values are whatever the kind's reader takes back (JSON-recordable: ints, str, dates...)."""

    lower: tuple[Any, ...] | None
    upper: tuple[Any, ...] | None


@dataclass(frozen=True, slots=True)
class ChunkRead:
    """An open chunk read: ``scn`` is known before the first row; iterate ``rows`` (canonical
    values in the schema's column order). A failure while reading raises ``SourceError``."""

    scn: int
    rows: Iterator[list[Any]]


class ChunkReader(Protocol):
    """Reads chunks in the snapshot(s) the seeder opened; pickled to Spark's executors (the
    password travels with it)."""

    def read(self, schema: TableSchema, bounds: KeyRange, where: str | None) -> ChunkRead: ...


@dataclass(frozen=True, slots=True)
class JdbcChunks:
    """A table's chunks as Spark's own JDBC source reads them, in its JVM: the seed's fast
    path (the rows never pass through Python one by one).

    ``table`` is a derived table whose ``columns`` hold each schema column's canonical value
    (decimals unscaled; see ``schemas/arrow_encoder.py``) and whose ``position_columns`` say
    where the chunk's consistent snapshot stands; ``scn_of(position)`` makes that an SCN. One
    ``predicates`` entry per chunk of the plan, in order. ``properties`` open every
    connection in a consistent snapshot (``sessionInitStatement``)."""

    url: str
    properties: tuple[tuple[str, str], ...] = field(repr=False)  # the password travels here
    table: str
    columns: tuple[str, ...]
    position_columns: tuple[str, ...]
    predicates: tuple[str, ...]
    scn_of: Callable[[tuple[Any, ...]], int]
    driver: str
    jars: tuple[str, ...]  # where the driver class is, for ``spark.jars``


class Seeder(Protocol):
    """The driver's side of seeding one database; ``close()`` when the seed is over (an
    exported snapshot lives until then)."""

    def end_scn(self) -> int:
        """The source's current end, as an SCN."""
        ...

    def table(self, source: str, where: str | None) -> TableSchema:
        """The schema capture would register for ``source``; ``SourceSetupError`` when it
        cannot be seeded exactly (no primary key, no snapshots, no SELECT, a bad ``where``)."""
        ...

    def plan(self, schema: TableSchema, chunk_rows: int) -> list[KeyRange]:
        """Key ranges of about ``chunk_rows`` rows each, covering the whole key space."""
        ...

    def snapshot(self) -> ChunkReader:
        """Open what chunk reads need (checks that snapshots give an SCN here)."""
        ...

    def jdbc_chunks(
        self, schema: TableSchema, ranges: Sequence[KeyRange], where: str | None
    ) -> JdbcChunks | None:
        """The plan's chunks for Spark's JDBC source, or None where this kind (or this
        table's columns) has no such path: its chunks are read by ``ChunkReader``."""
        ...

    def close(self) -> None: ...


def seek_ranges(next_upper: Callable[[KeyRange], tuple[Any, ...] | None]) -> list[KeyRange]:
    """Key ranges found by seeks: ``next_upper(KeyRange(lower, None))`` is the key about a
    chunk past ``lower`` (``ORDER BY key LIMIT 1 OFFSET n-1``), None past the last row."""
    ranges: list[KeyRange] = []
    lower: tuple[Any, ...] | None = None
    while True:
        upper = next_upper(KeyRange(lower, None))
        ranges.append(KeyRange(lower, upper))
        if upper is None:
            return ranges
        lower = upper


# A single integer key is cut by arithmetic when its values fill at least half of their range
# (by the server's row estimate): chunks of about the asked size without a seek through the
# table (Flink CDC's "evenly distributed" split; its bound is looser).
MAX_KEYS_PER_ROW = 2


def even_ranges(lowest: int, highest: int, estimate: int, chunk_rows: int) -> list[KeyRange] | None:
    """Key ranges of about ``chunk_rows`` rows of an integer key from ``lowest`` to
    ``highest`` holding about ``estimate`` rows; None when the keys are too sparse to trust
    arithmetic (seek instead)."""
    span = highest - lowest + 1
    if estimate <= 0 or span > MAX_KEYS_PER_ROW * estimate:
        return None
    chunks = max(1, -(-estimate // chunk_rows))
    step = -(-span // chunks)
    uppers = [lowest + step * i - 1 for i in range(1, chunks) if lowest + step * i - 1 < highest]
    bounds: list[tuple[Any, ...] | None] = [None, *((u,) for u in uppers), None]
    return [KeyRange(lo, hi) for lo, hi in itertools.pairwise(bounds)]


def keyless(source: str) -> SourceSetupError:
    """A table without a primary key cannot be seeded exactly (one row per key)."""
    return SourceSetupError(
        f"table {source} has no primary key: seeding keeps one row per key, so it cannot "
        f"seed a keyless table; add one (ALTER TABLE {source} ADD PRIMARY KEY (...)) or "
        "leave the table out",
        source=source,
    )


@contextlib.contextmanager
def driver_errors(errors: tuple[type[BaseException], ...], what: str) -> Iterator[None]:
    """A driver's failure on the driver side of a seed as one ``SourceError`` line."""
    try:
        yield
    except errors as exc:
        text = first_line(exc)
        raise SourceError(f"{what} failed: {text}") from None


T = TypeVar("T")


def guarded(
    rows: Iterator[T], errors: tuple[type[BaseException], ...], what: Callable[[BaseException], str]
) -> Iterator[T]:
    """``rows``, with a driver's failure while reading turned into one ``SourceError``."""
    try:
        yield from rows
    except errors as exc:
        raise SourceError(what(exc)) from None
