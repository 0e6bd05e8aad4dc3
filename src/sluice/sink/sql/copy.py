"""A PostgreSQL replica's bulk upserts through ``COPY``: a held group's net rows written as CSV
by Arrow (no Python object per value), copied into a temporary table of the target's column
types, then one ``INSERT ... SELECT ... ON CONFLICT`` (issue 40: ``execute_values``, which
formats every value in Python, held the sink to 0.61x of a loop of it).

Exactness: only columns whose CSV text PostgreSQL reads back as the very value the parameter
path sends take this path (integers, decimals, text, JSON, booleans, dates and timestamps
within Python's calendar); a group with any other column kind (floats, bytes, intervals, arrays)
or an out-of-range date keeps ``execute_values``. ``tests/integration/test_sink_copy.py``
applies random groups both ways to a real server and compares the tables.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from sluice.schemas.columns import Column
from sluice.sink.sql.engines import Engine, Postgres

COPY_ROWS = 64  # fewer rows go as one execute_values statement

# kinds whose CSV text (as Arrow writes it) PostgreSQL parses to the parameter path's value
_AS_IS = frozenset({"int", "year", "bit", "decimal", "uint64", "string", "enum", "uuid", "json"})
_EPOCH = dt.date(1970, 1, 1).toordinal()
# days and microseconds since 1970 of years 1-9999 (Python's calendar: the parameter path's)
DAYS = (dt.date(1, 1, 1).toordinal() - _EPOCH, dt.date(9999, 12, 31).toordinal() - _EPOCH)
MICROS = (DAYS[0] * 86_400_000_000, (DAYS[1] + 1) * 86_400_000_000 - 1)


@dataclass(frozen=True, slots=True)
class CopyRows:
    """Rows to upsert as CSV, in the selected columns' order."""

    csv: bytes
    rows: int


def copy_rows(engine: Engine, columns: Sequence[Column], arrays: list[pa.Array]) -> CopyRows | None:
    """The rows as CSV for ``COPY``, or None when the parameter path must take them."""
    if not isinstance(engine, Postgres) or not arrays or len(arrays[0]) < COPY_ROWS:
        return None
    texts = []
    for col, arr in zip(columns, arrays, strict=True):
        text = _csv_column(col.kind, arr)
        if text is None:
            return None
        texts.append(text)
    table = pa.Table.from_arrays(texts, names=[f"c{i}" for i in range(len(texts))])
    out = io.BytesIO()
    pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False))
    return CopyRows(out.getvalue(), len(table))


def _csv_column(kind: str, arr: pa.Array) -> pa.Array | None:
    if kind in _AS_IS:
        return arr
    if kind == "bool":
        return arr.cast(pa.bool_())
    if kind == "date":
        return arr.cast(pa.int32()).cast(pa.date32()) if within(arr, *DAYS) else None
    if kind in ("datetime", "timestamp"):
        if not within(arr, *MICROS):
            return None  # PostgreSQL's infinities, dates Python's calendar has not
        return arr.cast(pa.timestamp("us", tz="UTC" if kind == "timestamp" else None))
    return None


def within(arr: pa.Array, low: int, high: int) -> bool:
    """Are the array's values (nulls aside) in ``[low, high]``?"""
    bounds = pc.min_max(arr)
    least, most = bounds["min"].as_py(), bounds["max"].as_py()
    return least is None or (least >= low and most <= high)


def copy_upsert(
    cur: Any, engine: Postgres, table: str, names: Sequence[str], key: Sequence[str], rows: CopyRows
) -> None:
    """``rows`` upserted into ``table`` through a temporary table of its columns' types
    (this session's, emptied before each load), in the transaction ``cur`` is in."""
    quoted = ", ".join(engine.quote(n) for n in names)
    tag = hashlib.sha256(f"{table}\0{quoted}".encode()).hexdigest()[:16]
    temp = engine.quote(f"sluice_load_{tag}")
    cur.execute(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {temp} AS SELECT {quoted} FROM {table} WITH NO DATA"
    )
    cur.execute(f"TRUNCATE {temp}")  # what an earlier load left (a rolled back one too)
    cur.copy_expert(
        f"COPY {temp} ({quoted}) FROM STDIN WITH (FORMAT csv, ENCODING 'UTF8')",
        io.BytesIO(rows.csv),
    )
    cur.execute(
        f"INSERT INTO {table} ({quoted}) SELECT {quoted} FROM {temp} "
        + engine.on_conflict(names, key)
    )
