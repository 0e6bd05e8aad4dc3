"""What the query source needs of a database: its tables' schemas, SQL spelling, and rows.

A ``Dialect`` is one connection's worth of a database kind. Rows come out as the schema's
canonical values (what log capture of that kind decodes, so the same row encodes to the same
bytes) plus the *raw* values of the position columns, which are bound back unchanged in the
next poll's ``WHERE`` (a timestamp's own text compares exactly as the database stores it).
A row with a value that does not convert comes out as ``Unconverted`` beside its raw
position values, so a poll can skip it (``on_decode_error = "skip"``) and go on after it.

A poll reads a page at once as a ``Batch``: the driver's rows, the row path's conversion of
one (the reference), and a conversion of a whole column into the Arrow arrays the page path
encodes (``pages.py``), which raises ``Inexact`` where it cannot give the row path's values.
A dialect that reads a page column by column (PostgreSQL's ``COPY``) gives its raw columns as
Arrow arrays too (``Batch.arrays``); its rows are then made from them only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, overload

import pyarrow as pa

from sluice.errors import DecodeError
from sluice.schemas import Column, TableSchema

# Kinds a timestamp column may have, and an incrementing one.
TIME_KINDS = frozenset({"datetime", "timestamp", "date"})
INT_KINDS = frozenset({"int", "uint64", "year"})


@dataclass(frozen=True, slots=True)
class Unconverted:
    """A row the dialect could not convert; ``error`` names its table and column."""

    error: DecodeError


Row = list[Any] | Unconverted  # canonical values, or why there are none


class Inexact(ValueError):
    """A column of a page that the column conversion cannot give exactly as the row path
    would: the page takes the row path."""


@dataclass(frozen=True, slots=True)
class Batch:
    """A page as the driver gave it: each raw row holds the schema's columns, then the
    ``Select``'s extra values (``width`` columns before them)."""

    raw: Sequence[Sequence[Any]]
    width: int
    convert: Callable[[Sequence[Any]], tuple[Row, Sequence[Any]]]  # the row path, per row
    # column i's raw values as the Arrow array ``schemas.arrow_encoder`` takes (raises
    # ``Inexact``); None: this page takes the row path
    column: Callable[[int, Sequence[Any]], pa.Array] | None
    # every raw column (the row's, then the extra values) as an Arrow array of exactly the
    # raw values (``raw`` is then ``ArrayRows`` of them); None: read columns from ``raw``
    arrays: Sequence[pa.Array] | None = None
    # where in a raw row each extra value is, when some are the row's own columns (a query
    # need not read a column twice); None: the values after ``width``
    extra_at: tuple[int, ...] | None = None

    def extra(self, raw: Sequence[Any]) -> Sequence[Any]:
        """A raw row's extra values."""
        if self.extra_at is None:
            return raw[self.width :]
        return tuple(raw[i] for i in self.extra_at)

    def extra_columns(self, columns: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
        """The extra values' columns among all the raw columns of the page."""
        at = range(self.width, len(columns)) if self.extra_at is None else self.extra_at
        return [columns[i] for i in at]

    def rows(self) -> list[tuple[Row, Sequence[Any]]]:
        """The row path: ``(canonical row, raw extra values)`` of each row."""
        return [self.convert(raw) for raw in self.raw]

    def joined(self, more: Batch) -> Batch:
        """This page's rows then ``more``'s (of the same query shape)."""
        column = self.column if more.column is not None else None
        if self.extra_at != more.extra_at:  # the same extra values read: the same layout
            raise ValueError("pages of different layouts")
        if self.arrays is not None and more.arrays is not None:
            arrays = [_concat(a, b) for a, b in zip(self.arrays, more.arrays, strict=True)]
            return replace(self, raw=ArrayRows(arrays), column=column, arrays=arrays)
        return replace(self, raw=[*self.raw, *more.raw], column=column, arrays=None)


def _concat(a: Sequence[Any], b: Sequence[Any]) -> Any:
    """Two pages' raw values of a column: Arrow arrays joined, else lists of values."""
    if not len(a) or not len(b):  # a page's rest of its last timestamp, often empty
        return b if not len(a) else a
    if isinstance(a, pa.Array) and isinstance(b, pa.Array) and a.type == b.type:
        return pa.concat_arrays([a, b])
    return [*_values(a), *_values(b)]


def _values(column: Sequence[Any]) -> list[Any]:
    if isinstance(column, pa.Array):
        values: list[Any] = column.to_pylist()
        return values
    return list(column)


class ArrayRows(Sequence[tuple[Any, ...]]):
    """Rows made from columns of raw values when first needed (the last one alone, cheaply);
    a column is an Arrow array, or a list of the very values."""

    def __init__(self, arrays: Sequence[Sequence[Any]]) -> None:
        self._arrays = arrays
        self._length = len(arrays[0]) if arrays else 0
        self._rows: list[tuple[Any, ...]] | None = None

    def __len__(self) -> int:
        return self._length

    def _all(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            self._rows = list(zip(*map(_values, self._arrays), strict=True))
        return self._rows

    @overload
    def __getitem__(self, index: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[Any, ...]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, int) and self._rows is None:
            if not -self._length <= index < self._length:
                raise IndexError(index)
            return tuple(
                a[index].as_py() if isinstance(a, pa.Array) else a[index] for a in self._arrays
            )
        return self._all()[index]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._all())


def own_extras(
    select: Select, quote: Callable[[str], str], same: Callable[[Column], bool]
) -> tuple[tuple[str, ...], tuple[int, ...] | None]:
    """The extra expressions a page's query must still read, and ``Batch.extra_at``: an
    extra that is one of the row's own columns (quoted by ``quote``) is read once, where
    ``same(column)`` says its raw value is the extra's raw value."""
    schema = select.schema
    own = {quote(c.name): i for i, c in enumerate(schema.columns) if same(c)}
    if not any(e in own for e in select.extra):
        return select.extra, None
    read: list[str] = []
    at: list[int] = []
    for e in select.extra:
        if e in own:
            at.append(own[e])
        else:
            at.append(len(schema.columns) + len(read))
            read.append(e)
    return tuple(read), tuple(at)


@dataclass(frozen=True, slots=True)
class Select:
    """``SELECT <columns>, <extra> FROM <table> WHERE <where> ORDER BY <order>``."""

    schema: TableSchema
    extra: tuple[str, ...]  # SQL expressions whose raw values come back beside the row
    where: str  # with the dialect's placeholders
    args: tuple[Any, ...]
    order: str
    limit: int | None  # rows of one page (None: all)
    offset: int = 0

    def tail(self) -> str:
        """``ORDER BY ... LIMIT n [OFFSET m]``, the same in every dialect here."""
        limit = "" if self.limit is None else f" LIMIT {int(self.limit)}"
        if self.offset:
            limit += f" OFFSET {int(self.offset)}"
        return f" ORDER BY {self.order}{limit}"


class Dialect(Protocol):
    """One connection to a database, for the query source's poll thread."""

    name: str
    transient: tuple[type[BaseException], ...]  # a failure that a reconnect may cure
    errors: tuple[type[BaseException], ...]  # any failure of the driver

    def connect(self) -> None: ...

    def close(self) -> None: ...

    def ping(self) -> None:
        """A trivial query: the database is there (a failure is ``transient``)."""
        ...

    def describe(self, source: str) -> TableSchema:
        """Columns and primary key (``SourceSetupError`` for an unknown or unreadable table)."""
        ...

    def quote(self, name: str) -> str: ...

    def table_ref(self, source: str) -> str: ...

    def placeholder(self, schema: TableSchema, column: str | None) -> str:
        """A bound parameter compared with ``column`` (None: a plain value)."""
        ...

    def before_now(self, schema: TableSchema, column: str, delay_s: float) -> tuple[str, Any]:
        """SQL for "``delay_s`` before the database's now", in ``column``'s own terms, and
        its argument (or None)."""
        ...

    def rows(self, select: Select) -> Iterator[tuple[Row, Sequence[Any]]]:
        """``(canonical row, raw extra values)`` of the query, streamed (never all at once);
        a row with a value it cannot convert is ``Unconverted`` (its ``DecodeError`` names the
        table and column), its extra values still given."""
        ...

    def batch(self, select: Select) -> Batch:
        """The query's rows read at once (a page), for the page path and the row path."""
        ...

    def report(self) -> dict[str, Any]:
        """What the dialect tells of its reads for ``/stats`` (numbers go to ``/metrics``)."""
        ...
