"""The compiled pgoutput transcoder (``capture/postgres/_runs.c``) gives exactly the row path's
events (the generated transcoder, or values + the schema's encoder where it defers) and the
numpy run path's: on random rows of every kind it reads (since issue 40 every kind
``types.column_kind`` gives: real with NaN, infinities, -0, subnormals and halfway roundings,
time, bytea with every byte value, arrays of each element kind with NULLs, nesting, bounds,
quotes, backslashes, commas and braces), NULLs, edge values, every message it takes (Insert,
Update with and without an old key or row, Delete), keys of every shape and kind (int, bool,
text with JSON escapes, real, time, bytea, arrays, jsonb re-formatted, composite, none). What
it does not read exactly (another spelling of a value, a real past float32, a bytea that is
not hex, an array text the row path reads another way or refuses, a BC date,
another time zone, an unchanged TOASTed value, a key change, a cut message) it hands back
(None) for the Python paths to decide."""

from __future__ import annotations

import json
import os
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.capture.postgres import compiled
from sluice.capture.postgres.capture import PostgresCapture
from sluice.capture.postgres.tables import PgTable
from sluice.capture.postgres.types import column_kind
from sluice.capture.source import CaptureStats, report_transcoder
from sluice.errors import DecodeError
from sluice.schemas import Column, RowCodec, TableSchema
from tests.unit.test_pg_runs import (
    COLUMNS,
    MORE_COLUMNS,
    PLAIN_MORE,
    _plain,
    _tuple,
)

# Under CI a missing build fails (test_the_transcoder_is_built), never skips.
pytestmark = pytest.mark.skipif(
    compiled.unavailable() != "" and os.environ.get("CI") != "true",
    reason=f"no compiled path: {compiled.unavailable()}",
)
_TEXTS = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ['"', "\\", "\n\t\r\b\f", "\x00\x01\x1f\x7f", "é😀", "\u2028"]
)

# json/jsonb as the server prints them (jsonb: ", " and ": "), keys re-formatted by the row path
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXTS, inner, max_size=3),
    max_leaves=6,
).map(json.dumps) | st.sampled_from(['{"b": 1, "a": 2}', "1e400", "-0", "1.0", '"\\u00e9\\/"'])
# (name, type OID, the server's text forms); besides test_pg_runs' kinds and the kinds it does
# not take: a text, a bool, and (issue 40) a twin of each other kind that can be a key column
_KIND = {name: (oid, values) for name, oid, values in [*COLUMNS, *MORE_COLUMNS]}
_TWINS = ("d", "ts", "tz", "f8", "r", "tm", "by", "ai", "at", "af", "ab")
COLS: list[tuple[str, int, Any]] = [
    *COLUMNS,
    ("k", 25, _TEXTS),
    ("kb", 16, st.just("t")),
    *MORE_COLUMNS,
    *((f"k{name}", *_KIND[name]) for name in _TWINS),
    ("kjs", 3802, _JSON),
]
KEYS = (
    ("id",),
    ("id", "k"),
    ("k",),
    ("kb", "id"),
    (),
    ("kd", "id"),
    ("kts",),
    ("ktz", "k"),
    ("kf8",),
    ("kr",),
    ("ktm", "id"),
    ("kby",),
    ("kai", "kat"),
    ("kaf", "kab", "k"),
    ("kjs",),
    ("kjs", "kr", "id"),
)
_NEVER_NULL = {"id", "k", "kb", "kjs", *(f"k{name}" for name in _TWINS)}


def _table(key: tuple[str, ...] = ("id",), columns: list[tuple[str, int, Any]] = COLS) -> PgTable:
    schema = TableSchema(
        "public.t",
        3,
        tuple(Column(n, column_kind(oid)[0], n not in key, "t") for n, oid, _ in columns),
        key,
    )
    return PgTable("public.t", RowCodec(schema), [column_kind(oid)[1] for _, oid, _ in columns])


