"""Edge values. Decimals wider than Python's default 28-digit context: a DECIMAL(65,30) value (and a
PostgreSQL numeric of any size) keeps every digit through the payload, Sluice's canonical
value and Debezium's precise conversion (scaleb and quantize once rounded them, or raised)."""

from __future__ import annotations

import base64
from decimal import Decimal

from sluice.schemas.avro import RowCodec, TableSchema
from sluice.schemas.columns import Column
from sluice.schemas.debezium_values import DebeziumOptions, column_fields
from sluice.schemas.decoder import canonical_envelope

WIDE = "12345678901234567890123456789012345.123456789012345678901234567891"


def _schema() -> TableSchema:
    key = Column(name="id", kind="int", nullable=False, source_type="int")
    wide = Column(name="d", kind="decimal", nullable=True, source_type="decimal(65,30)",
                  precision=65, scale=30)  # fmt: skip
    return TableSchema("db.t", 1, (key, wide), ("id",))


def test_a_65_digit_decimal_keeps_every_digit() -> None:
    schema = _schema()
    payload = RowCodec(schema).encode(None, [1, Decimal(WIDE)])
    _, after = canonical_envelope(schema.columns)(payload)
    assert after is not None
    assert after[1] == Decimal(WIDE) and format(after[1], "f") == WIDE + "0" * (30 - 30)


def test_debeziums_precise_decimal_of_65_digits() -> None:
    schema = _schema()
    field = column_fields("mysql", schema.columns, DebeziumOptions())[1]
    text = field.convert(Decimal(WIDE))
    unscaled = int.from_bytes(base64.b64decode(text), "big", signed=True)
    assert unscaled == int(WIDE.replace(".", "") + "0" * (30 - len(WIDE.split(".")[1])))


def test_a_zoned_timestamp_of_2_to_the_31_microseconds_is_a_time_not_infinity() -> None:
    """A date's infinities are ±2**31 days; the same numbers as microseconds are
    1970-01-01T00:35:47.483647 and its mirror, which Debezium writes as times."""
    from sluice.schemas.debezium_values import _zoned_timestamp

    convert = _zoned_timestamp(6)
    assert convert(2**31 - 1) == "1970-01-01T00:35:47.483647Z"
    assert convert(-(2**31)) == "1969-12-31T23:24:12.516352Z"
    assert convert(2**63 - 1) == "infinity" and convert(-(2**63)) == "-infinity"
