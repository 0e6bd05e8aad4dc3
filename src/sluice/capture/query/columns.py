"""A page's canonical values column by column, as the Arrow arrays ``schemas.arrow_encoder``
takes: a kind's canonical Python values in its Arrow type, a decimal as its unscaled int64.

``canonical`` is exact by construction (the values are the row path's own); ``converted``
runs the row path's per-value converter over a column first. Anything Arrow refuses (a value
out of range, a decimal with more digits than its scale) raises, and the page takes the row
path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.capture.query.dialect import Inexact
from sluice.schemas import Column

ARROW_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "date": pa.int32(),
    "datetime": pa.int64(),
    "timestamp": pa.int64(),
    "double": pa.float64(),
    "string": pa.string(),
    "enum": pa.string(),
    "json": pa.string(),
    "uuid": pa.string(),
    "inet6": pa.string(),
    "bytes": pa.binary(),
    "bool": pa.bool_(),
}
_WIDE_DECIMAL = 38  # Arrow's widest decimal128: any value of a column's scale that fits


def canonical(column: Column, values: Sequence[Any]) -> pa.Array:
    """Canonical values (the row path's, None for null) as the column's Arrow array."""
    if column.kind == "decimal":
        return unscaled(pa.array(values, pa.decimal128(_WIDE_DECIMAL, column.scale)))
    return pa.array(values, ARROW_TYPES[column.kind])


def converted(column: Column, convert: Callable[[Any], Any], values: Sequence[Any]) -> pa.Array:
    """Raw values through the row path's converter (None stays null); a value it refuses
    raises ``Inexact`` (the row path names the column)."""
    if isinstance(values, pa.Array):
        values = values.to_pylist()
    try:
        return canonical(column, [None if v is None else convert(v) for v in values])
    except (ValueError, OverflowError, ArithmeticError, TypeError) as exc:
        raise Inexact(str(exc)) from None


def unscaled(decimals: pa.Array) -> pa.Array:
    """A decimal128 array's unscaled values as int64 (nulls kept); ``Inexact`` past 64 bits."""
    words = np.frombuffer(decimals.buffers()[1], dtype="<i8")
    words = words[2 * decimals.offset : 2 * (decimals.offset + len(decimals))].reshape(-1, 2)
    low, high = words[:, 0], words[:, 1]
    valid = np.asarray(decimals.is_valid())
    if ((high != (low >> np.int64(63))) & valid).any():
        raise Inexact("a decimal's unscaled value does not fit 64 bits")
    mask = None if decimals.null_count == 0 else ~valid
    return pa.array(low, pa.int64(), mask=mask)
