"""Every column kind of the registry, one at a time: a canonical value (what capture or a seed
hands the encoder) survives encode -> decode on every path (the generated value decoder, the
JSON text decoder, fastavro plus the kind's ``from_avro``) as the JSON value its
``from_canonical`` gives, and as a key it is canonical JSON text. A kind without a strategy
here fails the first test: a new kind comes with its round trip."""

from __future__ import annotations

import json
import math
import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import wire
from sluice.schemas import KINDS, RowCodec, TableSchema
from sluice.schemas.columns import Column, canonical_converter
from sluice.schemas.events import decode_window, window_json
from tests.unit.test_decoder import _fastavro_values

_F32 = struct.Struct("<f")


def _float32(value: float) -> float:
    return float(_F32.unpack(_F32.pack(value))[0])


_MICROS = st.integers(-(62_135_596_800 * 10**6), 253_402_300_799 * 10**6)  # years 1..9999
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
).map(lambda doc: json.dumps(doc, ensure_ascii=False))

STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "int": st.integers(-(2**63), 2**63 - 1),
    "year": st.integers(1901, 2155),
    "bit": st.integers(0, 2**63 - 1),
    "bool": st.booleans(),
    "time": st.integers(-(839 * 3600 * 10**6), 839 * 3600 * 10**6),
    "date": st.integers(-719_162, 2_932_896),
    "datetime": _MICROS,
    "timestamp": _MICROS,
    "float": st.floats(width=32, allow_nan=False).map(_float32),
    "double": st.floats(allow_nan=False),
    "decimal": st.decimals(
        min_value=Decimal("-99999999999999.9999"),
        max_value=Decimal("99999999999999.9999"),
        places=4,
        allow_nan=False,
        allow_infinity=False,
    ),
    "uint64": st.integers(0, 2**64 - 1).map(Decimal),
    "bytes": st.binary(max_size=40),
    "geometry": st.binary(max_size=40),
    "string": st.text(max_size=30),
    "enum": st.text(min_size=1, max_size=10),
    "uuid": st.uuids().map(str),
    "inet6": st.ip_addresses(v=6).map(str),
    "json": _JSON,
    "set": st.lists(st.text(min_size=1, max_size=6).filter(lambda t: "," not in t), unique=True),
}


def test_every_kind_has_a_round_trip() -> None:
    assert set(STRATEGIES) == set(KINDS)


def _schema(kind: str, nullable: bool) -> TableSchema:
    column = Column("v", kind, nullable, kind, precision=18, scale=4)
    return TableSchema("db.t", 1, (Column("id", "int", False, "int"), column), ("id",))


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


@pytest.mark.parametrize("kind", sorted(STRATEGIES))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_value_of_each_kind_round_trips_on_every_path(kind: str, data: st.DataObject) -> None:
    nullable = data.draw(st.booleans())
    value = data.draw(st.none() | STRATEGIES[kind] if nullable else STRATEGIES[kind])
    codec = RowCodec(_schema(kind, nullable))
    expected = None if value is None else canonical_converter(kind)(value)
    payload = codec.encode(None, [7, value])
    key, before, after = codec.decode_event(payload)
    assert key == {"id": 7}
    assert before is None and after is not None and _same(after["v"], expected)
    assert codec.decode_event(payload) == _fastavro_values(codec, payload)
    event = wire.encode_event(wire.RawEvent("db.t", "c", 1, 0, payload))
    record = wire.encode_window(5, 0, 1, [event])
    lookup = lambda source, version: codec  # noqa: E731
    (line,) = list(window_json(record, lookup).lines)
    (decoded,) = decode_window(record, lookup).events
    assert json.loads(line)["after"] == json.loads(json.dumps(decoded.after))


@pytest.mark.parametrize("kind", sorted(STRATEGIES))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_key_of_each_kind_is_its_canonical_json_text(kind: str, data: st.DataObject) -> None:
    value = data.draw(STRATEGIES[kind])
    schema = TableSchema("db.t", 1, (Column("k", kind, False, kind, 18, 4),), ("k",))
    codec = RowCodec(schema)
    text = codec.key_text([value])
    assert text is not None
    expected = canonical_converter(kind)(value)
    assert _same(json.loads(text)["k"], expected)
    key, _before, _after = codec.decode_event(codec.encode(None, [value]))
    assert _same(key["k"], expected)
