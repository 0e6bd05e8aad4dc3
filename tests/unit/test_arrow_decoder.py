"""The Arrow decoder gives exactly the canonical images of the row decoder, per kind."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.arrow_decoder import ArrowDecoder, Undecodable, arrow_decodable
from sluice.schemas.decoder import canonical_envelope

LONG = st.integers(-(1 << 63), (1 << 63) - 1)
DECIMAL = st.integers(-(10**18) + 1, 10**18 - 1).map(lambda v: Decimal(v).scaleb(-4))
# (kind, source type, canonical values, precision, scale)
KINDS: list[tuple[str, str, Any, int, int]] = [
    ("int", "bigint", LONG, 0, 0),
    ("year", "year", st.integers(0, 2155), 0, 0),
    ("bool", "boolean", st.integers(0, 1), 0, 0),
    ("time", "time(6)", LONG, 0, 0),
    ("date", "date", st.integers(-719_162, 2_932_896), 0, 0),
    ("datetime", "datetime(6)", LONG, 0, 0),
    ("timestamp", "timestamp(6)", LONG, 0, 0),
    ("double", "double", st.floats(allow_nan=False), 0, 0),
    ("float", "float", st.floats(width=32, allow_nan=False), 0, 0),
    ("decimal", "decimal(18,4)", DECIMAL, 18, 4),
    ("uint64", "bigint unsigned", st.integers(0, (1 << 63) - 1).map(Decimal), 0, 0),
    ("string", "varchar(40)", st.text(), 0, 0),
    ("json", "json", st.text(), 0, 0),
    ("bytes", "varbinary(8)", st.binary(), 0, 0),
]
FILLED = {"string": "", "json": "", "bytes": b"", "double": 0.0, "float": 0.0}


def _schema(nullable: bool) -> TableSchema:
    columns = tuple(
        Column(f"c{i}", kind, nullable and i > 0, source, precision, scale)
        for i, (kind, source, _, precision, scale) in enumerate(KINDS)
    )
    return TableSchema("db.t", 1, columns, ("c0",))


def _fill(i: int, value: Any, nullable: bool) -> Any:
    if value is not None or (nullable and i > 0):
        return value
    kind = KINDS[i][0]
    return FILLED.get(kind, Decimal(0) if kind in ("decimal", "uint64") else 0)


image = st.one_of(st.none(), st.tuples(*(st.one_of(st.none(), v) for _, _, v, _, _ in KINDS)))


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, Decimal):
        return isinstance(got, Decimal) and str(got) == str(want)
    return type(got) is type(want) and got == want


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(image, image), min_size=1, max_size=30), st.booleans())
def test_images_equal_the_row_decoder(events: list[tuple[Any, Any]], nullable: bool) -> None:
    schema = _schema(nullable)
    assert arrow_decodable(schema)
    codec = RowCodec(schema)
    images = [
        tuple(None if img is None else [_fill(i, v, nullable) for i, v in enumerate(img)]
              for img in pair)
        for pair in events
    ]  # fmt: skip
    payloads = [codec.encode(before, after) for before, after in images]
    # payloads inside one buffer at odd offsets, as a window record holds them
    starts, blob = [], b"xyz"
    for p in payloads:
        starts.append(len(blob))
        blob += p + b"\x07"
    got = ArrowDecoder(schema).images(np.frombuffer(blob, dtype=np.uint8), starts)
    row = canonical_envelope(schema.columns)
    for n, payload in enumerate(payloads):
        before, after = row(payload)
        assert bool(got.has_before[n]) is (before is not None)
        assert bool(got.has_after[n]) is (after is not None)
        for want, columns in ((before, got.before), (after, got.after)):
            values = [col[n].as_py() for col in columns]
            if want is None:
                assert values == [None] * len(values)
            else:
                assert all(_same(g, w) for g, w in zip(values, want, strict=True)), (values, want)


def test_a_decimal_wider_than_64_bits_is_refused() -> None:
    schema = TableSchema("db.t", 1, (Column("d", "decimal", False, "decimal(30,0)", 30, 0),), ())
    payload = RowCodec(schema).encode(None, [Decimal(10**20)])
    with pytest.raises(Undecodable):
        ArrowDecoder(schema).images(np.frombuffer(payload, dtype=np.uint8), [0])


def test_set_columns_take_the_row_path() -> None:
    schema = TableSchema("db.t", 1, (Column("s", "set", True, "set('a')"),), ())
    assert not arrow_decodable(schema)
