"""SQLite's raw values, a column at a time, as the page path's Arrow arrays (``pages.py``).

``sqlite3`` hands back ints, floats, text and bytes whatever a column's declared type, so a
column takes an Arrow kernel only where every value of the page has the storage class whose
conversion is provably the row path's (``sqlite.column_of``'s converters):

- INTEGER, REAL, TEXT, BLOB, JSON kinds: values already of the kind's type pass as they are
  (Arrow's own type inference says whether they all are);
- DATETIME/TIMESTAMP text in ``YYYY-MM-DD[ T]HH:MM:SS[.ffffff]``: Arrow's ISO-8601 cast,
  which refuses the dates and times ``datetime.fromisoformat`` refuses (and year 0000 is kept
  from it); DATE text ``YYYY-MM-DD`` likewise. A page whose texts all have one length (as a
  writer's usually do) is checked against the shape by numpy over its bytes, else by regex;
- DECIMAL(p,s) stored as INTEGER or REAL (NUMERIC affinity): the unscaled integer ``n`` with
  ``n / 10**s == value`` exactly and ``|n| < 2**46``. Then ``Decimal(str(value))`` is
  ``n / 10**s`` too: ``repr`` gives the shortest decimal that rounds to the float, and any
  other decimal within an ulp (< 10**-(s+1) at this size) needs more digits.

Any other page of a column goes through the row path's converter value by value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.capture.query.columns import converted
from sluice.schemas import Column

_Read = Callable[[Sequence[Any]], pa.Array]
_NATIVE = {
    "int": pa.int64(),
    "double": pa.float64(),
    "string": pa.string(),
    "json": pa.string(),
    "bytes": pa.binary(),
}
_STAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?$"
_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
# The same shapes by length: ``d`` a digit, ``?`` a space or ``T``, the rest as it is.
_STAMP_SHAPES = {
    19 + n: "dddd-dd-dd?dd:dd:dd" + ("." + "d" * (n - 1) if n else "")
    for n in (0, 2, 3, 4, 5, 6, 7)
}
_DATE_SHAPES = {10: "dddd-dd-dd"}
_SHAPES = {_STAMP: _STAMP_SHAPES, _DATE: _DATE_SHAPES}
_EXACT_UNSCALED = 2**46
_NUMERIC = (pa.int64(), pa.float64(), pa.null())


def column_reader(column: Column, convert: Callable[[Any], Any]) -> _Read:
    """``raw values -> Arrow array`` of one column; ``Inexact`` where the row path's
    converter refuses a value."""
    native = _NATIVE.get(column.kind)
    if native is not None:
        return _native(column, convert, native)
    if column.kind == "datetime":
        return _text_cast(column, convert, _STAMP, pa.timestamp("us"), pa.int64())
    if column.kind == "date":
        return _text_cast(column, convert, _DATE, pa.date32(), pa.int32())
    if column.kind == "decimal":
        return _decimal(column, convert)
    return lambda values: converted(column, convert, values)


def _inferred(values: Sequence[Any]) -> pa.Array | None:
    if isinstance(values, pa.Array):  # the compiled reader's: one storage class, as inferred
        return values
    try:
        return pa.array(values)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None


def _native(column: Column, convert: Callable[[Any], Any], native: pa.DataType) -> _Read:
    def read(values: Sequence[Any]) -> pa.Array:
        arr = _inferred(values)
        if arr is not None and (arr.type == native or arr.type == pa.null()):
            return arr.cast(native)
        return converted(column, convert, values)

    return read


def _text_cast(
    column: Column,
    convert: Callable[[Any], Any],
    pattern: str,
    parsed: pa.DataType,
    out: pa.DataType,
) -> _Read:
    def read(values: Sequence[Any]) -> pa.Array:
        arr = _inferred(values)
        if arr is not None and arr.type == pa.string() and _shaped(arr, pattern):
            return arr.cast(parsed).cast(out)  # an invalid date or time: ArrowInvalid
        return converted(column, convert, values)

    return read


def _shaped(arr: pa.Array, pattern: str) -> bool:
    """Whether every text of ``arr`` matches ``pattern`` (nulls aside) and none is of year
    0000."""
    fixed = _fixed_shape(arr, _SHAPES[pattern])
    if fixed is not None:
        return fixed
    return (
        pc.all(pc.match_substring_regex(arr, pattern)).as_py() is not False
        and not pc.any(pc.starts_with(arr, "0000")).as_py()
    )


def _fixed_shape(arr: pa.Array, shapes: dict[int, str]) -> bool | None:
    """``_shaped`` by numpy over the texts' bytes, for texts (no null) all of one length;
    None: not such a page."""
    if arr.null_count or not len(arr):
        return None
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[
        arr.offset : arr.offset + len(arr) + 1
    ]
    width = int(offsets[1] - offsets[0])
    if not (np.diff(offsets) == width).all():
        return None
    shape = shapes.get(width)
    if shape is None:
        return False  # no text of this length has the shape
    text = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    text = text.reshape(-1, width)
    digits = [i for i, c in enumerate(shape) if c == "d"]
    ok = bool(((text[:, digits] - np.uint8(48)) < 10).all())
    for i, c in enumerate(shape):
        if c == "?":
            ok = ok and bool(((text[:, i] == ord(" ")) | (text[:, i] == ord("T"))).all())
        elif c != "d":
            ok = ok and bool((text[:, i] == ord(c)).all())
    return ok and not bool((text[:, :4] == ord("0")).all(axis=1).any())


def _decimal(column: Column, convert: Callable[[Any], Any]) -> _Read:
    factor = 10.0**column.scale

    def read(values: Sequence[Any]) -> pa.Array:
        arr = _inferred(values) if column.scale <= 18 else None
        if arr is not None and arr.type in _NUMERIC:  # ints, floats (ints among floats: as float)
            try:
                x = arr.cast(pa.float64()).fill_null(0.0).to_numpy()
            except pa.ArrowInvalid:  # an int that no float holds exactly
                x = None
            if x is not None:
                n = np.rint(x * factor)
                exact = (np.abs(n) < _EXACT_UNSCALED) & (n / factor == x)
                if exact.all():
                    nulls = np.asarray(arr.is_null()) if arr.null_count else None
                    return pa.array(n.astype(np.int64), pa.int64(), mask=nulls)
        return converted(column, convert, values)

    return read
