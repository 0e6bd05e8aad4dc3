"""The decoders generated per schema: values equal fastavro's (mapped to JSON values), text
equals the JSON encoder's output for ``Event.to_json_dict()``."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
from hypothesis import assume, given
from hypothesis import strategies as st

from sluice.core import wire
from sluice.schemas import RowCodec, TableSchema
from sluice.schemas.columns import Column, json_converter
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


def _fastavro_values(codec: RowCodec, payload: bytes) -> tuple[Any, Any, Any]:
    """The reference: fastavro's reader, then each column's JSON mapping."""
    record = fastavro.schemaless_reader(
        io.BytesIO(payload), fastavro.parse_schema(codec.envelope_schema()), None
    )
    assert isinstance(record, dict)
    fields = codec.schema.to_avro()["fields"]

    def mapped(row: dict[str, Any] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {
            col.name: None if row[f["name"]] is None else json_converter(col.kind)(row[f["name"]])
            for f, col in zip(fields, codec.schema.columns, strict=True)
        }

    before, after = mapped(record["before"]), mapped(record["after"])
    image = after if after is not None else before
    key = None if image is None else {n: image[n] for n in codec.schema.primary_key}
    return key, before, after


@given(before=st.none() | row_values, after=st.none() | row_values)
def test_values_match_fastavro(before: Any, after: Any) -> None:
    codec = RowCodec(SCHEMA)
    payload = codec.encode(before, after)
    assert codec.decode_event(payload) == _fastavro_values(codec, payload)


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
    codec = RowCodec(schema)
    payload = codec.encode(row, None)
    key, _, _ = _fastavro_values(codec, payload)
    assert codec.decode_event(payload) == _fastavro_values(codec, payload)
    # The canonical key text (Spark's key column) is what the relay hashes.
    canonical = json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert codec.decode_text(payload, canonical_key=True)[0] == canonical
    assert canonical == codec.key_text(row)
    for image in ((None, row), (row, row), (row, None)):
        assert codec.payload_key(codec.encode(*image)) == canonical
    assert json.loads(ours[0])["after"]['k "%s"'] == text


@given(before=st.none() | row_values, after=st.none() | row_values)
def test_snapshot_payload_keeps_only_the_current_image(before: Any, after: Any) -> None:
    assume(before is not None or after is not None)
    codec = RowCodec(SCHEMA)
    current = after if after is not None else before
    assert codec.snapshot_payload(codec.encode(before, after)) == codec.encode(None, current)


@given(before=st.none() | row_values, after=st.none() | row_values)
def test_payload_key_reads_only_the_key_yet_matches_the_full_decode(
    before: Any, after: Any
) -> None:
    assume(before is not None or after is not None)
    codec = RowCodec(SCHEMA)
    payload = codec.encode(before, after)
    assert codec.payload_key(payload) == codec.decode_text(payload, canonical_key=True)[0]


def test_a_zero_date_in_a_key_is_null_in_every_key_path() -> None:
    """A zero DATE/DATETIME (canonical None) in a primary key: capture's key text, the
    bootstrap log's key-only decoder and the full decoder agree, and keys stay distinct."""
    columns = (
        Column("id", "int", False, "int"),
        Column("d", "datetime", False, "datetime"),
        Column("v", "date", False, "date"),
    )
    codec = RowCodec(TableSchema("db.t", 1, columns, ("id", "d", "v")))
    texts = set()
    for row in ([1, None, None], [1, 1_700_000_000_000_000, None], [1, None, 19_000]):
        payload = codec.encode(None, row)
        key = codec.key_text(row)
        assert key == codec.payload_key(payload) == codec.decode_text(payload, True)[0]
        assert json.loads(key or "")["id"] == 1
        texts.add(key)
    assert '{"d":null,"id":1,"v":null}' in texts and len(texts) == 3
