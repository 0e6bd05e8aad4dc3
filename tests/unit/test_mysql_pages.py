"""A MySQL page read at once (``capture/query/mysql_pages.py``) gives exactly what the row
parser gives: the same fields out of the text protocol's packets, and, column by column,
the same canonical values (the generated row parser of seeding is the reference); a value a
column cast cannot take raises, and the row path decides. ``result_packets`` reads a result's
packets as PyMySQL would, errors included (a stand-in socket: the wire is bytes)."""

from __future__ import annotations

import io
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pymysql
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.capture.mysql.seed import row_parser
from sluice.capture.query.columns import ARROW_TYPES, canonical
from sluice.capture.query.dialect import Unconverted
from sluice.capture.query.mysql import _raw_row, _row_path, _unconverted
from sluice.capture.query.mysql_pages import column_reader, fields, result_packets, split
from sluice.capture.query.pages import _REFUSED
from sluice.errors import DecodeError
from sluice.schemas import Column, TableSchema

_LONG = st.integers(-(1 << 63), (1 << 63) - 1)
_DATE = st.dates().map(lambda d: d.isoformat())
_FRACTION = st.sampled_from([0, 1, 3, 6])


@st.composite
def _stamp(draw: Any) -> str:
    when = draw(st.datetimes()).replace(microsecond=0).isoformat(sep=" ")
    digits = draw(_FRACTION)
    return when + ("." + str(draw(st.integers(0, 10**digits - 1))).zfill(digits) if digits else "")


def _double(value: float) -> st.SearchStrategy[str]:
    return st.sampled_from([repr(value), f"{value:.17g}", f"{value:g}"])


_DOUBLE = st.floats(allow_nan=False, allow_infinity=False).flatmap(_double)
_BAD_TEXT = [b"\xff\xfe", b"a\xc3", b"\xed\xa0\x80"]
# (column, well-formed texts as the server sends them, odd texts a server may send)
KINDS: list[tuple[Column, Any, list[Any]]] = [
    (Column("i", "int", True, "bigint"), _LONG.map(str), ["007", "x", ""]),
    (Column("y", "year", True, "year"), st.integers(1901, 2155).map(str), ["0000"]),
    (Column("d", "date", True, "date"), _DATE, ["0000-00-00", "2024-02-30"]),
    (
        Column("dt", "datetime", True, "datetime(6)"),
        _stamp(),
        ["0000-00-00 00:00:00", "2024-00-01 00:00:00.5"],
    ),
    (Column("ts", "timestamp", True, "timestamp(3)"), _stamp(), ["0000-00-00 00:00:00"]),
    (Column("f", "double", True, "double"), _DOUBLE, ["1e999", "-0", "nan"]),
    (Column("g", "float", True, "float"), _DOUBLE, ["3.4028235e38"]),
    (
        Column("n", "decimal", True, "decimal(18,4)", 18, 4),
        st.decimals(-(10**14) + 1, 10**14 - 1, places=4).map(str),
        ["1.00005", "12345678901234567890123456789012345678901.0000", "1e3"],
    ),
    (
        Column("c", "decimal", True, "decimal(10,2)", 10, 2),
        st.decimals(-(10**8) + 1, 10**8 - 1, places=2).map(str),
        ["-0.00"],
    ),
    (Column("s", "string", True, "varchar(40)"), st.text(), _BAD_TEXT),
    (Column("e", "enum", True, "enum"), st.sampled_from(["a", "b", ""]), _BAD_TEXT),
    (Column("j", "json", True, "json"), st.text(max_size=300), _BAD_TEXT),
    (Column("u", "uuid", True, "uuid"), st.uuids().map(str), _BAD_TEXT),
    (Column("b", "bytes", True, "varbinary(8)"), st.binary(max_size=300), [b""]),
    (Column("t", "time", True, "time(6)"), st.just("-838:59:59.000000"), ["1:2"]),
    (Column("z", "set", True, "set"), st.sampled_from(["", "a", "a,b"]), ["a,,b"]),
    (Column("x", "bit", True, "bit(8)"), st.binary(min_size=1, max_size=1), [b""]),
    (Column("w", "uint64", True, "bigint unsigned"), st.just("18446744073709551615"), ["-1"]),
]
COLUMNS = tuple(c for c, _, _ in KINDS)
SCHEMA = TableSchema("shop.t", 1, COLUMNS, ("i",))


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _lenenc(value: bytes | None) -> bytes:
    if value is None:
        return b"\xfb"
    n = len(value)
    if n < 251:
        head = bytes([n])
    elif n < 1 << 16:
        head = b"\xfc" + n.to_bytes(2, "little")
    elif n < 1 << 24:
        head = b"\xfd" + n.to_bytes(3, "little")
    else:
        head = b"\xfe" + n.to_bytes(8, "little")
    return head + value


