"""A run of one relation's inserts (and key-keeping updates without an old image) transcoded
at once: the bulk path of PostgreSQL capture for large transactions.

The per-row transcoder costs ~4-5 us per 11-column row in Python. A run of N such messages
is read with numpy instead: each column's tag and length are found for every row at once
(the offsets of column k follow from those of column k-1), each column's text becomes one
Arrow array, Arrow's casts parse it (exact: ``int``, ``float`` and ISO dates and timestamps,
as the row path's converters; booleans by ``= 't'``), ``schemas/arrow_encoder`` writes the
Avro payloads and the canonical keys, and the event frames are joined by Arrow too.

Anything this path does not take exactly (an unchanged TOASTed value, a null in a column
that allows none, a text a cast refuses such as ``infinity`` or a BC date, a shape it does
not know) makes ``events`` return None, and the caller transcodes the run row by row, which
decides and names a bad column. ``tests/unit/test_pg_runs.py`` checks both paths give the
same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.capture.postgres.types import column_kind, same_text
from sluice.capture.texts import Places, gathered
from sluice.schemas import TableSchema
from sluice.schemas.arrow_encoder import ArrowEncoder, Unencodable, arrow_encodable, frame_events

MIN_RUN = 64  # shorter runs: the per-row path is as fast (numpy's fixed costs)
_TEXT = frozenset({"string", "json", "uuid", "enum", "inet6"})
_I, _U, _N, _T, _NULL = 73, 85, 78, 116, 110

# A column's text -> its canonical values, by the kind and the row path's converter. The text
# is typed string but not checked for UTF-8 (a cast that parses it refuses what is not); a
# text kind's bytes go to the payload as they came, as on the row path.
_Parse = Callable[[pa.Array], pa.Array]


def _cast(to: pa.DataType, then: pa.DataType | None = None) -> _Parse:
    def parse(text: pa.Array) -> pa.Array:
        out = pc.cast(text, to)
        return out if then is None else out.cast(then)

    return parse


def _as_is(text: pa.Array) -> pa.Array:
    return text


def _bool(text: pa.Array) -> pa.Array:
    return pc.equal(text, pa.scalar("t"))  # as the row path: "t" is true, the rest false


_PARSERS: dict[tuple[str, Any], _Parse] = {
    ("bool", column_kind(16)[1]): _bool,
    ("int", int): _cast(pa.int64()),
    ("double", float): _cast(pa.float64()),
    ("date", column_kind(1082)[1]): _cast(pa.date32(), pa.int32()),
    ("datetime", column_kind(1114)[1]): _cast(pa.timestamp("us"), pa.int64()),
    ("timestamp", column_kind(1184)[1]): _cast(pa.timestamp("us", "UTC"), pa.int64()),
}


def _parser(kind: str, convert: Any) -> _Parse | None:
    if kind in _TEXT and convert is same_text:
        return _as_is
    return _PARSERS.get((kind, convert))


class RunTranscoder:
    """The bulk path for one schema version of a relation."""

    def __init__(self, schema: TableSchema, parsers: list[_Parse]) -> None:
        self._schema = schema
        self._encoder = ArrowEncoder(schema)
        self._parsers = parsers

    @classmethod
    def build(cls, schema: TableSchema, converters: Sequence[Any]) -> RunTranscoder | None:
        """None when some column (or the key) cannot take this path."""
        if not arrow_encodable(schema):
            return None
        parsers = [_parser(c.kind, f) for c, f in zip(schema.columns, converters, strict=True)]
        if any(p is None for p in parsers):
            return None
        return cls(schema, [p for p in parsers if p is not None])

    def events(self, payloads: list[bytes]) -> list[bytes] | None:
        """The wire events of ``payloads`` (Insert, or Update with a new tuple only), or None
        when the row path must decide."""
        buf = np.frombuffer(b"".join(payloads), dtype=np.uint8)
        starts, ends = _bounds(payloads)
        tags = buf[starts]
        inserts = tags == _I
        if len(buf) >= 1 << 31 or not (inserts | (tags == _U) & (buf[starts + 5] == _N)).all():
            return None
        columns = _columns(buf, starts, ends, len(self._parsers))
        if columns is None:
            return None
        try:
            values = [
                parse(text)
                for parse, text in zip(self._parsers, gathered(buf, columns), strict=True)
            ]
            payload = self._encoder.payloads(values)
            keys = self._encoder.keys(values)
        except (pa.ArrowInvalid, Unencodable):
            return None
        return self._frame(payload, keys, inserts)

    def _frame(self, payload: pa.Array, keys: pa.Array, inserts: np.ndarray) -> list[bytes]:
        ops = np.where(inserts, np.uint8(ord("c")), np.uint8(ord("u")))
        return frame_events(self._schema, payload, keys, ops)


def _bounds(payloads: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads))
    ends = np.cumsum(lengths)
    return ends - lengths, ends


def _columns(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, count: int
) -> list[Places] | None:
    """Where each column's text lies in every message: ``(start, length, valid)`` arrays; None
    for a shape the row path must read (another column count, an unchanged TOASTed value, a
    length past the message)."""
    if len(buf) < 8:
        return None
    # every 4 bytes from each offset as a big-endian int: one gather reads a length
    u32 = np.ndarray((len(buf) - 3,), dtype=">u4", buffer=buf, strides=(1,))
    u16 = np.ndarray((len(buf) - 1,), dtype=">u2", buffer=buf, strides=(1,))
    if (u16[starts + 6] != count).any():
        return None
    pos = starts + 8
    last = len(u32) - 1
    out: list[Places] = []
    for _ in range(count):
        if (pos >= ends).any():
            return None
        tag = buf[pos]
        valid = tag == _T
        if not (valid | (tag == _NULL)).all():
            return None
        length = np.where(valid, u32[np.minimum(pos + 1, last)], 0).astype(np.int64)
        out.append((pos + 5, length, valid))
        pos = np.where(valid, pos + 5 + length, pos + 1)
    if (pos != ends).any():
        return None
    return out
