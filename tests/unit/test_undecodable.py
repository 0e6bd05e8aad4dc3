"""A rows event the generated transcoder cannot read: a DecodeError naming the table, the row
and the column (found by decoding column by column), never a bare IndexError."""

from __future__ import annotations

import pytest

from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.binlog.tablemap import BinlogColumn, TableMap
from sluice.capture.mysql.tables import TableDecoder
from sluice.errors import DecodeError
from sluice.schemas import SchemaRegistry

COLUMNS = (
    BinlogColumn("id", t.T_LONG, False),
    BinlogColumn("qty", t.T_LONG, False),
    BinlogColumn("note", t.T_VARCHAR, True, collation=45, length=40),
)


def _decoder() -> TableDecoder:
    table_map = TableMap(7, "shop", "t.1", COLUMNS, (0,), b"sig")
    return TableDecoder(table_map, SchemaRegistry(), {45: "utf-8"}, {})


def _row(ident: int, qty: int, note: bytes) -> bytes:
    return (
        b"\x00"
        + ident.to_bytes(4, "little")
        + qty.to_bytes(4, "little")
        + bytes([len(note)])
        + note
    )


HEAD = (7).to_bytes(6, "little") + b"\x00\x00" + b"\x03" + b"\x07"  # id, flags, 3 columns


def test_whole_rows_decode() -> None:
    events = _decoder().events(t.WRITE_ROWS_V1, HEAD + _row(1, 2, b"ab") + _row(2, 3, b"c"))
    assert len(events) == 2


def test_a_cut_row_names_table_row_and_column() -> None:
    body = HEAD + _row(1, 2, b"ab") + _row(2, 3, b"c")[:7]  # row 1 ends inside `qty`
    with pytest.raises(DecodeError, match=r"column 'qty' \(int\) of row 1 of shop.`t.1`") as err:
        _decoder().events(t.WRITE_ROWS_V1, body)
    assert err.value.source == "shop.`t.1`"


def test_generated_code_shows_in_tracebacks_with_file_and_line() -> None:
    import traceback

    from sluice.schemas.codegen import run_generated

    env: dict[str, object] = {}
    run_generated(["def f(data):", "    x = 1", "    return data[5]"], env, "test decoder")
    with pytest.raises(IndexError) as err:
        env["f"](b"ab")  # type: ignore[operator]
    text = "".join(traceback.format_exception(err.value))
    assert "<sluice generated test decoder #" in text and "line 3" in text
    assert "return data[5]" in text
