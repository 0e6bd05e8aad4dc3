"""One table's polls: the page queries of its mode, the rows' ops, and where it stands.

Modes follow Kafka Connect's JDBC source. Each page is one query, ``ORDER BY`` the position
columns with a ``LIMIT``, continuing after the previous page's last row (keyset paging: a
page never holds a transaction open across the table, and an index on the position columns
serves it):

- ``incrementing``: ``inc > last_inc``. New rows only.
- ``timestamp``: ``last_ts < ts < now - delay``. A page is cut only where the timestamp
  changes, so resuming after its last timestamp skips nothing.
- ``timestamp+incrementing``: ``ts < now - delay AND (ts > last_ts OR (ts = last_ts AND
  inc > last_inc))``, read as two queries, each one seek in an index on ``(ts, inc)``: the
  rest of ``last_ts`` (``ts = last_ts AND inc > last_inc``), then the later timestamps. (As
  one ``OR``, or a row value, SQLite, PostgreSQL and MariaDB scan every row of ``last_ts``
  before the page: a first pass over rows of one timestamp took quadratic time.)
- ``bulk``: the whole table every poll, by primary key.

A page's events are encoded at once where the table's kinds allow (``pages.py``); the row
path here (``_event``) is the reference, and takes every page the page path refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any
from zlib import crc32

from sluice.capture.query.dialect import (
    INT_KINDS,
    TIME_KINDS,
    Batch,
    Dialect,
    Select,
    Unconverted,
)
from sluice.capture.query.options import TableOptions
from sluice.capture.query.pages import PageEncoder, page_path_refusal, truthy
from sluice.core import wire
from sluice.core.event import Op
from sluice.errors import ConfigError, SourceSetupError
from sluice.schemas import RowCodec, SchemaRegistry, TableSchema

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Page:
    """One page's events (encoded) and the table's position after it; ``skipped`` says why
    each row of it that did not convert has no event (the position is past them too)."""

    events: list[bytes]
    position: dict[str, Any]
    skipped: tuple[str, ...] = ()


def check_columns(schema: TableSchema, options: TableOptions) -> None:
    """Refuse options that do not fit the table, naming what to change."""
    source = schema.source
    kinds = {c.name: c.kind for c in schema.columns}
    where = f'[tables."{source}"]'
    if not schema.primary_key:
        raise SourceSetupError(
            f"table {source} has no primary key: every event needs a key; add one "
            f"(ALTER TABLE ... ADD PRIMARY KEY) or leave the table out",
            source=source,
        )
    named = [*options.timestamp_columns, options.incrementing_column, options.soft_delete_column]
    for name in (n for n in named if n is not None):
        if name not in kinds:
            raise ConfigError(
                f"{where}: {source} has no column {name!r} (it has {', '.join(kinds)})"
            )
    for name in options.timestamp_columns:
        if kinds[name] not in TIME_KINDS:
            raise ConfigError(
                f"{where}: timestamp_column {name!r} is not a date or time type "
                f"({_type(schema, name)}); name a DATETIME/TIMESTAMP column"
            )
    inc = options.incrementing_column
    if inc is not None and kinds[inc] not in INT_KINDS:
        raise ConfigError(
            f"{where}: incrementing_column {inc!r} is not an integer column "
            f"({_type(schema, inc)}); name an auto-increment id"
        )


def _type(schema: TableSchema, name: str) -> str:
    return next(c.source_type for c in schema.columns if c.name == name)


class TablePoller:
    """Polls one table; ``position`` is JSON (raw database values) and survives restarts."""

    def __init__(
        self,
        source: str,
        options: TableOptions,
        dialect: Dialect,
        registry: SchemaRegistry,
        position: dict[str, Any] | None,
    ) -> None:
        self.source = source
        self.options = options
        self.dialect = dialect
        self.registry = registry
        self.position: dict[str, Any] = dict(position or {})
        # pages encoded at once, and pages the row path took (a fallback: same events, slower),
        # with why the newest of those did; each new reason is a WARNING once
        self.page_path_pages = 0
        self.row_path_pages = 0
        self.row_path_why: str | None = None
        self._warned: set[str] = set()

    def schema(self) -> TableSchema:
        """The table as it is now, registered (a column added shows in the next poll)."""
        described = self.dialect.describe(self.source)
        check_columns(described, self.options)
        return self.registry.register(self.source, described.columns, described.primary_key)

    def poll(self) -> Iterator[Page]:
        """Pages of rows changed since the position, until a page comes back short."""
        schema = self.schema()
        upper = None
        if self.options.uses_timestamp:
            upper = self.dialect.before_now(
                schema, self.options.timestamp_columns[0], self.options.delay_s
            )
        key: tuple[Any, ...] | None = None  # bulk: the last key of this pass
        limit = self.options.page_rows
        codec = self.registry.codec(schema.source, schema.version)
        soft = self._soft_index(schema)
        pages = PageEncoder.build(schema, self.options, soft)
        if pages is None and schema.source not in self._warned:
            self._warned.add(schema.source)
            log.warning(
                "%s takes the row path (same events, slower): %s",
                self.source,
                page_path_refusal(schema),
            )
        while True:
            batch = self._read(schema, upper, key, limit)
            if self.options.mode == "timestamp" and len(batch.raw) == limit:
                batch = self._whole_timestamps(schema, batch)
            if not batch.raw:
                return
            position = dict(self.position)
            skipped: list[str] = []
            events = None if pages is None else pages.events(batch, position)
            if events is not None:
                self.page_path_pages += 1
            else:  # the row path decides
                self._row_path(None if pages is None else pages.refused, len(batch.raw))
                events = []
                for row, x in batch.rows():
                    if isinstance(row, Unconverted):
                        self._advance(position, x)
                        skipped.append(f"{row.error} (the row at {self._where(schema, x)})")
                    else:
                        events.append(self._event(schema, codec, soft, row, x, position))
            if self.options.mode == "bulk":
                key = tuple(batch.extra(batch.raw[-1]))
            yield Page(events, position, tuple(skipped))
            self.position = position
            if len(batch.raw) < limit:
                return

    def _row_path(self, why: str | None, rows: int) -> None:
        """Count a page the row path took, and say why once per reason (a table the page path
        never takes is said by ``schema``'s check, once)."""
        if why is None:
            return  # a short page, or a table the page path does not take (said once)
        self.row_path_pages += 1
        self.row_path_why = why
        if why not in self._warned:
            self._warned.add(why)
            log.warning(
                "%s: a page of %d rows took the row path (same events, slower): %s",
                self.source,
                rows,
                why,
            )

    # -- SQL ---------------------------------------------------------------------------------
    def _read(
        self,
        schema: TableSchema,
        upper: tuple[str, Any] | None,
        key: tuple[Any, ...] | None,
        limit: int,
    ) -> Batch:
        """One page; after a position in ``timestamp+incrementing`` mode, the rest of its
        timestamp first, then the later ones."""
        later = self._select(schema, upper, key, limit)
        if self.options.mode != "timestamp+incrementing" or "ts" not in self.position:
            return self.dialect.batch(later)
        assert upper is not None
        d, inc_column = self.dialect, self.options.incrementing_column
        ts, inc = self._ts(), d.quote(str(inc_column))
        mark = d.placeholder(schema, self.options.timestamp_columns[0])
        where = (
            f"{ts} < {upper[0]} AND {ts} = {mark} AND {inc} > {d.placeholder(schema, inc_column)}"
        )
        args = (upper[1], self.position["ts"], self.position["inc"])
        rest = d.batch(Select(schema, (ts, inc), where, args, inc, limit))
        if len(rest.raw) == limit:
            return rest
        more = d.batch(replace(later, limit=limit - len(rest.raw)))
        return rest.joined(more)

    def _ts(self) -> str:
        cols = [self.dialect.quote(c) for c in self.options.timestamp_columns]
        return cols[0] if len(cols) == 1 else f"COALESCE({', '.join(cols)})"

    def _select(
        self,
        schema: TableSchema,
        upper: tuple[str, Any] | None,
        key: tuple[Any, ...] | None,
        limit: int,
    ) -> Select:
        opts, d, pos = self.options, self.dialect, self.position
        inc = d.quote(opts.incrementing_column) if opts.incrementing_column else None
        clauses: list[str] = []
        args: list[Any] = []
        if opts.mode == "bulk":
            cols = [d.quote(c) for c in schema.primary_key]
            if key is not None:
                marks = ", ".join(d.placeholder(schema, c) for c in schema.primary_key)
                clauses.append(f"({', '.join(cols)}) > ({marks})")
                args += key
            return Select(
                schema,
                tuple(cols),
                " AND ".join(clauses) or "1=1",
                tuple(args),
                ", ".join(cols),
                limit,
            )
        extra: list[str] = []
        if opts.uses_timestamp:
            assert upper is not None
            ts, first = self._ts(), opts.timestamp_columns[0]
            clauses.append(f"{ts} < {upper[0]}")
            args.append(upper[1])
            mark = d.placeholder(schema, first)
            if "ts" in pos:
                # the later timestamps (timestamp+incrementing: after the rest of the last
                # one, which ``_read`` asks for first)
                clauses.append(f"{ts} > {mark}")
                args.append(pos["ts"])
            extra.append(ts)
            order = ts if opts.mode == "timestamp" else f"{ts}, {inc}"
        else:
            if "inc" in pos:
                clauses.append(f"{inc} > {d.placeholder(schema, opts.incrementing_column)}")
                args.append(pos["inc"])
            order = str(inc)
        if inc is not None:
            extra.append(inc)
        return Select(
            schema, tuple(extra), " AND ".join(clauses) or "1=1", tuple(args), order, limit
        )

    def _whole_timestamps(self, schema: TableSchema, batch: Batch) -> Batch:
        """A full page in ``timestamp`` mode, cut before its last timestamp (the next page
        starts after a timestamp, so it must hold all of them); a page of one timestamp is
        read whole."""
        at = batch.width if batch.extra_at is None else batch.extra_at[0]
        last = batch.raw[-1][at]
        kept = [raw for raw in batch.raw if raw[at] != last]
        if kept:
            return replace(batch, raw=kept, arrays=None)
        d = self.dialect
        mark = d.placeholder(schema, self.options.timestamp_columns[0])
        extra: tuple[str, ...] = (self._ts(),)
        if self.options.incrementing_column is not None:
            extra += (d.quote(self.options.incrementing_column),)
        select = Select(schema, extra, f"{self._ts()} = {mark}", (last,), self._ts(), None)
        return d.batch(select)

    # -- events ------------------------------------------------------------------------------
    def _event(
        self,
        schema: TableSchema,
        codec: RowCodec,
        soft: int | None,
        row: list[Any],
        extra: Sequence[Any],
        position: dict[str, Any],
    ) -> bytes:
        op: Op = "r" if self.options.mode == "bulk" else "u"
        if self._advance(position, extra):
            op = "c"
        before: list[Any] | None = None
        after: list[Any] | None = row
        if soft is not None and truthy(row[soft]):
            op, before, after = "d", row, None
        payload = codec.encode(before, after)
        key = codec.key_text(row)
        hashed = crc32(key.encode()) if key is not None else wire.KEYLESS_HASH
        return wire.encode_event(wire.RawEvent(schema.source, op, schema.version, hashed, payload))

    def _advance(self, position: dict[str, Any], extra: Sequence[Any]) -> bool:
        """Move ``position`` past a row, by its raw position values; whether the row is new
        (its incrementing value above any seen before)."""
        opts = self.options
        if opts.uses_timestamp:
            position["ts"] = extra[0]
        if opts.incrementing_column is None:
            return False
        inc = extra[-1]
        if opts.uses_incrementing:
            position["inc"] = inc
        if int(inc) > int(position.get("max_inc", -(2**63))):
            position["max_inc"] = int(inc)
            return True
        return False

    def _where(self, schema: TableSchema, extra: Sequence[Any]) -> str:
        """A row by its position values (bulk: its key), for a log line."""
        opts = self.options
        if opts.mode == "bulk":
            names = list(schema.primary_key)
        else:
            names = [opts.timestamp_columns[0]] if opts.uses_timestamp else []
            names += [opts.incrementing_column] if opts.incrementing_column else []
        return ", ".join(f"{n}={str(v)[:40]}" for n, v in zip(names, extra, strict=False))

    def _soft_index(self, schema: TableSchema) -> int | None:
        name = self.options.soft_delete_column
        return next((i for i, c in enumerate(schema.columns) if c.name == name), None)