def _row_path(table: PgTable, payload: bytes) -> list[bytes]:
    """What capture's row path makes of a message (the generated transcoder, else the values
    and the schema's encoder)."""
    return table.row_events(payload)


_REL = struct.pack(">I", 16384)


def _insert(new: list[str | None]) -> bytes:
    return b"I" + _REL + b"N" + _tuple(new)


def _update(
    new: list[str | None], old: list[str | None] | None = None, whole: bool = False
) -> bytes:
    head = b"" if old is None else (b"O" if whole else b"K") + _tuple(old)
    return b"U" + _REL + head + b"N" + _tuple(new)


def _delete(old: list[str | None], whole: bool = False) -> bytes:
    return b"D" + _REL + (b"O" if whole else b"K") + _tuple(old)


def _key_only(table: PgTable, values: list[str | None]) -> list[str | None]:
    key = set(table.codec.schema.primary_key)
    return [
        v if c.name in key else None
        for c, v in zip(table.codec.schema.columns, values, strict=True)
    ]


def _messages(table: PgTable, rows: list[tuple[Any, ...]]) -> list[bytes]:
    """Each row as the message its first field names (old images keep the row's key)."""
    out = []
    for what, *values in rows:
        if what == "insert":
            out.append(_insert(values))
        elif what == "update":
            out.append(_update(values))
        elif what == "update_key":
            out.append(_update(values, _key_only(table, values)))
        elif what == "update_full":
            out.append(_update(values, values, whole=True))
        elif what == "delete":
            out.append(_delete(_key_only(table, values)))
        else:
            out.append(_delete(values, whole=True))
    return out


_WHAT = st.sampled_from(["insert", "update", "update_key", "update_full", "delete", "delete_full"])
rows = st.lists(
    st.tuples(
        _WHAT,
        *(values if n in _NEVER_NULL else st.one_of(st.none(), values) for n, _, values in COLS),
    ),
    min_size=1,
    max_size=40,
)


def _expected(table: PgTable, payloads: list[bytes]) -> list[bytes] | None:
    try:
        return [event for payload in payloads for event in _row_path(table, payload)]
    except DecodeError:
        return None


@settings(max_examples=200, deadline=None)
@given(rows=rows, key=st.sampled_from(KEYS))
def test_a_run_gives_the_row_paths_events_byte_for_byte(
    rows: list[tuple[Any, ...]], key: tuple[str, ...]
) -> None:
    table = _table(key)
    assert table.compiled is not None, table.python_why
    payloads = _messages(table, rows)
    out = table.compiled.events(payloads)
    assert out is not None, "the compiled path refused the canonical texts the server sends"
    assert out == _expected(table, payloads)  # (test_pg_runs: the numpy run path's too)


@settings(max_examples=200, deadline=None)
@given(text=_TEXTS, n=st.integers(-(1 << 63), (1 << 63) - 1), flag=st.sampled_from(["t", "f"]))
def test_keys_are_the_row_paths_canonical_json(text: str, n: int, flag: str) -> None:
    columns = [("id", 20, None), ("k", 25, None), ("kb", 16, None)]
    for key in (("id",), ("k",), ("kb",), ("k", "id", "kb")):
        table = _table(key, columns)
        assert table.compiled is not None
        payloads = [
            _insert([str(n), text, flag]),
            _update([str(n), text, flag], [str(n), text, flag]),
        ]
        assert table.compiled.events(payloads) == _expected(table, payloads)


def _row(n: int, **changes: str | None) -> list[str | None]:
    """Row ``n`` with ``changes``; the key columns of the other kinds repeat their plain twins'
    values (so the edge values are keys too), the jsonb key the plain jsonb column's."""
    plain: list[str | None] = [*_plain(n), "key", "t", *PLAIN_MORE]
    values = list(plain)
    names = [name for name, _, _ in COLS]
    for name, value in changes.items():
        values[names.index(name)] = value
    twins = [*_TWINS, "js"]
    return values + [values[names.index(twin)] or plain[names.index(twin)] for twin in twins]


