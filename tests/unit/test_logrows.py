"""The bootstrap log's fast reader gives exactly the generic reader's rows (raw, no images)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import wire
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.spark.logrows import LogRows
from sluice.spark.rows import GenericRows

SCHEMAS = {
    ("db.a", 1): TableSchema("db.a", 1, (Column("id", "int", False, "int"),), ("id",)),
    ("db.a", 2): TableSchema(
        "db.a", 2, (Column("id", "int", False, "int"), Column("v", "string", True, "text")), ("id",)
    ),
    ("db.b", 1): TableSchema(
        "db.b",
        1,
        (Column("k", "string", False, "varchar"), Column("n", "int", True, "int")),
        ("n", "k"),
    ),
}
CODECS = {k: RowCodec(v) for k, v in SCHEMAS.items()}

event = st.one_of(
    st.tuples(st.just(("db.a", 1)), st.sampled_from("cud"), st.integers(-(1 << 40), 1 << 40)),
    st.tuples(st.just(("db.a", 2)), st.sampled_from("cu"), st.integers(-(1 << 62), 1 << 62)),
    st.tuples(st.just(("db.b", 1)), st.sampled_from("cd"), st.integers(-300, 3_000_000)),
    st.tuples(st.just(("db.b", 1)), st.just("t"), st.just(0)),
)


def _raw(spec: tuple[tuple[str, int], str, int]) -> bytes:
    (source, version), op, n = spec
    if op == "t":
        return wire.encode_event(wire.RawEvent(source, "t", version, 0, b""))
    row = {"db.a": [n] if version == 1 else [n, f"v{n}"], "db.b": [f"k{n}", n]}[source]
    payload = CODECS[(source, version)].encode(
        row if op == "d" else None, None if op == "d" else row
    )
    return wire.encode_event(wire.RawEvent(source, op, version, n & 0xFFFF, payload))  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(event, min_size=1, max_size=12), min_size=1, max_size=6))
def test_fast_rows_equal_generic_rows(
    windows: list[list[tuple[tuple[str, int], str, int]]],
) -> None:
    records = [
        wire.encode_window(100 + i, 99 + i, 1_700_000_000_000 + i, [_raw(e) for e in events])
        for i, events in enumerate(windows)
    ]
    for op in (None, "r"):
        fast, generic = LogRows(op), GenericRows(True, op, images=False)
        for record in records:
            fast.add_window(record, lambda s, v: CODECS[(s, v)])
            generic.add_window(record, lambda s, v: CODECS[(s, v)])
        assert fast.batch().to_pylist() == generic.batch().to_pylist()
