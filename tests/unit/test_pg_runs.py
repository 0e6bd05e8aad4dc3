"""PostgreSQL capture's bulk path (``capture/postgres/runs.py``) gives exactly the wire events
of the row path for every kind it takes, and hands back (None) what it cannot take exactly.

Messages are pgoutput Insert/Update bytes built from the text forms the server sends
(``DateStyle=ISO``, ``TimeZone=UTC``, shortest exact floats); the row path (generated
transcoder, or values + the schema's encoder where it defers) is the reference."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.capture.postgres import pgoutput
from sluice.capture.postgres.runs import RunTranscoder
from sluice.capture.postgres.tables import OP_C, OP_U, PgTable
from sluice.capture.postgres.transcode import Slow
from sluice.capture.postgres.types import column_kind
from sluice.errors import DecodeError
from sluice.schemas import Column, RowCodec, TableSchema

_EPOCH = dt.datetime(1970, 1, 1)


def _float_text(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(x).replace("inf", "Infinity")


def _stamp(micros: int) -> str:
    text = (_EPOCH + dt.timedelta(microseconds=micros)).isoformat(sep=" ")
    return text.rstrip("0").rstrip(".") if "." in text else text  # the server trims zeros


_MICROS = st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999)
# (name, type OID, text forms the server sends)
COLUMNS: list[tuple[str, int, Any]] = [
    ("id", 20, st.integers(-(1 << 63), (1 << 63) - 1).map(str)),
    ("i2", 21, st.integers(-(1 << 15), (1 << 15) - 1).map(str)),
    ("i4", 23, st.integers(-(1 << 31), (1 << 31) - 1).map(str)),
    ("f8", 701, st.floats(allow_nan=True).map(_float_text)),
    ("d", 1082, st.dates().map(lambda d: d.isoformat())),
    ("ts", 1114, _MICROS.map(_stamp)),
    ("tz", 1184, _MICROS.map(lambda m: _stamp(m) + "+00")),
    ("txt", 25, st.text()),
    ("num", 1700, st.decimals(allow_nan=False, places=2).map(str)),
    ("js", 3802, st.just('{"a": [1, 2]}')),
    ("u", 2950, st.uuids().map(str)),
    ("b", 16, st.sampled_from(["t", "f"])),
]
NAMES = [name for name, _, _ in COLUMNS]


# -- the other kinds (issue 40): the compiled and row paths take them, this path does not ----
def _pg_element(text: str | None) -> str:
    """An array element as the server's array_out writes it: quoted where it must be."""
    if text is None:
        return "NULL"
    if text == "" or text.upper() == "NULL" or any(c in '{},"\\ \t\n\r\v\f' for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


@st.composite
def _pg_arrays(draw: st.DrawFn, element: st.SearchStrategy[str]) -> str:
    """The server's text of an array: empty, or 1-3 dimensions (rectangular) of elements
    with NULLs, sometimes with explicit bounds (``[0:1]={...}``) as a lower bound other than
    1 prints."""
    dims = draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))
    if not dims:
        return "{}"
    flat = iter(
        draw(st.lists(st.none() | element, min_size=math.prod(dims), max_size=math.prod(dims)))
    )

    def nest(level: int) -> str:
        if level == len(dims):
            return _pg_element(next(flat))
        return "{" + ",".join(nest(level + 1) for _ in range(dims[level])) + "}"

    text = nest(0)
    if draw(st.booleans()) and draw(st.booleans()):
        text = (
            "".join(
                f"[{lo}:{lo + n - 1}]"
                for lo, n in zip(
                    draw(st.lists(st.integers(-3, 3), min_size=len(dims), max_size=len(dims))),
                    dims,
                    strict=True,
                )
            )
            + "="
            + text
        )
    return text


def _float32_text(x: float) -> str:
    """A float4 as the server prints it (shortest text that reads back as that float32)."""
    if not math.isfinite(x):
        return _float_text(x)
    for digits in range(1, 10):
        text = f"{x:.{digits}g}"
        with contextlib.suppress(OverflowError):  # 4e+38 for 3.4028235e+38
            if struct.pack("<f", float(text)) == struct.pack("<f", x):
                return text
    raise AssertionError(x)


