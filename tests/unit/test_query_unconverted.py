"""A MySQL row packet the query source's parser refuses: why, and its position values."""

from __future__ import annotations

import pytest

from sluice.capture.mysql.seed import row_parser
from sluice.capture.query.dialect import Unconverted
from sluice.capture.query.mysql import _unconverted
from sluice.capture.query.mysql_pages import fields as _fields
from sluice.schemas import Column, TableSchema

SCHEMA = TableSchema(
    "shop.t",
    1,
    (Column("id", "int", False, "int"), Column("n", "int", True, "int")),
    ("id",),
)


def _text(value: bytes | None) -> bytes:
    """One text-protocol field: NULL, or its length then its bytes."""
    if value is None:
        return b"\xfb"
    if len(value) < 251:
        return bytes([len(value)]) + value
    return b"\xfc" + len(value).to_bytes(2, "little") + value


def test_fields_reads_nulls_short_and_long_values() -> None:
    long = b"x" * 300
    packet = _text(b"7") + _text(None) + _text(long) + _text(b"")
    assert _fields(packet) == [b"7", None, long, b""]


def test_a_row_the_parser_refuses_names_its_column_and_keeps_its_position() -> None:
    packet = _text(b"7") + _text(b"seven") + _text(b"2024-01-01 00:00:00") + _text(b"7")
    parse = row_parser((*SCHEMA.columns, Column("_x0", "string", True, "text")))
    with pytest.raises(ValueError):
        parse(packet)
    row, extra = _unconverted(SCHEMA, packet, 2)
    assert isinstance(row, Unconverted) and row.error.source == "shop.t"
    assert "column 'n' (int) of shop.t: 'seven'" in str(row.error)
    assert extra == ["2024-01-01 00:00:00", "7"]