@pytest.mark.parametrize(
    "changes",
    [
        {"id": "-9223372036854775808", "i2": "-32768", "f8": "-0", "b": "f"},
        {"id": "9223372036854775807", "f8": "1e+300", "d": "0001-01-01"},
        {"f8": "NaN", "ts": "0001-01-01 00:00:00", "tz": "9999-12-31 23:59:59.999999+00"},
        {"f8": "-Infinity", "d": "9999-12-31", "ts": "1969-12-31 23:59:59.5"},
        {"f8": "5e-324", "ts": "2000-02-29 12:00:00.000001", "k": 'a"b\\c\n\x01é'},
        {"id": "007", "i4": "-0", "txt": "", "num": "-12345678901234567890.123"},
        {"b": "true", "kb": "f"},  # not "t": false, as the row path reads it
        # issue 40: infinite dates and timestamps (the schemas' sentinels; keys "infinity")
        {"d": "infinity", "ts": "-infinity", "tz": "infinity"},
        {"d": "-infinity", "ts": "infinity", "tz": "-infinity"},
        # issue 40: real, time, bytea and arrays (their key twins take the same values)
        {"r": "NaN", "tm": "24:00:00", "by": "\\x", "ai": "{}", "at": "{}", "af": "{}"},
        {"r": "-0", "tm": "00:00:00", "by": "\\x" + bytes(range(256)).hex(), "ab": "{}"},
        {"r": "1e-45", "tm": "23:59:59.999999", "by": "\\xDEADbeef", "ai": "[0:1]={1,2}"},
        {"r": "-1.4e-45", "ai": "{{1,NULL},{NULL,-2147483648}}", "ab": "{{t,f},{NULL,t}}"},
        {"r": "Infinity", "at": '{"","NULL",NULL,"\\"","\\\\",",","{}"," ","\\u00e9"}'},
        {"r": "-Infinity", "af": "{-0,5e-324,NaN,Infinity,-Infinity,1e+308,5}"},
        {"af": "{1e999,-1e999}", "ab": "{true,tt,t}"},  # texts: not a number, not "t"
        {"r": "3.4028235677973362e+38", "at": '[-1:0][1:1]={{"a b"},{"é😀\\n\x01"}}'},
        {"r": "16777217", "ar": "{1.1,16777217,3.4028235e+38,NaN}", "a8": "{-007,-0}"},
        {"r": "1.17549435e-38", "aj": '{"{\\"a\\": [1, 2]}",NULL,"null"}', "an": "{NaN}"},
        {"aby": '{"\\\\xff",NULL}', "ad": "{infinity,2024-01-02}", "atz": '{"infinity"}'},
        {"ai": "{{{{{{1}}}}}}", "at": "{{{{{{a}}}}}}", "af": '{"1.5",NULL}', "ab": '{"t"}'},
        {"js": '{"b": [1, {"d": 1, "c": 2}], "a": "\\u00e9", "c": 1e400, "e": -0}'},
        {"js": '[1.0, 10000000000000000000000, "\\/", {"a": 1, "a": 2}]'},
    ],
)
def test_edge_values_give_the_row_paths_bytes(changes: dict[str, str | None]) -> None:
    for key in KEYS:
        table = _table(key)
        assert table.compiled is not None
        payloads = [
            _insert(_row(1, **changes)),
            _update(_row(1, **changes)),
            _update(_row(1, **changes), _row(1, **changes), whole=True),
            _delete(_row(1, **changes), whole=True),
        ]
        out = table.compiled.events(payloads)
        assert out is not None and out == _expected(table, payloads)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"d": "Infinity"}, "infinity in another spelling than the server's"),
        ({"ts": "-infinity "}, "likewise for a timestamp"),
        ({"d": "0044-03-15 BC"}, "a BC date"),
        ({"d": "10000-01-01"}, "a year past 9999"),
        ({"tz": "2024-01-02 03:04:05+02"}, "another time zone than UTC"),
        ({"ts": "2024-01-02T03:04:05"}, "another spelling fromisoformat reads"),
        ({"ts": "2024-01-02 03:04:05.1234567"}, "more than six fraction digits"),
        ({"d": "2023-02-29"}, "no such day"),
        ({"id": " 5"}, "an int with spaces (int() reads it)"),
        ({"id": "+5"}, "an int with a sign int() reads"),
        ({"id": "9223372036854775808"}, "an int past int64"),
        ({"f8": "1_0"}, "a float with an underscore (float() reads it)"),
        ({"f8": "inf"}, "an infinity the server does not spell so"),
        ({"txt": "<toast>"}, "an unchanged TOASTed value"),
        ({"id": None}, "a null in a column that allows none"),
        ({"r": "3.5e+38"}, "a real past float32's range (struct.pack refuses it)"),
        ({"r": "1_0"}, "a real with an underscore (float() reads it)"),
        ({"tm": "25:00:00"}, "no such time"),
        ({"tm": "12:34"}, "another spelling fromisoformat reads"),
        ({"tm": "24:00:00.5"}, "another 24: the row path reads as midnight"),
        ({"tm": "12:34:56.1234567"}, "more than six fraction digits"),
        ({"by": "\\x0"}, "an odd number of hex digits"),
        ({"by": "\\x0g"}, "not hex"),
        ({"by": "0102"}, "bytea_output=escape's form"),
        ({"by": "\\x01 02"}, "whitespace bytes.fromhex skips"),
        ({"ai": "{1,2"}, "an unclosed array"),
        ({"ai": "{1}}"}, "text after the array"),
        ({"ai": "1"}, "not an array"),
        ({"ai": "{99999999999999999999}"}, "an element past int64 (int() reads it)"),
        ({"ai": "{+1}"}, "an element with a sign int() reads"),
        ({"ai": "{a}"}, "not an int"),
        ({"ai": "[0:1]{1,2}"}, "bounds without ="),
        ({"ai": "{" * 70 + "1" + "}" * 70}, "nested deeper than PostgreSQL's 6 dimensions"),
        ({"af": "{1_0}"}, "a float element float() reads"),
        ({"at": '{"abc}'}, "an unclosed quote"),
        ({"at": '{"a\\'}, "an escape at the end"),
    ],
)
def test_what_it_does_not_read_exactly_goes_back_to_the_python_paths(
    changes: dict[str, str | None], why: str
) -> None:
    table = _table()
    assert table.compiled is not None
    good = [_insert(_row(n)) for n in range(10)]
    assert table.compiled.events([*good[:5], _insert(_row(5, **changes)), *good[5:]]) is None, why