def _time_text(t: dt.time) -> str:
    text = t.isoformat()
    return text.rstrip("0").rstrip(".") if "." in text else text  # the server trims zeros


def _bytea_text(raw: bytes) -> str:
    return "\\x" + raw.hex()


_REAL_EDGES = [
    "NaN",
    "Infinity",
    "-Infinity",
    "-0",
    "0",
    "1e-45",
    "-1.4e-45",
    "7.1e-46",
    "1.1754942e-38",
    "1.17549435e-38",
    "3.4028235e+38",
    "-3.4028235e+38",
    "3.4028235677973362e+38",
    "0.1",
    "16777217",
    "1.0000000596046448",  # halfway cases: rounded to even as struct packs them
]
_INTS = st.integers(-(1 << 31), (1 << 31) - 1).map(str)
_WORDS = st.text(max_size=6) | st.sampled_from(["NULL", "null", "", " ", "a,b", "{x}", '"', "\\"])
REALS = (
    st.floats(width=32).map(_float32_text)  # every float32: subnormals, NaN, infinities
    | st.floats(-3.4e38, 3.4e38).map(repr)  # doubles the server reads and rounds to float32
    | st.sampled_from(_REAL_EDGES)
)
TIMES = st.times().map(_time_text) | st.just("24:00:00")
BYTEAS = st.binary(max_size=20).map(_bytea_text) | st.sampled_from(
    [_bytea_text(b""), _bytea_text(bytes(range(256)))]
)
# (name, type OID, text forms the server sends): what the compiled path reads since issue 40
MORE_COLUMNS: list[tuple[str, int, Any]] = [
    ("r", 700, REALS),
    ("tm", 1083, TIMES),
    ("ttz", 1266, st.times().map(_time_text).map(lambda t: t + "+02")),  # timetz: its text
    ("by", 17, BYTEAS),
    ("ai", 1007, _pg_arrays(_INTS)),
    ("a8", 1016, _pg_arrays(st.integers(-(1 << 63), (1 << 63) - 1).map(str))),
    ("a2", 1005, _pg_arrays(st.sampled_from(["-32768", "32767", "0"]))),
    ("af", 1022, _pg_arrays(st.floats().map(_float_text))),
    ("ar", 1021, _pg_arrays(REALS)),
    ("ab", 1000, _pg_arrays(st.sampled_from(["t", "f"]))),
    ("at", 1009, _pg_arrays(_WORDS)),
    ("an", 1231, _pg_arrays(st.decimals(allow_nan=False, places=2).map(str) | st.just("NaN"))),
    ("ad", 1182, _pg_arrays(st.dates().map(lambda d: d.isoformat()))),
    ("atz", 1185, _pg_arrays(_MICROS.map(lambda m: _stamp(m) + "+00"))),
    ("aj", 3807, _pg_arrays(st.sampled_from(['{"a": 1}', "[]", '"x\\"y"', "null"]))),
    ("aby", 1001, _pg_arrays(st.binary(max_size=4).map(_bytea_text))),
]
PLAIN_MORE = [
    "1.5",
    "12:34:56.5",
    "12:34:56+02",
    "\\x00ff",
    "{1,NULL,3}",
    "{-1}",
    "{{1,2},{3,4}}",
    "{1.5,NaN}",
    "{0.1}",
    "{t,f}",
    '{a,"b c",NULL}',
    "{1.50}",
    "{2024-01-02}",
    '{"2024-01-02 03:04:05+00"}',
    '{"{\\"a\\": 1}"}',
    '{"\\\\x00"}',
]


def _table(
    columns: list[tuple[str, int, Any]] = COLUMNS, key: tuple[str, ...] = ("id",)
) -> PgTable:
    schema = TableSchema(
        "public.t",
        1,
        tuple(Column(n, column_kind(oid)[0], n not in key, "t") for n, oid, _ in columns),
        key,
    )
    return PgTable("public.t", RowCodec(schema), [column_kind(oid)[1] for _, oid, _ in columns])


