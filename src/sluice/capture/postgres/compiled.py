"""The compiled transcoder (``_runs.c``) of a relation, where every column has a kind it reads.

``_runs.Program`` is the C twin of ``transcode.build_row_transcoder``'s generated function and
of ``runs.RunTranscoder``: it takes a whole run of one relation's change messages and returns
one wire event per message, byte for byte what the Python paths return
(``tests/unit/test_pg_compiled.py`` compares them on every kind), or None where they must
decide (a text it does not read, a key change, an unchanged TOASTed value...). The Python
paths stay the reference and the fallback:

- a relation with a column whose converter the C code does not mirror keeps the Python paths;
  ``program`` says why, and capture counts such tables in ``/stats``. Since issue 40 it reads
  every kind ``types.column_kind`` gives (``real``, ``time``, ``bytea`` and the arrays too;
  numeric, timetz and the other unmapped types are their text) and formats a key of each
  (a json/jsonb key by calling its Python key formatter, which re-formats the document);
- without the extension (a build without a compiler) every relation keeps them, and capture
  says so once with a WARNING;
- ``SLUICE_PURE_PYTHON=1`` forces them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from sluice.capture.postgres.types import array_element, column_kind, same_text
from sluice.schemas import TableSchema
from sluice.schemas.avro import key_formatter
from sluice.schemas.compiled import Choice, load, pure_python_forced

_runs, _MISSING = load("sluice.capture.postgres._runs", "the compiled transcoder")

# Column forms and key kinds, as _runs.c numbers them.
_INT, _DOUBLE, _BOOL, _TEXT, _DATE, _DATETIME, _TIMESTAMPTZ, _FLOAT, _TIME, _BYTES = range(1, 11)
_ARRAY_FORMS = {"int": 11, "double": 12, "bool": 13, "text": 14}  # by array_element
_KEY_INT, _KEY_BOOL, _KEY_TEXT, _KEY_DATE, _KEY_DATETIME, _KEY_TIMESTAMP, _KEY_DOUBLE = range(7)
_KEY_TIME, _KEY_BYTES, _KEY_JSON, _KEY_CALL = range(7, 11)
# Key kinds whose JSON _runs.c writes from the value it read (_native/keys.h), by column form;
# an array key is the JSON it wrote (already what json.dumps(json.loads(...)) gives back)
_KEY_OF_FORM = {
    _DATE: _KEY_DATE,
    _DATETIME: _KEY_DATETIME,
    _TIMESTAMPTZ: _KEY_TIMESTAMP,
    _DOUBLE: _KEY_DOUBLE,
    _FLOAT: _KEY_DOUBLE,
    _TIME: _KEY_TIME,
    _BYTES: _KEY_BYTES,
    **dict.fromkeys(_ARRAY_FORMS.values(), _KEY_JSON),
}
_TEXT_KINDS = frozenset({"string", "json", "uuid", "enum", "inet6"})
_KEY_TEXT_KINDS = frozenset({"string", "uuid", "enum", "inet6"})  # json keys are re-formatted
# kind -> (form, the converter the row path has for it)
_FORMS: dict[str, tuple[int, Callable[[str], Any]]] = {
    "int": (_INT, int),
    "double": (_DOUBLE, float),
    "float": (_FLOAT, column_kind(700)[1]),
    "time": (_TIME, column_kind(1083)[1]),
    "bytes": (_BYTES, column_kind(17)[1]),
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
        elif col.kind == "json" and array_element(convert) is not None:
            form = _ARRAY_FORMS[str(array_element(convert))]
        else:
            return Choice(None, f"column {col.name!r} is {col.source_type or col.kind}")
        columns.append((form, int(isinstance(col.avro_type(), list)), slots.get(col.name, -1)))
    kinds = {c.name: c.kind for c in schema.columns}
    index = {c.name: i for i, c in enumerate(schema.columns)}
    parts: list[tuple[Any, ...]] = []
    for n, name in enumerate(sorted(schema.primary_key)):  # as RowCodec.key_text orders them
        kind, form = kinds[name], columns[index[name]][0]
        call: tuple[Callable[[str], str], ...] = ()
        if kind == "int":
            key_kind = _KEY_INT
        elif kind == "bool":
            key_kind = _KEY_BOOL
        elif kind in _KEY_TEXT_KINDS and form == _TEXT:
            key_kind = _KEY_TEXT
        elif form in _KEY_OF_FORM:
            key_kind = _KEY_OF_FORM[form]
        elif form == _TEXT:  # json/jsonb: the row path's formatter, called on its text
            key_kind, call = _KEY_CALL, (key_formatter(kind),)
        else:
            return Choice(None, f"its key column {name!r} is {kind}")
        prefix = ("{" if n == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":"
        parts.append((index[name], prefix.encode(), key_kind, *call))
    assert _runs is not None
    built = _runs.Program(tuple(columns), tuple(parts), schema.source.encode(), schema.version)
    return Choice(built, "")
