"""Avro -> JSON text generated per schema gives the text of ``Event.to_json_dict()``."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sluice.core import wire
from sluice.schemas import RowCodec, TableSchema
from sluice.schemas.columns import Column
from sluice.schemas.events import decode_window, window_json
from tests.unit.test_schemas import SCHEMA, row_values

_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _lines_both_ways(schema: TableSchema, rows: list[tuple[Any, Any]]) -> tuple[list[str], ...]:
    codec = RowCodec(schema)
    events = []
    for n, (before, after) in enumerate(rows):
        op = "c" if before is None else "d" if after is None else "u"
        payload = codec.encode(before, after)
        events.append(wire.encode_event(wire.RawEvent(schema.source, op, 1, n, payload)))
    record = wire.encode_window(2**40 + 7, 5, 1_700_000_000_123, events)
    expected = [
        _ENCODER.encode(e.to_json_dict()) for e in decode_window(record, _lookup(codec)).events
    ]
    return list(window_json(record, _lookup(codec)).lines), expected


def _lookup(codec: RowCodec) -> Any:
    return lambda source, version: codec


@given(
    rows=st.lists(
        st.tuples(st.none() | row_values, st.none() | row_values).filter(
            lambda r: r != (None, None)
        ),
        min_size=1,
        max_size=5,
    )
)
def test_json_text_matches_the_event_path(rows: list[tuple[Any, Any]]) -> None:
    ours, expected = _lines_both_ways(SCHEMA, rows)
    assert ours == expected


@given(
    text=st.text(),
    day=st.integers(-719_162, 2_932_896),  # 0001-01-01 .. 9999-12-31
    micros=st.integers(-(62_135_596_800 * 10**6), 253_402_300_799 * 10**6),
    small=st.integers(-200, 200),
    fraction=st.decimals(min_value=-1, max_value=1, places=30, allow_nan=False),
)
def test_edge_values_and_odd_names(
    text: str, day: int, micros: int, small: int, fraction: Any
) -> None:
    columns = (
        Column('k "%s"', "string", False, "varchar"),
        Column("n", "int", False, "int"),
        Column("d", "date", False, "date"),
        Column("m", "datetime", False, "datetime(6)"),
        Column("f", "decimal", False, "decimal(31,30)", 31, 30),
        Column("e", "enum", True, "enum"),
        Column("b", "bit", False, "bit(3)"),
    )
    schema = TableSchema('odd."t"', 1, columns, ("n", 'k "%s"'))
    row = (text, small, day, micros, fraction, None, 5)
    ours, expected = _lines_both_ways(schema, [(None, row), (row, row), (row, None)])
    assert ours == expected
    assert json.loads(ours[0])["after"]['k "%s"'] == text
