"""Held columnar windows -> each table's net effect and its statement parameters, with numpy
and Arrow instead of a ``Change`` per event (``plan`` is the reference: same rows, same
deletes; ``tests/unit/test_sink_bulk.py`` compares them).

All windows of a group are decoded at once per table version (their records joined into one
buffer), so the fixed cost of the vectorized decoder is paid once per group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.schemas.arrow_decoder import ArrowDecoder, Images
from sluice.schemas.arrow_json import value_texts
from sluice.schemas.avro import TableSchema
from sluice.schemas.columns import Column
from sluice.sink.columnar import Columnar, TablePart
from sluice.sink.sql.copy import CopyRows, copy_rows
from sluice.sink.sql.engines import INFINITE_DAYS, INFINITE_MICROS, Convert, Engine, same
from sluice.sink.sql.literals import ValueRows, value_rows


@dataclass
class HeldTable:
    """One table's parts across the held windows (one schema version per group)."""

    part: TablePart  # the first (its schema, route and selection hold for all)
    table: str  # the qualified target table
    chunks: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (record, starts)


@dataclass
class HeldColumns:
    """Columnar windows held for one transaction."""

    records: list[bytes] = field(default_factory=list)
    tables: dict[str, HeldTable] = field(default_factory=dict)  # by source

    def fits(self, columns: Columnar) -> bool:
        """False when a table comes in another schema version than the one held: the held
        windows commit first (their net effect is per version)."""
        for part in columns.parts:
            held = self.tables.get(part.source)
            if held is not None and held.part.full.version != part.full.version:
                return False
        return True

    def add(self, columns: Columnar, table_of: dict[str, str]) -> None:
        record = len(self.records)
        self.records.append(columns.record)
        for part in columns.parts:
            held = self.tables.get(part.source)
            if held is None:
                held = self.tables[part.source] = HeldTable(part, table_of[part.source])
            held.chunks.append((record, part.starts))


@dataclass(frozen=True, slots=True)
class BulkKeyed:
    """A keyed table's net effect as driver parameters: keys to delete, rows to upsert."""

    table: str
    schema: TableSchema  # the selected columns: the upserted rows' columns, in order
    deletes: list[tuple[object, ...]]
    upserts: list[tuple[object, ...]]
    copy: CopyRows | None = None  # the upserts as CSV for COPY (then ``upserts`` is empty)
    values: ValueRows | None = None  # or as SQL literals (MariaDB; ``upserts`` empty too)


def bulk_steps(
    held: HeldColumns, engine: Engine, decoders: dict[tuple[str, int], ArrowDecoder]
) -> list[BulkKeyed]:
    """Each held table's net effect, its rows converted for the driver."""
    buf = np.frombuffer(b"".join(held.records), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(r) for r in held.records])
    steps = []
    for table in held.tables.values():
        part = table.part
        starts = np.concatenate([s + offsets[r] for r, s in table.chunks])
        decoder = decoders.get((part.source, part.full.version))
        if decoder is None:
            decoder = decoders[(part.source, part.full.version)] = ArrowDecoder(part.full)
        images = decoder.images(buf, starts)
        index = {c.name: i for i, c in enumerate(part.full.columns)}
        key = [index[name] for name in part.full.primary_key]
        upserts, deletes = net_effect(images, key)
        selected = [part.full.columns[i] for i in part.keep]
        after = [images.after[i].take(upserts) for i in part.keep]
        copy = copy_rows(engine, selected, after)
        values = value_rows(engine, selected, after) if copy is None else None
        bulk = copy is not None or values is not None
        rows = [] if bulk else _params(engine, selected, after)
        key_columns = [part.full.columns[i] for i in key]
        gone = _params(engine, key_columns, [images.before[i].take(deletes) for i in key])
        steps.append(BulkKeyed(table.table, part.schema, gone, rows, copy, values))
    return steps


def net_effect(images: Images, key: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(events whose after image is its key's final row, in the order of their last change;
    events whose before image's key is finally gone). A change's order is its event's: a
    primary-key change deletes the old key, then writes the new one."""
    n = len(images.has_before)
    b_rows, a_rows = np.flatnonzero(images.has_before), np.flatnonzero(images.has_after)
    codes = _key_codes(
        [images.before[k].take(b_rows) for k in key], [images.after[k].take(a_rows) for k in key]
    )
    kb = np.full(n, -1, dtype=np.int64)
    ka = np.full(n, -2, dtype=np.int64)
    kb[b_rows], ka[a_rows] = codes[: len(b_rows)], codes[len(b_rows) :]
    d_rows = np.flatnonzero(images.has_before & (~images.has_after | (kb != ka)))
    keys = np.concatenate([kb[d_rows], ka[a_rows]])
    order = np.concatenate([2 * d_rows, 2 * a_rows + 1])
    by_key = np.lexsort((order, keys))
    sorted_keys = keys[by_key]
    last = np.ones(len(by_key), dtype=bool)
    last[:-1] = sorted_keys[1:] != sorted_keys[:-1]
    final = np.sort(order[by_key[last]])
    upsert = (final & 1).astype(bool)
    return final[upsert] >> 1, final[~upsert] >> 1


def _key_codes(before: list[pa.Array], after: list[pa.Array]) -> np.ndarray:
    """One integer per key value (equal keys, equal codes), before images' first."""
    codes: np.ndarray | None = None
    for b, a in zip(before, after, strict=True):
        both = pa.concat_arrays([b, a])
        encoded = pc.dictionary_encode(both, null_encoding="encode")
        column = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        if codes is None:
            codes = column
        else:  # pairs of codes, renumbered densely so the next column cannot overflow
            pairs = codes * (int(column.max(initial=0)) + 1) + column
            codes = np.unique(pairs, return_inverse=True)[1].astype(np.int64)
    assert codes is not None
    return codes


def _params(
    engine: Engine, columns: Sequence[Column], arrays: list[pa.Array]
) -> list[tuple[object, ...]]:
    """Rows of driver parameters: Arrow's own conversion where it gives the converter's
    values, the converter per value elsewhere."""
    values = []
    for col, arr in zip(columns, arrays, strict=True):
        convert: Convert = engine.converter(col)
        arrow = engine.arrow_type(col)
        if col.kind in engine.json_texts:
            values.append(value_texts(col, arr).to_pylist())
        elif arrow is not None and not _infinite(arr, arrow):
            values.append(_cast(arr, arrow).to_pylist())
        elif convert is same:
            values.append(arr.to_pylist())
        else:
            values.append([None if v is None else convert(v) for v in arr.to_pylist()])
    return list(zip(*values, strict=True))


def _infinite(arr: pa.Array, arrow: pa.DataType) -> bool:
    """Does a date or timestamp column hold PostgreSQL's infinities (the converter's work:
    Arrow would overflow Python's dates)?"""
    if not (pa.types.is_date32(arrow) or pa.types.is_timestamp(arrow)) or len(arr) == 0:
        return False
    bounds = pc.min_max(arr.cast(pa.int64()))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None:
        return False
    if pa.types.is_date32(arrow):
        return bool(low in INFINITE_DAYS or high in INFINITE_DAYS)
    return bool(low in INFINITE_MICROS or high in INFINITE_MICROS)


def _cast(arr: pa.Array, arrow: pa.DataType) -> pa.Array:
    if pa.types.is_date32(arrow):
        return arr.cast(pa.int32()).cast(arrow)
    return arr.cast(arrow)
