"""The seed's Arrow path gives exactly the bytes and keys of the row encoder, per kind."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.arrow_encoder import ArrowEncoder, Unencodable, arrow_encodable

LONG = st.integers(-(1 << 63), (1 << 63) - 1)
# (kind, source type, Arrow type, canonical values, precision, scale)
KINDS: list[tuple[str, str, pa.DataType, Any, int, int]] = [
    ("int", "bigint", pa.int64(), LONG, 0, 0),
    ("date", "date", pa.int32(), st.integers(-719_162, 2_932_896), 0, 0),
    ("datetime", "datetime(6)", pa.int64(), LONG, 0, 0),
    ("timestamp", "timestamp(6)", pa.int64(), LONG, 0, 0),
    ("double", "double", pa.float64(), st.floats(allow_nan=True), 0, 0),
    ("decimal", "decimal(18,4)", pa.int64(), st.integers(-(10**18) + 1, 10**18 - 1), 18, 4),
    ("string", "varchar(40)", pa.string(), st.text(), 0, 0),
    ("json", "json", pa.string(), st.text(), 0, 0),
    ("bytes", "varbinary(8)", pa.binary(), st.binary(), 0, 0),
    ("bool", "boolean", pa.bool_(), st.booleans(), 0, 0),
]


def _schema(nullable: bool, key: tuple[str, ...] = ("c0",)) -> TableSchema:
    columns = tuple(
        Column(f"c{i}", kind, nullable and i > 0, source, precision, scale)
        for i, (kind, source, _, _, precision, scale) in enumerate(KINDS)
    )
    return TableSchema("db.t", 1, columns, key)


def _filled(kind: tuple[Any, ...], value: Any) -> Any:
    """A value for a NOT NULL column where the example drew None."""
    if value is not None:
        return value
    return {pa.string(): "", pa.binary(): b"", pa.float64(): 0.0, pa.bool_(): False}.get(kind[2], 0)


def _canonical(kind: str, value: Any, scale: int) -> Any:
    if value is None or kind != "decimal":
        return value
    return Decimal(value).scaleb(-scale)


rows = st.lists(
    st.tuples(*(st.one_of(st.none(), values) for _, _, _, values, _, _ in KINDS)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(rows=rows)
def test_payloads_and_keys_equal_the_row_encoder(rows: list[tuple[Any, ...]]) -> None:
    rows = [(i, *row[1:]) for i, row in enumerate(rows)]  # a key per row
    for nullable in (True, False):
        schema = _schema(nullable)
        if not nullable:
            rows = [tuple(_filled(k, v) for k, v in zip(KINDS, row, strict=True)) for row in rows]
        columns = [
            pa.array([row[i] for row in rows], arrow)
            for i, (_, _, arrow, _, _, _) in enumerate(KINDS)
        ]
        codec = RowCodec(schema)
        canonical = [
            [
                _canonical(kind, v, scale)
                for (kind, _, _, _, _, scale), v in zip(KINDS, row, strict=True)
            ]
            for row in rows
        ]
        encoder = ArrowEncoder(schema)
        assert encoder.payloads(columns).to_pylist() == [codec.encode(None, r) for r in canonical]
        assert encoder.keys(columns).to_pylist() == [codec.key_text(r) for r in canonical]


@pytest.mark.parametrize("key", [("c6",), ("c1", "c6"), ("c0", "c7"), ("c2", "c3"), ("c0", "c9")])
def test_keys_of_every_key_kind(key: tuple[str, ...]) -> None:
    schema = _schema(False, key)
    row = [7, 19_000, -5, 1_700_000_000_000_123, 2.5, 12345, 'a "quoted" é', "{}", b"\x00\xff"]
    row.append(True)
    columns = [pa.array([v], a) for v, (_, _, a, _, _, _) in zip(row, KINDS, strict=True)]
    canonical = [_canonical(k, v, s) for v, (k, _, _, _, _, s) in zip(row, KINDS, strict=True)]
    assert ArrowEncoder(schema).keys(columns).to_pylist() == [RowCodec(schema).key_text(canonical)]


def test_a_null_where_the_schema_has_none_is_refused() -> None:
    schema = TableSchema("db.t", 1, (Column("id", "int", False, "int"),), ("id",))
    with pytest.raises(Unencodable, match=r"db\.t\.id"):
        ArrowEncoder(schema).payloads([pa.array([1, None], pa.int64())])


def test_what_takes_the_row_path() -> None:
    def table(*columns: Column, key: tuple[str, ...] = ("id",)) -> TableSchema:
        return TableSchema("db.t", 1, (Column("id", "int", False, "int"), *columns), key)

    assert arrow_encodable(table(Column("n", "decimal", True, "decimal(18,2)", 18, 2)))
    assert not arrow_encodable(table(Column("n", "decimal", True, "decimal(19,2)", 19, 2)))
    assert not arrow_encodable(table(Column("f", "float", True, "float")))
    assert not arrow_encodable(table(Column("s", "set", True, "set('a')")))
    assert not arrow_encodable(table(Column("t", "time", True, "time")))
    assert not arrow_encodable(table(key=()))
    decimal_key = table(Column("n", "decimal", False, "decimal(10,2)", 10, 2), key=("n",))
    assert not arrow_encodable(decimal_key)
