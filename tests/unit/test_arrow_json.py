"""Arrow's JSON texts of decoded images are exactly the row decoder's (``decode_text``), on
every kind it takes: rows, the key, and the canonical key."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.arrow_decoder import ArrowDecoder
from sluice.schemas.arrow_json import UNESCAPED_KINDS, ArrowJson, value_texts
from sluice.schemas.columns import (
    DATE_INFINITY,
    DATE_MINUS_INFINITY,
    MICROS_INFINITY,
    MICROS_MINUS_INFINITY,
    date_text,
    datetime_text,
    timestamp_text,
)
from sluice.sink.sql.engines import Sqlite
from tests.unit.test_arrow_decoder import KINDS
from tests.unit.test_arrow_decoder import _fill as _filled

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)
# the decoder test's kinds, with the texts JSON escapes and dates within date_text's range
JSON_KINDS = [
    (k, src, {"string": TEXT, "json": st.just('{"a": [1, 2.5, "x"]}')}.get(k, v), p, s)
    for k, src, v, p, s in KINDS
]
# PostgreSQL's infinities too ("infinity", "-infinity": the row decoder's text, per value)
_INFINITE_MICROS = st.sampled_from([MICROS_INFINITY, MICROS_MINUS_INFINITY])
JSON_KINDS = [
    (k, src, st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999) | _INFINITE_MICROS
     if k in ("datetime", "timestamp")
     else v | st.sampled_from([DATE_INFINITY, DATE_MINUS_INFINITY]) if k == "date" else v, p, s)
    for k, src, v, p, s in JSON_KINDS
]  # fmt: skip


def _fill(i: int, value: Any, nullable: bool) -> Any:
    if value is None and JSON_KINDS[i][0] == "json" and not (nullable and i > 0):
        return "{}"  # a NOT NULL JSON column holds a document
    return _filled(i, value, nullable)


def _schema(nullable: bool, key: tuple[str, ...]) -> TableSchema:
    columns = tuple(
        Column(f"c{i}", kind, nullable and i > 0, source, precision, scale)
        for i, (kind, source, _, precision, scale) in enumerate(JSON_KINDS)
    )
    return TableSchema("db.t", 1, columns, key)


image = st.one_of(st.none(), st.tuples(*(st.one_of(st.none(), v) for _, _, v, _, _ in JSON_KINDS)))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(image, image), min_size=1, max_size=20),
    st.booleans(),
    st.sampled_from([(), ("c0",), ("c11", "c0", "c4")]),
)
def test_texts_equal_the_row_decoder(
    events: list[tuple[Any, Any]], nullable: bool, key: tuple[str, ...]
) -> None:
    schema = _schema(nullable, key)
    codec = RowCodec(schema)
    payloads = []
    for pair in events:
        images = [None if img is None else [_fill(i, v, nullable) for i, v in enumerate(img)]
                  for img in pair]  # fmt: skip
        if images == [None, None]:
            images[1] = [_fill(i, None, False) for i in range(len(JSON_KINDS))]
        payloads.append(codec.encode(*images))
    starts = np.cumsum([0] + [len(p) for p in payloads[:-1]])
    decoded = ArrowDecoder(schema).images(np.frombuffer(b"".join(payloads), np.uint8), starts)
    texts = [
        [t.as_py()] * len(payloads) if isinstance(t, pa.Scalar) else t.to_pylist()
        for t in ArrowJson(schema).texts_of(decoded)
    ]
    for n, payload in enumerate(payloads):
        want = codec.decode_text(payload)
        assert (texts[0][n], texts[1][n], texts[2][n]) == want
        assert texts[3][n] == codec.decode_text(payload, canonical_key=True)[0]


@settings(max_examples=100, deadline=None)
@given(st.lists(image, min_size=1, max_size=20), st.booleans())
def test_value_texts_equal_the_converters(rows: list[Any], nullable: bool) -> None:
    """A SQLite replica's bulk path takes dates, times and decimals as Arrow's texts less
    their quotes: the very values its per-value converter gives (``Sqlite.converter``)."""
    schema = _schema(nullable, ("c0",))
    codec = RowCodec(schema)
    images = [
        [_fill(i, None if row is None else row[i], nullable) for i in range(len(JSON_KINDS))]
        for row in rows
    ]
    payloads = [codec.encode(None, img) for img in images]
    starts = np.cumsum([0] + [len(p) for p in payloads[:-1]])
    decoded = ArrowDecoder(schema).images(np.frombuffer(b"".join(payloads), np.uint8), starts)
    checked = set()
    for col, arr in zip(schema.columns, decoded.after, strict=True):
        if col.kind not in UNESCAPED_KINDS:
            continue
        convert = Sqlite().converter(col)
        want = [None if v is None else convert(v) for v in arr.to_pylist()]
        assert value_texts(col, arr).to_pylist() == want, col.kind
        checked.add(col.kind)
    assert checked == UNESCAPED_KINDS


def test_a_datetime_of_a_dates_infinity_is_an_ordinary_datetime() -> None:
    """+-2**31 are a date's infinities, but as microseconds they are 00:35:47.483647 after
    (and 23:24:12.516352 before) 1970: the row decoder called them "infinity"."""
    assert datetime_text(2**31 - 1) == "1970-01-01T00:35:47.483647"
    assert timestamp_text(-(2**31)) == "1969-12-31T23:24:12.516352Z"
    assert (datetime_text(MICROS_INFINITY), date_text(DATE_MINUS_INFINITY)) == (
        "infinity",
        "-infinity",
    )
