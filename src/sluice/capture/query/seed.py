"""Seeding from a query source (``bootstrap seed --source query+...``, ``run --seed``).

A query source has no log position to stamp a snapshot with; its SCNs are times (microseconds
since the epoch, see ``capture.py``). So each chunk is stamped with the time its read began,
on the same clock as the relay's polls (run both on machines whose clocks agree). A row that
changed after its chunk was read is polled again later, with a later SCN, so the fold's
"newest by SCN" ends exact once the log covers the seed, as for the log sources. Chunks are
primary-key ranges found with ``ORDER BY key LIMIT 1 OFFSET n`` seeks, read with row
comparisons on the key, through the same dialect (and converters) as the polls.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.capture.query.dialect import Dialect, Select, Unconverted
from sluice.capture.query.url import dialect_of, parse_query_url
from sluice.capture.seeding import ChunkRead, JdbcChunks, KeyRange, keyless, seek_ranges
from sluice.errors import SourceError, SourceSetupError, first_line
from sluice.schemas import TableSchema


def _now_scn() -> int:
    return int(time.time() * 1_000_000)


def _range(d: Dialect, schema: TableSchema, bounds: KeyRange) -> tuple[str, list[Any]]:
    """``(k1, k2) > (?, ?) AND (k1, k2) <= (?, ?)`` with the bounds' raw values."""
    cols = f"({', '.join(d.quote(c) for c in schema.primary_key)})"
    marks = f"({', '.join(d.placeholder(schema, c) for c in schema.primary_key)})"
    clauses, args = [], []
    if bounds.lower is not None:
        clauses.append(f"{cols} > {marks}")
        args += list(bounds.lower)
    if bounds.upper is not None:
        clauses.append(f"{cols} <= {marks}")
        args += list(bounds.upper)
    return " AND ".join(clauses) or "1=1", args


def _where(condition: str, where: str | None, percent: bool) -> str:
    if not where:
        return condition
    return f"{condition} AND ({where.replace('%', '%%') if percent else where})"


@dataclass(frozen=True, slots=True)
class QueryChunkReader:
    """Reads one key range per chunk, stamped with the time its read began (picklable: the
    source URL travels with it, password included)."""

    url: str

    def read(self, schema: TableSchema, bounds: KeyRange, where: str | None) -> ChunkRead:
        dialect = dialect_of(parse_query_url(self.url))
        dialect.connect()
        scn = _now_scn()
        dialect.describe(schema.source)  # the dialect's own view of the columns
        condition, args = _range(dialect, schema, bounds)
        select = Select(
            schema,
            (),
            _where(condition, where, dialect.placeholder(schema, None) != "?"),
            tuple(args),
            ", ".join(dialect.quote(c) for c in schema.primary_key),
            None,
        )
        return ChunkRead(scn, _rows(dialect, select))


def _rows(dialect: Dialect, select: Select) -> Iterator[list[Any]]:
    try:
        for row, _extra in dialect.rows(select):
            if isinstance(row, Unconverted):  # a seed holds every row or fails
                raise row.error
            yield row
    except dialect.errors as exc:
        raise SourceError(f"reading {select.schema.source} failed: {first_line(exc)}") from None
    finally:
        dialect.close()


class QuerySeeder:
    """The ``Seeder`` of a query source: checks and plans through one dialect connection."""

    def __init__(self, url: str, dialect: Dialect) -> None:
        self.url = url
        self.dialect = dialect
        dialect.connect()

    def end_scn(self) -> int:
        return _now_scn()

    def table(self, source: str, where: str | None) -> TableSchema:
        schema = self.dialect.describe(source)
        if not schema.primary_key:
            raise keyless(source)
        if where:
            select = Select(
                schema,
                (),
                _where("1=1", where, self.dialect.placeholder(schema, None) != "?"),
                (),
                "1",
                0,
            )
            refused: tuple[type[BaseException], ...] = (*self.dialect.errors, SourceError)
            try:
                list(self.dialect.rows(select))
            except refused as exc:  # the database's own words
                raise SourceSetupError(
                    f"--where is not a condition on {source}: {first_line(exc)}", source=source
                ) from None
        return schema

    def plan(self, schema: TableSchema, chunk_rows: int) -> list[KeyRange]:
        d = self.dialect
        keys = tuple(d.quote(c) for c in schema.primary_key)

        def next_upper(after: KeyRange) -> tuple[Any, ...] | None:
            condition, args = _range(d, schema, after)
            select = Select(
                schema, keys, condition, tuple(args), ", ".join(keys), 1, chunk_rows - 1
            )
            found = list(d.rows(select))
            return None if not found else tuple(found[0][1])

        return seek_ranges(next_upper)

    def snapshot(self) -> QueryChunkReader:
        return QueryChunkReader(self.url)

    def jdbc_chunks(
        self, schema: TableSchema, ranges: Sequence[KeyRange], where: str | None
    ) -> JdbcChunks | None:
        del schema, ranges, where
        return None  # chunks are read through Python (no JDBC path yet)

    def close(self) -> None:
        self.dialect.close()
