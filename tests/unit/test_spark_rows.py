"""The Spark source's Arrow path for the generic columns gives exactly ``GenericRows``'s
batches: every column, in event order, across tables, windows, truncates and pieces."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import wire
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.spark.arrowrows import FastGenericRows
from sluice.spark.rows import GenericRows, chunks

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


def test_a_table_the_arrow_path_cannot_read_takes_the_row_path() -> None:
    record = _window(7, [(TAGS, "c", None, [["a"]]), (LOG, "c", None, ["x"])])
    fast, slow = FastGenericRows(), GenericRows(False)
    fast.add_window(record, codec_for)
    slow.add_window(record, codec_for)
    assert fast.batch().to_pylist() == slow.batch().to_pylist()


def test_tuples_for_python_rows() -> None:
    record = _window(7, [(LOG, "c", None, ["x"]), (LOG, "c", None, ["y"])])
    rows = list(chunks(FastGenericRows(), [record], codec_for, arrow=False))
    assert [r[6] for r in rows] == ['{"msg": "x"}', '{"msg": "y"}']
