"""A MySQL/MariaDB page read at once: the query source's page path on the text protocol.

PyMySQL makes a packet object per row and the generated row parser a Python object per
value: ~3 us a row, more than a plain ``SELECT``'s whole read. Here a result's row packets
are read off the connection's buffered socket in one loop (``result_packets``: the header
and body of each, nothing else), joined, and split into columns with numpy: field k of every
row is found from field k-1's length at once (``split``). Each column's bytes become one
Arrow array by one gather, and Arrow's casts parse the kinds whose text they read exactly
as the row parser does (``column_reader``): integers, doubles, decimals of their column's
scale, dates and datetimes; text kinds are checked for UTF-8. A text a cast refuses (a zero
date, a decimal past 38 digits) raises, and the page takes the row path, which decides.

A page ``split`` cannot lay out (a value of 16 MiB or more, a row of another field count)
is parsed row by row by the generated parser instead: the same events, slower; the dialect
counts such pages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pymysql
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket

from sluice.capture.mysql.seed import _CONVERT, _TEXT_KINDS
from sluice.capture.query.columns import converted, unscaled
from sluice.capture.texts import Places, gathered
from sluice.schemas import Column

_MAX_PACKET = 0xFFFFFF  # a payload this long continues in the next packet
_NULL, _TWO, _THREE, _EIGHT = 0xFB, 0xFC, 0xFD, 0xFE
_MAX_PAGE = 1 << 31  # Arrow's int32 offsets


def result_packets(conn: pymysql.Connection[Any]) -> list[bytes]:
    """The row packets' payloads of the unbuffered result ``conn`` is reading, up to its EOF
    packet, which ends the result (``SSCursor``'s state is left as a read to the end leaves
    it). Errors are PyMySQL's own: a lost connection, a wrong sequence, an error packet."""
    if conn._current_timeout != conn._read_timeout:  # as PyMySQL's _read_packet
        conn._sock.settimeout(conn._read_timeout)
        conn._current_timeout = conn._read_timeout
    read, seq, rows = conn._rfile.read, conn._next_seq_id, []
    try:
        while True:
            body, seq = _packet(conn, read, seq)
            if body[:1] == b"\xfe" and len(body) < 9:
                break  # EOF
            if body[:1] == b"\xff":
                conn._next_seq_id = seq
                _result_ended(conn)
                MysqlPacket(body, conn.encoding).raise_for_error()
            rows.append(body)
    except OSError as exc:
        conn._force_close()
        raise pymysql.err.OperationalError(
            CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
        ) from None
    conn._next_seq_id = seq
    _result_ended(conn)
    return rows


def _packet(
    conn: pymysql.Connection[Any], read: Callable[[int], bytes], seq: int
) -> tuple[bytes, int]:
    """One logical packet's payload (joined where it continues) and the next sequence id."""
    parts: list[bytes] = []
    while True:
        header = read(4)
        if len(header) < 4:
            _lost(conn)
        length = header[0] | header[1] << 8 | header[2] << 16
        if header[3] != seq:
            conn._force_close()
            if header[3] == 0:  # MariaDB's error packet at shutdown
                _lost(conn)
            raise pymysql.err.InternalError(
                f"Packet sequence number wrong - got {header[3]} expected {seq}"
            )
        seq = (seq + 1) & 0xFF
        body = read(length)
        if len(body) < length:
            _lost(conn)
        if length < _MAX_PACKET and not parts:
            return body, seq
        parts.append(body)
        if length < _MAX_PACKET:
            return b"".join(parts), seq


def _lost(conn: pymysql.Connection[Any]) -> NoReturn:
    conn._force_close()
    raise pymysql.err.OperationalError(
        CR.CR_SERVER_LOST, "Lost connection to MySQL server during query"
    )


def _result_ended(conn: pymysql.Connection[Any]) -> None:
    result = conn._result
    if result is not None:
        result.unbuffered_active = False
        result.connection = None