def _tuple(values: list[str | None]) -> bytes:
    out = [struct.pack(">h", len(values))]
    for value in values:
        if value is None:
            out.append(b"n")
        elif value == "<toast>":
            out.append(b"u")
        else:
            data = value.encode()
            out.append(b"t" + struct.pack(">I", len(data)) + data)
    return b"".join(out)


def _message(values: list[str | None], update: bool = False) -> bytes:
    return (b"U" if update else b"I") + struct.pack(">I", 16384) + b"N" + _tuple(values)


def _row_path(table: PgTable, payload: bytes) -> list[bytes]:
    """What capture's row path makes of an Insert or a new-tuple-only Update."""
    try:
        return table.fast(payload[0], payload)
    except Slow:
        change = pgoutput.parse(payload)
        assert isinstance(change, pgoutput.Change) and change.new is not None
        new = table.values(change.new, "new row")
        return [table.event(OP_C if payload[:1] == b"I" else OP_U, None, new)]


rows = st.lists(
    st.tuples(
        st.booleans(),  # an update
        *(values if n == "id" else st.one_of(st.none(), values) for n, _, values in COLUMNS),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(rows=rows)
def test_a_run_gives_the_row_paths_events_byte_for_byte(rows: list[tuple[Any, ...]]) -> None:
    table = _table()
    assert table.runs is not None
    payloads = [_message(list(values), update) for update, *values in rows]
    try:
        expected = [event for payload in payloads for event in _row_path(table, payload)]
    except DecodeError:  # a text the row path refuses: the run path hands it back too
        assert table.runs.events(payloads) is None
        return
    assert table.runs.events(payloads) == expected


_PLAIN = "1|2|1.5|2024-01-02|2024-01-02 03:04:05|2024-01-02 03:04:05+00|x|1.00|{}|" + (
    f"{uuid.UUID(int=7)}|t"
)


def _plain(n: int) -> list[str | None]:
    return [str(n), *_PLAIN.split("|")]


@pytest.mark.parametrize(
    ("column", "text", "why"),
    [
        ("d", "infinity", "a date without a calendar day: the row path makes it null"),
        ("ts", "-infinity", "likewise for a timestamp"),
        ("d", "0044-03-15 BC", "a BC date"),
        ("txt", "<toast>", "an unchanged TOASTed value"),
        ("id", None, "a null in a column that allows none"),
    ],
)
def test_what_the_run_path_cannot_take_exactly_goes_back_to_the_row_path(
    column: str, text: str | None, why: str
) -> None:
    table = _table()
    assert table.runs is not None
    values = [_plain(n) for n in range(100)]
    values[57][NAMES.index(column)] = text
    assert table.runs.events([_message(v) for v in values]) is None, why


def test_messages_the_run_path_does_not_read_go_back_to_the_row_path() -> None:
    table = _table()
    assert table.runs is not None
    good = [_message(_plain(n)) for n in range(100)]
    old_key = (
        b"U"
        + struct.pack(">I", 16384)
        + b"K"
        + _tuple(["1"] + [None] * (len(COLUMNS) - 1))
        + good[1][5:]
    )
    short = good[3][:-4]
    other_count = b"I" + struct.pack(">I", 16384) + b"N" + _tuple(_plain(1)[:-1])
    assert len(_plain(1)) == len(COLUMNS)
    for odd in (old_key, short, other_count, b"D" + good[5][1:]):
        assert table.runs.events([*good[:50], odd, *good[50:]]) is None
    assert table.runs.events(good) == [e for p in good for e in _row_path(table, p)]


def test_tables_with_kinds_outside_the_run_path_have_none() -> None:
    """real, time, bytea (hex text) and arrays (JSON text) go from the compiled path
    (test_pg_compiled) to the row path; timetz is a text, which this path takes."""
    for name, oid, _ in MORE_COLUMNS:
        runs = _table([("id", 20, None), (name, oid, None)]).runs
        assert (runs is None) == (column_kind(oid)[0] != "string"), name
    assert len(PLAIN_MORE) == len(MORE_COLUMNS)
    assert _table([("id", 20, None), ("v", 25, None)], key=()).runs is None  # no key
    assert isinstance(_table().runs, RunTranscoder)
