"""A page's events encoded at once: the query source's page path.

The row path (``TablePoller._event``) costs ~10 us a row in Python: convert, find the op,
encode the Avro payload, format the key, hash it, frame the event. Here a page (up to
``page_rows`` rows) goes column by column instead: the dialect turns each column's raw
values into an Arrow array of canonical values (``Batch.column``, with Arrow kernels where
they are exact, else the row path's converter), ``schemas.arrow_encoder`` writes the payloads
and keys, the ops and the new position come from numpy over the position values, and the
frames are joined by Arrow.

What this path does not take exactly gives None and the page takes the row path, which
decides: a row that does not convert, a soft-deleted row, a null where the schema has none,
an incrementing value past 64 bits, a table ``arrow_encodable`` refuses, a page too short to
be worth it. ``tests/unit/test_query_pages.py`` checks both paths give the same events and
positions, per dialect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.capture.query.dialect import Batch, Inexact
from sluice.capture.query.options import TableOptions
from sluice.errors import first_line
from sluice.schemas import TableSchema
from sluice.schemas.arrow_encoder import (
    ArrowEncoder,
    Unencodable,
    arrow_encodable,
    arrow_refusal,
)

MIN_ROWS = 32  # shorter pages: the row path is as fast (Arrow's and numpy's fixed costs)
_TRUE_TEXT = frozenset({"1", "t", "true", "y", "yes"})
_LOWEST = -(2**63)  # below every incrementing value (the row path's start)
_REFUSED = (Inexact, Unencodable, pa.ArrowException, ValueError, TypeError, OverflowError)


def page_path_refusal(schema: TableSchema) -> str:
    """Why a table never takes the page path."""
    return arrow_refusal(schema) or "it takes no page path"


def truthy(value: Any) -> bool:
    """Whether a soft-delete column's canonical value marks its row deleted."""
    if value is None:
        return False
    if isinstance(value, str):
        return value.strip().lower() in _TRUE_TEXT
    return bool(value)


class PageEncoder:
    """The page path for one schema version of a table."""

    def __init__(self, schema: TableSchema, options: TableOptions, soft: int | None) -> None:
        self.schema = schema
        self.options = options
        self.soft = soft
        self._encoder = ArrowEncoder(schema)
        # why the last page this path gave back took the row path (None: a short page,
        # which the row path takes as fast: not worth a word)
        self.refused: str | None = None

    @classmethod
    def build(
        cls, schema: TableSchema, options: TableOptions, soft: int | None
    ) -> PageEncoder | None:
        """None when some column (or the key) cannot take this path."""
        return cls(schema, options, soft) if arrow_encodable(schema) else None

    def events(self, batch: Batch, position: dict[str, Any]) -> list[bytes] | None:
        """The page's events, ``position`` moved past it; None (``position`` untouched) when
        the row path must decide (``refused`` says why)."""
        self.refused = None
        if len(batch.raw) < MIN_ROWS:
            return None
        if batch.column is None:
            self.refused = "the driver gave this page's values in a form only rows convert"
            return None
        columns = _columns(batch.raw) if batch.arrays is None else batch.arrays
        width = batch.width
        try:
            arrays = [batch.column(i, columns[i]) for i in range(width)]
            if self.soft is not None and any(map(truthy, arrays[self.soft].to_pylist())):
                self.refused = "soft-deleted rows (the row path makes their deletes)"
                return None
            ops, moved = self._ops(batch.extra_columns(columns), position)
            events = self._encoder.events(arrays, ops)
        except _REFUSED as exc:
            self.refused = f"a value the column path cannot take exactly ({first_line(exc)})"
            return None
        position.update(moved)
        return events

    def _ops(
        self, extra: Sequence[Sequence[Any]], position: dict[str, Any]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Each row's op and the position after the page, as ``TablePoller._advance`` moves
        it row by row: a row is new (``c``) when its incrementing value is above every one
        seen before it."""
        opts = self.options
        rows = len(extra[0]) if extra else 0
        if opts.mode == "bulk":
            return np.full(rows, ord("r"), dtype=np.uint8), {}
        moved: dict[str, Any] = {}
        if opts.uses_timestamp:
            moved["ts"] = _last(extra[0])
        if opts.incrementing_column is None:
            return np.full(rows, ord("u"), dtype=np.uint8), moved
        incs = extra[-1]
        if opts.uses_incrementing:
            moved["inc"] = _last(incs)
        values = _integers(incs)
        highest = np.int64(int(position.get("max_inc", _LOWEST)))
        seen = np.maximum.accumulate(np.concatenate(([highest], values)))[:-1]
        new = values > seen
        if new.any():
            moved["max_inc"] = int(values.max())
        return np.where(new, np.uint8(ord("c")), np.uint8(ord("u"))), moved


def _columns(raw: Sequence[Sequence[Any]]) -> Sequence[Sequence[Any]]:
    """A page's rows as columns: one numpy object array (C's pace, no tuple per column),
    its columns views of the very values; ``zip`` where a value is itself a sequence."""
    try:
        table = np.array(raw, dtype=object)
    except ValueError:
        table = None
    if table is None or table.ndim != 2 or table.shape[0] != len(raw):
        return list(zip(*raw, strict=True))
    return list(table.T)


def _last(values: Sequence[Any]) -> Any:
    return values[-1].as_py() if isinstance(values, pa.Array) else values[-1]


def _integers(values: Sequence[Any]) -> np.ndarray:
    """Raw incrementing values as ``int(v)`` gives them (int64): Python ints as Arrow infers
    them, an Arrow array of integers' texts by its strict parse, else ``int`` one by one;
    a value past 64 bits (or none) raises (the row path)."""
    if isinstance(values, pa.Array):
        arr = values.cast(pa.int64()) if pa.types.is_string(values.type) else values
        if arr.type != pa.int64() or arr.null_count:
            raise ValueError("not all 64-bit integers")
        out: np.ndarray = arr.to_numpy()
        return out
    try:
        inferred = pa.array(values)
    except _REFUSED:
        inferred = None
    if inferred is not None and inferred.type == pa.int64() and not inferred.null_count:
        ints: np.ndarray = inferred.to_numpy()
        return ints
    return np.array([int(v) for v in values], dtype=np.int64)