def test_messages_it_does_not_read_go_back_to_the_python_paths() -> None:
    table = _table(("id",))
    assert table.compiled is not None
    good = [_insert(_row(n)) for n in range(10)]
    key_change = _update(_row(2), _key_only(table, _row(1)))  # two events: delete, insert
    bad_utf8_key = _table(("k",))
    short = good[3][:-4]
    longer = good[3] + b"x"
    other_count = b"I" + _REL + b"N" + _tuple(_row(1)[:-1])
    odd_marker = b"I" + _REL + b"K" + good[3][6:]
    for odd in (key_change, short, longer, other_count, odd_marker, b"T" + good[1][1:], b"I"):
        assert table.compiled.events([*good[:5], odd, *good[5:]]) is None
    assert bad_utf8_key.compiled is not None
    invalid = _insert(_row(1)).replace(b"key", b"k\xffy")
    assert bad_utf8_key.compiled.events([invalid]) is None
    # an array's text is decoded before it is read: not UTF-8, the Python paths decide
    assert table.compiled.events([_insert(_row(1)).replace(b'"b c"', b'"b\xffc"')]) is None
    json_key = _table(("kjs",))  # a jsonb key its key formatter refuses (json.loads raises)
    assert json_key.compiled is not None
    assert json_key.compiled.events([_insert(_row(1, js="not json"))]) is None
    assert table.compiled.events(good) == _expected(table, good)
    assert table.compiled.events([]) == []


