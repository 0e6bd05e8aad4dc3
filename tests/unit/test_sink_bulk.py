"""The bulk path of replica sinks (columnar windows decoded with Arrow) gives exactly what
``plan`` and the per-value converters give: the same deletes and upserted rows, in order,
whatever the mix of inserts, updates, key changes and deletes."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import wire
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.arrow_decoder import ArrowDecoder
from sluice.sink.columnar import Columnar, TablePart
from sluice.sink.sql.bulk import HeldColumns, bulk_steps, net_effect
from sluice.sink.sql.engines import MariaDB, Postgres, Sqlite
from sluice.sink.sql.plan import KeyedChanges, plan
from sluice.sink.target import Change

SCHEMA = TableSchema(
    "shop.t",
    3,
    (
        Column("id", "int", False, "int"),
        Column("region", "string", False, "varchar(4)"),
        Column("amount", "decimal", True, "decimal(10,2)", 10, 2),
        Column("at", "datetime", True, "datetime(6)"),
        Column("day", "date", True, "date"),
        Column("ok", "bool", True, "boolean"),
        Column("note", "string", True, "text"),
    ),
    ("id", "region"),
)
CODEC = RowCodec(SCHEMA)
KEY = st.tuples(st.integers(0, 4), st.sampled_from(["eu", "us"]))
VALUES = st.tuples(
    st.one_of(st.none(), st.integers(-(10**9), 10**9).map(lambda v: Decimal(v).scaleb(-2))),
    st.one_of(st.none(), st.integers(-(10**15), 10**15)),
    st.one_of(st.none(), st.integers(-1000, 20000)),
    st.one_of(st.none(), st.integers(0, 1)),
    st.one_of(st.none(), st.text(max_size=5)),
)
EVENT = st.tuples(st.one_of(st.none(), KEY), st.one_of(st.none(), KEY), VALUES).filter(
    lambda e: e[0] is not None or e[1] is not None
)


def _image(key: tuple[int, str] | None, values: tuple[Any, ...]) -> list[Any] | None:
    return None if key is None else [key[0], key[1], *values]


def _window(events: list[tuple[Any, Any, Any]]) -> tuple[bytes, list[Change]]:
    raw, changes = [], []
    for i, (bk, ak, values) in enumerate(events):
        note = values[-1]
        before = _image(bk, (*values[:-1], None if note is None else note + "-old"))
        after = _image(ak, values)
        op = "c" if before is None else "d" if after is None else "u"
        raw.append(
            wire.encode_event(wire.RawEvent(SCHEMA.source, op, 3, 0, CODEC.encode(before, after)))
        )  # type: ignore[arg-type]
        changes.append(
            Change(9, i, SCHEMA.source, op, 0, 3, SCHEMA, None, before, after, "t", str(i))  # type: ignore[arg-type]
        )
    return wire.encode_window(9, 8, 0, raw), changes


def _expected(engine: Any, changes: list[Change]) -> tuple[list[list[Any]], list[list[Any]]]:
    (step,) = plan(changes, {SCHEMA.source: "t"})
    assert isinstance(step, KeyedChanges)
    convert = [engine.converter(c) for c in SCHEMA.columns]
    rows = [[None if v is None else c(v) for c, v in zip(convert, row, strict=True)]
            for _, images in step.upserts() for row in images]  # fmt: skip
    deletes = [[None if v is None else convert[i](v) for i, v in enumerate(key)]
               for key in step.deletes()]  # fmt: skip
    return deletes, rows


@settings(max_examples=200, deadline=None)
@given(st.lists(EVENT, min_size=1, max_size=25), st.integers(1, 3))
def test_bulk_steps_equal_plan(events: list[tuple[Any, Any, Any]], windows: int) -> None:
    """The events split over ``windows`` records held together, on every engine."""
    held = HeldColumns()
    all_changes: list[Change] = []
    cut = max(1, len(events) // windows)
    for n in range(0, len(events), cut):
        record, changes = _window(events[n : n + cut])
        all_changes += changes
        spans = wire.event_spans(record)
        count = len(spans.starts[0])
        starts = np.asarray(spans.starts[0], dtype=np.int64)
        part = TablePart(SCHEMA.source, SCHEMA, SCHEMA, tuple(range(7)), "t", starts)
        assert held.fits(Columnar(record, (part,), count, lambda: ()))
        held.add(Columnar(record, (part,), count, lambda: ()), {SCHEMA.source: "t"})
    for engine in (Postgres(), MariaDB(), Sqlite()):
        (step,) = bulk_steps(held, engine, {})
        deletes, rows = _expected(engine, all_changes)
        assert [list(d) for d in step.deletes] == deletes
        assert [list(r) for r in step.upserts] == rows


def test_a_key_change_deletes_the_old_key_and_a_reinsert_keeps_the_row() -> None:
    events = [
        (None, (1, "eu"), (None, None, None, None, "a")),  # insert 1
        ((1, "eu"), (2, "eu"), (None, None, None, None, "b")),  # 1 -> 2
        ((2, "eu"), None, (None, None, None, None, "c")),  # delete 2
        (None, (2, "eu"), (None, None, None, None, "d")),  # insert 2 again
    ]
    record, _ = _window(events)
    spans = wire.event_spans(record)
    images = ArrowDecoder(SCHEMA).images(np.frombuffer(record, dtype=np.uint8), spans.starts[0])
    upserts, deletes = net_effect(images, [0, 1])
    assert upserts.tolist() == [3] and deletes.tolist() == [1]  # key 1 gone (event 1's before)


def test_a_truncate_keeps_a_window_per_event() -> None:
    raw = [wire.encode_event(wire.RawEvent(SCHEMA.source, "t", 0, 0, b""))]  # type: ignore[arg-type]
    assert wire.event_spans(wire.encode_window(9, 8, 0, raw)).has_truncate
