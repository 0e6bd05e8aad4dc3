"""The Spark source's Arrow path for the generic columns gives exactly ``GenericRows``'s
batches: every column, in event order, across tables, windows, truncates and pieces."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.capture.mysql import capture as mysql_capture
from sluice.capture.postgres import capture as postgres_capture
from sluice.core import wire
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.columns import (
    DATE_INFINITY,
    DATE_MINUS_INFINITY,
    MICROS_INFINITY,
    MICROS_MINUS_INFINITY,
)
from sluice.schemas.debezium import DebeziumOptions, DebeziumWindows
from sluice.spark.arrowdbz import FastDebeziumRows
from sluice.spark.arrowrows import FastGenericRows, FastTypedRows
from sluice.spark.rows import DebeziumRows, GenericRows, TypedRows, chunks

ORDERS = TableSchema(
    "shop.orders",
    2,
    (
        Column("id", "int", False, "int"),
        Column("note", "string", True, "text"),
        Column("amount", "decimal", True, "decimal(10,2)", 10, 2),
        Column("at", "datetime", True, "datetime(6)"),
    ),
    ("id",),
)
LOG = TableSchema("shop.log", 1, (Column("msg", "string", True, "text"),), ())
TAGS = TableSchema("shop.tags", 1, (Column("t", "set", True, "set('a','b')"),), ())
CODECS = {(s.source, s.version): RowCodec(s) for s in (ORDERS, LOG, TAGS)}


def codec_for(source: str, version: int) -> RowCodec:
    return CODECS[(source, version)]


order = st.tuples(
    st.integers(0, 50),
    st.one_of(st.none(), st.text(max_size=6)),
    st.one_of(st.none(), st.integers(-(10**8), 10**8).map(lambda v: Decimal(v).scaleb(-2))),
    st.one_of(st.none(), st.integers(-(10**15), 10**15)),
).map(list)
event = st.one_of(
    st.tuples(st.just(ORDERS), st.sampled_from("cud"), order, order),
    st.tuples(st.just(LOG), st.just("c"), st.just(None), st.tuples(st.text(max_size=4)).map(list)),
    st.tuples(st.just(ORDERS), st.just("t"), st.none(), st.none()),
)


def _window(scn: int, events: list[tuple[Any, ...]]) -> bytes:
    raw = []
    for schema, op, before, after in events:
        if op == "t":
            payload, version = b"", 0
        else:
            version = schema.version
            b = None if op == "c" else before
            a = None if op == "d" else after
            payload = CODECS[(schema.source, version)].encode(b, a)
        raw.append(wire.encode_event(wire.RawEvent(schema.source, op, version, 0, payload)))
    return wire.encode_window(scn, scn - 1, 1_700_000_000_123 + scn, raw)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.lists(event, min_size=1, max_size=12), min_size=1, max_size=4), st.booleans())
def test_the_arrow_path_equals_generic_rows(windows: list[list[Any]], snapshot: bool) -> None:
    records = [_window(100 + i, events) for i, events in enumerate(windows)]
    op = "r" if snapshot else None
    fast, slow = FastGenericRows(op), GenericRows(False, op)
    for rows in (fast, slow):
        for record in records:
            rows.add_window(record, codec_for)
    got, want = fast.batch(), slow.batch()
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()
    assert len(fast) == 0  # the batch took them
    assert fast.row_path_batches == 0


def test_a_table_the_arrow_path_cannot_read_takes_the_row_path() -> None:
    record = _window(7, [(TAGS, "c", None, [["a"]]), (LOG, "c", None, ["x"])])
    fast, slow = FastGenericRows(), GenericRows(False)
    fast.add_window(record, codec_for)
    slow.add_window(record, codec_for)
    assert fast.batch().to_pylist() == slow.batch().to_pylist()
    assert fast.row_path_batches == 1


def test_tuples_for_python_rows() -> None:
    record = _window(7, [(LOG, "c", None, ["x"]), (LOG, "c", None, ["y"])])
    rows = list(chunks(FastGenericRows(), [record], codec_for, arrow=False))
    assert [r[6] for r in rows] == ['{"msg": "x"}', '{"msg": "y"}']


def test_raw_columns_and_pieces_equal_generic_rows() -> None:
    """With ``includeRaw``: sequence numbers (a piece's from its first event), key hashes
    and payloads as the row path gives them."""
    first = _window(7, [(ORDERS, "c", None, [1, "a", None, None]), (ORDERS, "t", None, None)])
    piece = _window(7, [(LOG, "c", None, ["x"]), (ORDERS, "d", [1, "a", None, 5], None)])
    fast, slow = FastGenericRows(include_raw=True), GenericRows(True)
    for rows in (fast, slow):
        rows.add_window(first, codec_for)
        rows.add_window(piece, codec_for, first_seq=2)
    got, want = fast.batch(), slow.batch()
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()
    assert [r["seq"] for r in got.to_pylist()] == [0, 1, 2, 3]


# -- typed rows: every kind the Arrow decoder takes, two schema versions ---------------------
def _scaled(value: int) -> Decimal:
    return Decimal(value).scaleb(-4)


# years 1..9999, and PostgreSQL's infinities (null in typed rows)
_MICROS = st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999) | st.sampled_from(
    [MICROS_INFINITY, MICROS_MINUS_INFINITY]
)
_DAYS = st.integers(-719_162, 2_932_896) | st.sampled_from([DATE_INFINITY, DATE_MINUS_INFINITY])
TYPED_KINDS: list[tuple[str, str, Any, int, int]] = [
    ("int", "bigint", st.integers(-(1 << 63), (1 << 63) - 1), 0, 0),
    ("year", "year", st.integers(0, 2155), 0, 0),
    ("bool", "boolean", st.integers(0, 1), 0, 0),
    ("time", "time(6)", st.integers(-(10**12), 10**12), 0, 0),
    ("date", "date", _DAYS, 0, 0),
    ("datetime", "datetime(6)", _MICROS, 0, 0),
    ("timestamp", "timestamp(6)", _MICROS, 0, 0),
    ("double", "double", st.floats(allow_nan=False), 0, 0),
    ("float", "float", st.floats(width=32, allow_nan=False), 0, 0),
    ("decimal", "decimal(18,4)", st.integers(-(10**17), 10**17).map(_scaled), 18, 4),
    ("uint64", "bigint unsigned", st.integers(0, (1 << 63) - 1).map(Decimal), 0, 0),
    ("string", "varchar(40)", st.text(max_size=5), 0, 0),
    ("json", "json", st.dictionaries(st.text(max_size=3), st.integers()).map(json.dumps), 0, 0),
    ("bytes", "varbinary(8)", st.binary(max_size=5), 0, 0),
]  # fmt: skip
TYPED = TableSchema(
    "shop.all",
    2,
    tuple(Column(f"c{i}", k, i > 0, s, p, sc) for i, (k, s, _, p, sc) in enumerate(TYPED_KINDS)),
    ("c0",),
)
# version 1: before c13 was added; version 3: c9 of another precision (the row path's)
TYPED_V1 = TableSchema("shop.all", 1, TYPED.columns[:13], ("c0",))
TYPED_V1_OTHER = TableSchema(
    "shop.all",
    3,
    (*TYPED.columns[:9], Column("c9", "decimal", True, "decimal(10,2)", 10, 2)),
    ("c0",),
)
TYPED_CODECS = {(s.source, s.version): RowCodec(s) for s in (TYPED, TYPED_V1, TYPED_V1_OTHER)}
typed_image = st.tuples(
    *(st.one_of(st.none(), v) if i else v for i, (_, _, v, _, _) in enumerate(TYPED_KINDS))
)


def _typed_window(scn: int, events: list[tuple[Any, int, Any, Any]]) -> bytes:
    raw = []
    for op, version, before, after in events:
        if op == "t":
            raw.append(wire.encode_event(wire.RawEvent("shop.all", "t", 0, 0, b"")))
            continue
        width = len(TYPED_CODECS[("shop.all", version)].schema.columns)
        b = None if op == "c" else list(before)[:width]
        a = None if op == "d" else list(after)[:width]
        payload = TYPED_CODECS[("shop.all", version)].encode(b, a)
        raw.append(wire.encode_event(wire.RawEvent("shop.all", op, version, 0, payload)))
    return wire.encode_window(scn, scn - 1, 1_700_000_000_123 + scn, raw)


typed_event = st.tuples(
    st.sampled_from("cudt"), st.sampled_from([1, 2, 2]), typed_image, typed_image
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(typed_event, min_size=1, max_size=8), min_size=1, max_size=3), st.booleans()
)
def test_typed_arrow_path_equals_typed_rows(windows: list[list[Any]], snapshot: bool) -> None:
    records = [_typed_window(50 + i, events) for i, events in enumerate(windows)]
    lookup = lambda s, v: TYPED_CODECS[(s, v)]  # noqa: E731
    op = "r" if snapshot else None
    fast, slow = FastTypedRows(TYPED, op), TypedRows(TYPED, op)
    for rows in (fast, slow):
        for record in records:
            rows.add_window(record, lookup)
    got, want = fast.batch(), slow.batch()
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()
    assert fast.row_path_batches == 0


def test_infinite_dates_and_timestamps_are_null_in_typed_rows() -> None:
    row = [1, None, None, None, DATE_INFINITY, MICROS_MINUS_INFINITY, MICROS_INFINITY]
    payload = TYPED_CODECS[("shop.all", 2)].encode(None, row + [None] * 7)
    event = wire.encode_event(wire.RawEvent("shop.all", "c", 2, 0, payload))
    record = wire.encode_window(9, 8, 1_700_000_000_000, [event])
    lookup = lambda s, v: TYPED_CODECS[(s, v)]  # noqa: E731
    for rows in (FastTypedRows(TYPED), TypedRows(TYPED)):
        rows.add_window(record, lookup)
        (got,) = rows.batch().to_pylist()
        assert (got["c0"], got["c4"], got["c5"], got["c6"]) == (1, None, None, None)


def test_a_column_of_another_kind_takes_the_typed_row_path() -> None:
    row = [7, 2000, 1, 5, 3, 0, 0, 1.5, 2.5, Decimal("1.50")]
    payload = TYPED_CODECS[("shop.all", 3)].encode(None, row)
    event = wire.encode_event(wire.RawEvent("shop.all", "c", 3, 0, payload))
    record = wire.encode_window(9, 8, 1_700_000_000_000, [event])
    lookup = lambda s, v: TYPED_CODECS[(s, v)]  # noqa: E731
    fast, slow = FastTypedRows(TYPED), TypedRows(TYPED)
    fast.add_window(record, lookup)
    slow.add_window(record, lookup)
    assert fast.batch().to_pylist() == slow.batch().to_pylist()
    assert fast.row_path_batches == 1


# -- Debezium rows --------------------------------------------------------------------------
SOURCES = {  # as the kinds' source_info describes such servers
    "mysql": mysql_capture.described_source(7, "mariadb-bin"),
    "postgresql": postgres_capture.described_source("shop"),
}
dbz_options = st.fixed_dictionaries(
    {
        "schemas.enable": st.sampled_from(["true", "false"]),
        "provide.transaction.metadata": st.sampled_from(["true", "false"]),
        "decimal.handling.mode": st.sampled_from(["precise", "string", "double"]),
        "time.precision.mode": st.sampled_from(["adaptive", "connect"]),
        "binary.handling.mode": st.sampled_from(["bytes", "hex"]),
    }
)


def _dbz_lookup(source: str, version: int) -> RowCodec:
    return TYPED_CODECS.get((source, version)) or CODECS[(source, version)]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(typed_event.map(lambda e: ("typed", e)), event.map(lambda e: ("orders", e))),
            min_size=1,
            max_size=8,
        ),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from(["mysql", "postgresql"]),
    dbz_options,
    st.sampled_from([None, "r"]),
)
def test_debezium_arrow_path_equals_debezium_rows(
    windows: list[list[Any]], connector: str, options: dict[str, str], op: str | None
) -> None:
    records = []
    for i, events in enumerate(windows):
        raw: list[bytes] = []
        for kind, e in events:
            one = _typed_window(1, [e]) if kind == "typed" else _window(1, [e])
            start, end, *_ = next(wire.iter_event_spans(one))  # its one event record
            raw.append(one[start:end])
        records.append(wire.encode_window(200 + i, 199 + i, 1_700_000_000_500 + i, raw))
    settings_ = DebeziumOptions.parse(options)
    fast = FastDebeziumRows(DebeziumWindows(SOURCES[connector], settings_), op)
    slow = DebeziumRows(DebeziumWindows(SOURCES[connector], settings_), op)
    for rows in (fast, slow):
        for record in records:
            rows.add_window(record, _dbz_lookup)
    got, want = fast.batch(), slow.batch()
    assert got.schema == want.schema
    for g, w in zip(got.to_pylist(), want.to_pylist(), strict=True):
        assert g == w
    # a skipped truncate (Debezium's default) among other events of its window changes the
    # transaction orders: the row path's batch
    ops = [[e[0] if kind == "typed" else e[1] for kind, e in ev] for ev in windows]
    shared = any(len(window) > 1 and "t" in window for window in ops)
    assert fast.row_path_batches == 0 or ("t" in settings_.skipped and shared)