_OIDS = (16, 17, 20, 21, 23, 25, 26, 114, 700, 701, 1082, 1083, 1114, 1184, 1266, 1700, 2950)
_ARRAY_OIDS = (1000, 1001, 1005, 1007, 1009, 1014, 1015, 1016, 1021, 1022, 1115, 1182, 1183)


@pytest.mark.parametrize("oid", [*_OIDS, 3802, *_ARRAY_OIDS, 1185, 1231, 2951, 199, 3807])
def test_every_kind_takes_the_compiled_path_as_a_column_and_as_a_key(oid: int) -> None:
    """Since issue 40 no type column_kind maps keeps a table on the Python paths."""
    assert _table(("id",), [("id", 20, None), ("x", oid, None)]).compiled is not None
    assert _table(("x",), [("x", oid, None)]).compiled is not None


def test_a_converter_it_does_not_mirror_keeps_the_python_paths() -> None:
    schema = TableSchema("public.t", 1, (Column("x", "time", False, "t"),), ("x",))
    table = PgTable("public.t", RowCodec(schema), [lambda text: 0])
    assert table.compiled is None and table.python_why == "column 'x' is t"


@settings(max_examples=300, deadline=None)
@given(data=st.data(), which=st.sampled_from([c for c in MORE_COLUMNS if c[1] != 1266]))
def test_each_other_kind_alone_gives_the_row_paths_bytes_as_a_value_and_as_a_key(
    data: st.DataObject, which: tuple[str, int, Any]
) -> None:
    """real, time, bytea and each array kind by itself: more examples of each than the
    all-kinds test gives, a NULL among them, and each as the whole key."""
    name, oid, values = which
    texts = data.draw(st.lists(values, min_size=1, max_size=6))
    for key, nulls in (((), [None]), (("id",), [None]), ((name,), [])):
        table = _table(key, [("id", 20, None), (name, oid, None)])
        assert table.compiled is not None
        rows = [[str(n), text] for n, text in enumerate([*texts, *nulls])]
        payloads = [
            *(_insert(row) for row in rows),
            *(_update(row, row, whole=True) for row in rows),
            *(_delete(row, whole=True) for row in rows),
        ]
        out = table.compiled.events(payloads)
        assert out is not None and out == _expected(table, payloads), (key, texts)


def test_sluice_pure_python_forces_the_python_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
    table = _table(("id",), COLUMNS)
    assert table.compiled is None and table.python_why == "SLUICE_PURE_PYTHON is set"
    assert table.runs is not None  # the numpy run path stays


def test_the_python_paths_are_reported_per_table_and_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the extension every table keeps the Python paths: /stats says so per table
    and counts them (a /metrics gauge), and the WARNING comes once per reason."""
    monkeypatch.setattr(compiled, "_MISSING", "the compiled transcoder is not built (test)")
    capture = PostgresCapture.__new__(PostgresCapture)
    capture.stats, capture._said_python = CaptureStats(), set()
    for source in ("public.a", "public.b"):
        capture.stats.tables[source] = {"replica_identity": "DEFAULT"}
        table = _table()
        table.source = source
        report_transcoder(capture.stats, capture._said_python, table.source, table.python_why)
    assert capture.stats.tables["public.a"] == {
        "replica_identity": "DEFAULT",
        "transcoder": "python",
        "transcoder_why": "the compiled transcoder is not built (test)",
    }
    assert capture.stats.details["python_transcoder_tables"] == 2
    said = [r for r in caplog.records if "Python transcoder" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"


def test_the_transcoder_is_built() -> None:
    """`pip install -e .` compiles it; under CI a missing build fails here."""
    assert compiled.unavailable() == ""