def split(rows: list[bytes], count: int) -> list[pa.Array] | None:
    """Each field of every row packet, as a binary array of the text protocol's bytes (None
    for NULL); None when the packets cannot be laid out here (the row parser reads them)."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    ends = np.cumsum(lengths)
    if not rows or int(ends[-1]) >= _MAX_PAGE:
        return None
    buf = np.frombuffer(b"".join(rows), dtype=np.uint8)
    places = _places(buf, ends - lengths, ends, count)
    if places is None:
        return None
    return gathered(buf, places, [pa.binary()] * count)


def _places(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, count: int
) -> list[Places] | None:
    """Where each field lies in every row (length-encoded strings, 0xFB for NULL)."""
    last = len(buf) - 1
    pos, out = starts, []
    for _ in range(count):
        if (pos >= ends).any():
            return None
        lead = buf[pos].astype(np.int64)
        if (lead >= _EIGHT).any():  # a value of 16 MiB or more (or not a length)
            return None
        two, three = lead == _TWO, lead == _THREE
        valid = lead != _NULL
        length = lead
        if two.any() or three.any():
            b1 = buf[np.minimum(pos + 1, last)].astype(np.int64)
            b2 = buf[np.minimum(pos + 2, last)].astype(np.int64)
            b3 = buf[np.minimum(pos + 3, last)].astype(np.int64)
            length = np.where(two, b1 | b2 << 8, np.where(three, b1 | b2 << 8 | b3 << 16, lead))
        head = np.where(two, 3, np.where(three, 4, 1))
        length = np.where(valid, length, 0)
        out.append((pos + head, length, valid))
        pos = pos + head + length
    if (pos != ends).any():
        return None
    return out


def fields(data: bytes) -> list[bytes | None]:
    """A text-protocol row packet's values as bytes (None for NULL), one by one."""
    out: list[bytes | None] = []
    p = 0
    while p < len(data):
        n = data[p]
        if n == _NULL:
            out.append(None)
            p += 1
            continue
        if n < _NULL:
            p += 1
        elif n == _TWO:
            n, p = int.from_bytes(data[p + 1 : p + 3], "little"), p + 3
        elif n == _THREE:
            n, p = int.from_bytes(data[p + 1 : p + 4], "little"), p + 4
        else:
            n, p = int.from_bytes(data[p + 1 : p + 9], "little"), p + 9
        out.append(data[p : p + n])
        p += n
    return out


def text_array(values: pa.Array) -> pa.Array:
    """A binary column's bytes as a string array; ``ArrowInvalid`` where one is not UTF-8."""
    text = values.view(pa.string())
    text.validate(full=True)
    return text


def _cast(to: pa.DataType, then: pa.DataType | None = None) -> Callable[[pa.Array], pa.Array]:
    def read(values: pa.Array) -> pa.Array:
        out = pc.cast(values.view(pa.string()), to)
        return out if then is None else out.cast(then)

    return read


_CASTS: dict[str, Callable[[pa.Array], pa.Array]] = {
    "int": _cast(pa.int64()),
    "double": _cast(pa.float64()),
    "date": _cast(pa.date32(), pa.int32()),
    "datetime": _cast(pa.timestamp("us"), pa.int64()),
    "timestamp": _cast(pa.timestamp("us"), pa.int64()),
}


def column_reader(column: Column) -> Callable[[Sequence[Any]], pa.Array]:
    """A column's text-protocol bytes (a binary array) -> its canonical Arrow array, as
    ``columns.canonical`` gives the row parser's values; ``Inexact`` (or Arrow's error)
    where a value must go by the row path."""
    kind = column.kind
    if kind in _TEXT_KINDS:
        return _binary(text_array)
    if kind in ("bytes", "geometry"):
        return _binary(lambda values: values)
    if kind in _CASTS:
        return _binary(_CASTS[kind])
    if kind == "decimal":
        wide = pa.decimal128(38, column.scale)
        return _binary(lambda values: unscaled(pc.cast(values.view(pa.string()), wide)))
    convert = _CONVERT[kind]
    return lambda values: converted(column, convert, values)


def _binary(read: Callable[[pa.Array], pa.Array]) -> Callable[[Sequence[Any]], pa.Array]:
    def checked(values: Sequence[Any]) -> pa.Array:
        if not isinstance(values, pa.Array):  # a page the row parser laid out
            values = pa.array(list(values), pa.binary())
        return read(values)

    return checked
