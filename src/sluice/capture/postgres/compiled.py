"""The compiled transcoder (``_runs.c``) of a relation, where every column has a kind it reads.

``_runs.Program`` is the C twin of ``transcode.build_row_transcoder``'s generated function and
of ``runs.RunTranscoder``: it takes a whole run of one relation's change messages and returns
one wire event per message, byte for byte what the Python paths return
(``tests/unit/test_pg_compiled.py`` compares them on every kind), or None where they must
decide (a text it does not read, a key change, an unchanged TOASTed value...). The Python
paths stay the reference and the fallback:

- a relation with a column kind the C code does not read (numeric is text and is read;
  ``real``, ``time``, ``bytea``, arrays are not), or a key it does not format (json; keys of
  date, timestamp, timestamptz and double are formatted since issue 40), keeps the Python
  paths; ``program`` says why, and capture counts such tables in ``/stats``;
- without the extension (a build without a compiler) every relation keeps them, and capture
  says so once with a WARNING;
- ``SLUICE_PURE_PYTHON=1`` forces them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from sluice.capture.postgres.types import column_kind, same_text
from sluice.schemas import TableSchema
from sluice.schemas.compiled import Choice, load, pure_python_forced

_runs, _MISSING = load("sluice.capture.postgres._runs", "the compiled transcoder")

# Column forms and key kinds, as _runs.c numbers them.
_INT, _DOUBLE, _BOOL, _TEXT, _DATE, _DATETIME, _TIMESTAMPTZ = range(1, 8)
_KEY_INT, _KEY_BOOL, _KEY_TEXT, _KEY_DATE, _KEY_DATETIME, _KEY_TIMESTAMP, _KEY_DOUBLE = range(7)
# Key kinds whose JSON _runs.c writes from the value it read (_native/keys.h), by column form.
_KEY_OF_FORM = {
    _DATE: _KEY_DATE,
    _DATETIME: _KEY_DATETIME,
    _TIMESTAMPTZ: _KEY_TIMESTAMP,
    _DOUBLE: _KEY_DOUBLE,
}
_TEXT_KINDS = frozenset({"string", "json", "uuid", "enum", "inet6"})
_KEY_TEXT_KINDS = frozenset({"string", "uuid", "enum", "inet6"})  # json keys are re-formatted
# kind -> (form, the converter the row path has for it)
_FORMS: dict[str, tuple[int, Callable[[str], Any]]] = {
    "int": (_INT, int),
    "double": (_DOUBLE, float),
    "bool": (_BOOL, column_kind(16)[1]),
    "date": (_DATE, column_kind(1082)[1]),
    "datetime": (_DATETIME, column_kind(1114)[1]),
    "timestamp": (_TIMESTAMPTZ, column_kind(1184)[1]),
}


def unavailable() -> str:
    """Why no relation can take the compiled path ('' when it can)."""
    return _MISSING or pure_python_forced()


def program(schema: TableSchema, converters: Sequence[Callable[[str], Any]]) -> Choice:
    """The compiled transcoder of one schema version of a relation."""
    why = unavailable()
    if why:
        return Choice(None, why)
    if schema.version > 0xFFFF or len(schema.source.encode()) > 255:
        return Choice(None, "a schema version or source name beyond the wire header")
    slots = {name: n for n, name in enumerate(schema.primary_key)}
    columns = []
    for col, convert in zip(schema.columns, converters, strict=True):
        if col.kind in _TEXT_KINDS and convert is same_text:
            form = _TEXT
        elif col.kind in _FORMS and _FORMS[col.kind][1] is convert:
            form = _FORMS[col.kind][0]
        else:
            return Choice(None, f"column {col.name!r} is {col.source_type or col.kind}")
        columns.append((form, int(isinstance(col.avro_type(), list)), slots.get(col.name, -1)))
    kinds = {c.name: c.kind for c in schema.columns}
    index = {c.name: i for i, c in enumerate(schema.columns)}
    parts = []
    for n, name in enumerate(sorted(schema.primary_key)):  # as RowCodec.key_text orders them
        kind = kinds[name]
        if kind == "int":
            key_kind = _KEY_INT
        elif kind == "bool":
            key_kind = _KEY_BOOL
        elif kind in _KEY_TEXT_KINDS and columns[index[name]][0] == _TEXT:
            key_kind = _KEY_TEXT
        elif columns[index[name]][0] in _KEY_OF_FORM:
            key_kind = _KEY_OF_FORM[columns[index[name]][0]]
        else:
            return Choice(None, f"its key column {name!r} is {kind}")
        prefix = ("{" if n == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":"
        parts.append((index[name], prefix.encode(), key_kind))
    assert _runs is not None
    built = _runs.Program(tuple(columns), tuple(parts), schema.source.encode(), schema.version)
    return Choice(built, "")