def packet(values: list[bytes | None]) -> bytes:
    return b"".join(map(_lenenc, values))


@st.composite
def pages(draw: Any) -> list[list[bytes | None]]:
    """Rows of every kind's texts: nulls, long values (2- and 3-byte lengths), odd texts."""
    rows = []
    for _ in range(draw(st.integers(1, 12))):
        row: list[bytes | None] = []
        for _column, good, odd in KINDS:
            pick = draw(st.integers(0, 19))
            value = None if pick == 0 else _bytes(draw(st.sampled_from(odd) if pick == 1 else good))
            if value is not None and pick == 2 and _column.kind in ("string", "bytes"):
                value *= draw(st.sampled_from([300, 70_000 // max(len(value), 1)]))
            row.append(value)
        rows.append(row)
    return rows


def _parsed(rows: list[list[bytes | None]]) -> list[list[Any] | None]:
    parse = row_parser(COLUMNS)
    out: list[list[Any] | None] = []
    for row in rows:
        try:
            out.append(parse(packet(row)))
        except (ValueError, ArithmeticError, IndexError):
            out.append(None)
    return out


@settings(max_examples=150, deadline=None)
@given(rows=pages())
def test_split_gives_each_packets_fields(rows: list[list[bytes | None]]) -> None:
    packets = [packet(r) for r in rows]
    arrays = split(packets, len(COLUMNS))
    assert arrays is not None
    assert [list(r) for r in zip(*(a.to_pylist() for a in arrays), strict=True)] == rows
    assert [fields(p) for p in packets] == rows


@settings(max_examples=200, deadline=None)
@given(rows=pages())
def test_each_column_reads_as_the_row_parser_gives_it(rows: list[list[bytes | None]]) -> None:
    """Where a column's reader gives values, they are the row parser's canonical values;
    it refuses only a column holding an odd text."""
    arrays = split([packet(r) for r in rows], len(COLUMNS))
    assert arrays is not None
    for i, (column, _good, odd) in enumerate(KINDS):
        if column.kind not in ARROW_TYPES and column.kind != "decimal":
            continue  # a kind the page path never takes (arrow_encodable refuses its table)
        parse = row_parser((column,))
        values = [row[i] for row in rows]
        try:
            got = column_reader(column)(arrays[i])
        except _REFUSED:
            assert any(v in map(_bytes, odd) for v in values), column.name
            continue
        want = canonical(column, [parse(packet([v]))[0] for v in values])
        assert got.type == want.type and _reprs(got) == _reprs(want), column.name


def _reprs(values: pa.Array) -> list[str]:
    return list(map(repr, values.to_pylist()))  # nan == nan, and -0.0 is not 0.0


@settings(max_examples=150, deadline=None)
@given(rows=pages())
def test_the_row_path_over_raw_rows_is_the_row_parser(rows: list[list[bytes | None]]) -> None:
    convert = _row_path(SCHEMA)
    for row, parsed in zip(rows, _parsed(rows), strict=True):
        got, extra = convert([*row, "7"])
        assert list(extra) == ["7"]
        if parsed is None:
            assert isinstance(got, Unconverted)
            want = _unconverted(SCHEMA, packet(row), len(COLUMNS))[0]
            assert isinstance(want, Unconverted) and str(got.error) == str(want.error)
        else:
            assert isinstance(got, list) and list(map(repr, got)) == list(map(repr, parsed))


def test_a_raw_row_keeps_bytes_and_decodes_the_extra_values() -> None:
    assert _raw_row(packet([b"1", None, b"2024-01-02"]), 1, "shop.t") == [
        b"1",
        None,
        "2024-01-02",
    ]
    with pytest.raises(DecodeError, match=r"value of shop\.t is not UTF-8 text .*: use a"):
        _raw_row(packet([b"1", b"\xff"]), 1, "shop.t")


def test_pages_split_cannot_lay_out_are_left_to_the_parser() -> None:
    assert split([], 2) is None
    assert split([packet([b"1", b"2"])], 3) is None  # fewer fields than asked
    assert split([packet([b"1", b"2", b"3"])], 2) is None  # more
    huge = b"x" * (1 << 24)  # a value of 16 MiB: an 8-byte length
    assert split([packet([b"1", huge])], 2) is None
    assert fields(packet([b"1", huge])) == [b"1", huge]
    assert split([b"\xff\x01"], 1) is None


def test_a_value_a_cast_reads_otherwise_raises() -> None:
    column = Column("n", "decimal", True, "decimal(10,2)", 10, 2)
    with pytest.raises(_REFUSED):
        column_reader(column)(pa.array([b"1.005"], pa.binary()))
    assert column_reader(column)(pa.array([b"-1.50", None], pa.binary())).to_pylist() == [
        -150,
        None,
    ]
    assert canonical(column, [Decimal("-1.50"), None]).to_pylist() == [-150, None]


# -- reading a result's packets ----------------------------------------------------------------
class _Result:
    unbuffered_active = True
    connection: object = "conn"


class _Conn:
    """What ``result_packets`` touches of a PyMySQL connection, over a bytes socket."""

    encoding = "utf8"
    _current_timeout = _read_timeout = None

    def __init__(self, wire: bytes, seq: int = 1) -> None:
        self._rfile = io.BufferedReader(io.BytesIO(wire))  # type: ignore[arg-type]
        self._next_seq_id = seq
        self._result = _Result()
        self.closed = False

    def _force_close(self) -> None:
        self.closed = True


def _wire(payloads: list[bytes], seq: int = 1) -> bytes:
    out = b""
    for payload in payloads:
        out += len(payload).to_bytes(3, "little") + bytes([seq & 0xFF]) + payload
        seq += 1
    return out


_EOF = b"\xfe\x00\x00\x22\x00"


def test_a_result_is_its_row_packets_up_to_its_eof() -> None:
    rows = [packet([b"1", None]), packet([b"2", b"x" * 300])]
    conn = _Conn(_wire([*rows, _EOF]) + b"after")
    assert result_packets(conn) == rows  # type: ignore[arg-type]
    assert conn._next_seq_id == 4 and conn._result.unbuffered_active is False
    assert conn._rfile.read() == b"after"  # nothing read past the result


def test_a_packet_of_16_mib_continues_in_the_next() -> None:
    big = packet([b"1", b"y" * ((1 << 24) - 10), b"z" * 100])
    first, rest = big[: (1 << 24) - 1], big[(1 << 24) - 1 :]
    assert len(first) == 0xFFFFFF and rest
    conn = _Conn(_wire([first, rest, _EOF]))
    assert result_packets(conn) == [big]  # type: ignore[arg-type]
    assert split([big], 3) is not None


def test_an_error_packet_raises_the_servers_error() -> None:
    error = b"\xff" + (1317).to_bytes(2, "little") + b"#70100Query execution was interrupted"
    conn = _Conn(_wire([packet([b"1"]), error]))
    with pytest.raises(pymysql.err.OperationalError, match="interrupted"):
        result_packets(conn)  # type: ignore[arg-type]
    assert conn._result.unbuffered_active is False


@pytest.mark.parametrize(
    ("wire", "error", "match"),
    [
        (_wire([packet([b"1"])])[:-1], pymysql.err.OperationalError, "Lost connection"),
        (_wire([packet([b"1"])])[:2], pymysql.err.OperationalError, "Lost connection"),
        (_wire([packet([b"1"])], seq=5), pymysql.err.InternalError, "got 5 expected 1"),
        (_wire([packet([b"1"])], seq=0), pymysql.err.OperationalError, "Lost connection"),
    ],
    ids=["cut-body", "cut-header", "wrong-sequence", "shutdown"],
)
def test_a_broken_result_closes_the_connection(wire: bytes, error: type, match: str) -> None:
    conn = _Conn(wire)
    with pytest.raises(error, match=match):
        result_packets(conn)  # type: ignore[arg-type]
    assert conn.closed
