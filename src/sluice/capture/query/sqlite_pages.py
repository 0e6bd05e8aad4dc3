"""SQLite pages read into columns by ``_sqlite_pages.c``, for the page path (``pages.py``).

``sqlite3`` makes a tuple per row and an object per value: for a page that alone costs more
than a plain ``SELECT``'s whole read. The compiled reader steps the same query on its own
read-only connection and fills Arrow buffers (int64, float64, UTF-8 text, bytes) without
making Python objects. A column holding more than one storage class comes back as the list
of the values ``sqlite3`` would give, so ``sqlite_columns`` treats it as today.

A page the reader cannot give exactly (text that is not UTF-8, a bound value of another
type, a column over 2 GiB, an error of its connection) is read through ``sqlite3`` instead:
the same events, slower. The dialect counts such pages and says why once. Without the
extension (built without a compiler, or ``SLUICE_PURE_PYTHON=1``) every page is read through
``sqlite3``, and the dialect says so once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from sluice.schemas.compiled import load, pure_python_forced

_pages, _MISSING = load("sluice.capture.query._sqlite_pages", "the compiled SQLite reader")

_INT, _FLOAT, _TEXT, _BLOB, _MIXED = 1, 2, 3, 4, 5
_TYPES = {_INT: pa.int64(), _FLOAT: pa.float64(), _TEXT: pa.string(), _BLOB: pa.binary()}

Columns = list[pa.Array | list[Any]]


def unavailable() -> str:
    """Why pages are read through ``sqlite3`` ('' when the compiled reader can read them)."""
    return _MISSING or pure_python_forced()


class PageReader:
    """A read-only connection of the compiled reader to one database file."""

    def __init__(self, uri: str, timeout_s: float) -> None:
        assert _pages is not None
        self._reader = _pages.Reader(uri, int(timeout_s * 1000))

    @classmethod
    def open(cls, uri: str, timeout_s: float) -> PageReader | str:
        """The reader, or why pages are read through ``sqlite3``."""
        why = unavailable()
        if why:
            return why
        try:
            return cls(uri, timeout_s)
        except OSError as exc:
            return f"the compiled SQLite reader cannot open the database ({exc})"

    def read(self, sql: str, args: Sequence[Any]) -> Columns | str:
        """The query's result columns (Arrow arrays, or lists of a mixed column's values),
        or why this page must be read through ``sqlite3``."""
        try:
            entries = self._reader.page(sql, tuple(args))
        except OSError as exc:  # sqlite3 reads it again and raises its own error if real
            return f"the compiled SQLite reader failed ({exc})"
        if isinstance(entries, str):
            return entries
        return [_column(e) for e in entries]

    def close(self) -> None:
        self._reader.close()


def _column(entry: tuple[Any, ...]) -> pa.Array | list[Any]:
    cls = entry[0]
    if cls == _MIXED:
        values: list[Any] = entry[1]
        return values
    if cls == 0:  # no value but NULL
        return pa.nulls(entry[1])
    _cls, rows, nulls, valid, *data = entry
    buffers = [None if valid is None else pa.py_buffer(valid), *map(pa.py_buffer, data)]
    return pa.Array.from_buffers(_TYPES[cls], rows, buffers, null_count=nulls)
