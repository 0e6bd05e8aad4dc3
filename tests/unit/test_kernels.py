"""The compiled column kernels (``schemas/_kernels.c``) give exactly what their references
give: Arrow's ``binary_join_element_wise`` for joined texts, the numpy varint reader, and
the digit table for the byte-matrix texts."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.schemas import arrow_decoder, arrow_json
from sluice.schemas.arrow_decoder import Undecodable

# Under CI a missing build fails (the tests run on the missing module), never skips.
built = pytest.mark.skipif(
    arrow_json._kernels is None and os.environ.get("CI") != "true",
    reason="the compiled column kernels are not built",
)
TEXTS = st.lists(st.none() | st.text(max_size=6), min_size=0, max_size=12)


@built
@settings(max_examples=200, deadline=None)
@given(
    st.data(),
    st.integers(1, 5),
    st.lists(st.none() | st.text(max_size=4), min_size=1, max_size=6),
)
def test_compiled_join_equals_arrows(
    data: st.DataObject, rows: int, constants: list[str | None]
) -> None:
    """Arrays (sliced, with nulls) and constants in any order; a null anywhere is a null row."""
    parts: list[pa.Array | pa.Scalar | str] = []
    for constant in constants:
        if constant is None:
            extra = data.draw(st.integers(0, 3))
            values = data.draw(st.lists(st.none() | st.text(max_size=6), min_size=rows + extra,
                                        max_size=rows + extra))  # fmt: skip
            start = data.draw(st.integers(0, extra))
            parts.append(pa.array(values, pa.string()).slice(start, rows))
        else:
            parts.append(constant)
    if not any(isinstance(p, pa.Array) for p in parts):
        parts.append(pa.array(["x"] * rows))
    scalars = [pa.scalar(p) if isinstance(p, str) else p for p in parts]
    compiled = arrow_json._compiled_join(scalars)
    assert compiled is not None
    compiled.validate(full=True)
    assert compiled.to_pylist() == pc.binary_join_element_wise(*scalars, "").to_pylist()


@built
def test_compiled_join_leaves_what_it_does_not_take_to_arrow() -> None:
    texts = pa.array(["a", "b"])
    assert arrow_json._compiled_join([texts, pa.scalar(None, pa.string())]) is None
    assert arrow_json._compiled_join([texts.cast(pa.large_string())]) is None
    assert arrow_json._compiled_join([pa.scalar("a")]) is None
    assert arrow_json._join("{", pa.array([], pa.string()), "}").to_pylist() == []


def _varint(value: int) -> bytes:
    zigzag = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while zigzag >= 0x80:
        out.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    return bytes([*out, zigzag])


@built
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=40), st.integers(0, 3))
def test_compiled_varints_equal_numpys(values: list[int], gap: int) -> None:
    buf, starts = bytearray(), []
    for value in values:
        buf += b"\x00" * gap
        starts.append(len(buf))
        buf += _varint(value)
    u8 = np.frombuffer(bytes(buf) + bytes(10), np.uint8)
    pos = np.asarray(starts, dtype=np.int64)
    got, ends = arrow_decoder._varints(u8, pos)
    want, want_ends = arrow_decoder._numpy_varints(u8, pos)
    assert got.tolist() == want.tolist() == values
    assert ends.tolist() == want_ends.tolist()
    ends[:] = 0  # writable, as the reference's arrays


@built
def test_compiled_varints_refuse_what_the_reference_refuses() -> None:
    eleven = np.frombuffer(b"\xff" * 11 + b"\x00" * 10, np.uint8)
    for read in (arrow_decoder._varints, arrow_decoder._numpy_varints):
        with pytest.raises(Undecodable):
            read(eleven, np.zeros(1, dtype=np.int64))
    with pytest.raises(Undecodable):
        arrow_decoder._varints(np.frombuffer(b"\x80\x80", np.uint8), np.zeros(1, np.int64))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(1 << 62), 1 << 62), max_size=20), st.integers(1, 19))
def test_digits_are_the_values_last_digits(values: list[int], width: int) -> None:
    array = np.asarray(values, dtype=np.int64)
    got = arrow_json._digits(array, width)
    want = [((array // 10 ** (width - 1 - k)) % 10 + 48).astype(np.uint8) for k in range(width)]
    assert [d.tolist() for d in got] == [d.tolist() for d in want]


@built
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.lists(st.tuples(st.integers(0, 64), st.integers(0, 8))))
def test_compiled_gather_equals_numpys(data: bytes, ranges: list[tuple[int, int]]) -> None:
    buf = np.frombuffer(data + bytes(10), np.uint8)
    ranges = [(a, n) for a, n in ranges if a + n <= len(buf)]
    starts = np.asarray([a for a, _ in ranges], dtype=np.int64)
    lengths = np.asarray([n for _, n in ranges], dtype=np.int64)
    got = arrow_decoder._gather(buf, starts, lengths)
    assert got.tolist() == arrow_decoder._numpy_gather(buf, starts, lengths).tolist()
    with pytest.raises(Undecodable):
        arrow_decoder._gather(buf, np.asarray([len(buf)]), np.asarray([1]))


@built
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.none() | st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999), max_size=20
    ),
    st.sampled_from(["date", "datetime", "timestamp"]),
)
def test_compiled_dates_equal_the_byte_matrices(values: list[int | None], kind: str) -> None:
    """Dates, datetimes and timestamps (with and without fractions, nulls) of 0001..9999."""
    if kind == "date":
        values = [None if v is None else v // 86_400_000_000 for v in values]
    text = {"date": arrow_json._date, "datetime": arrow_json._datetime(""),
            "timestamp": arrow_json._datetime("Z")}[kind]  # fmt: skip
    arr = pa.array(values, pa.int64())
    compiled = text(arr)
    before = os.environ.get("SLUICE_PURE_PYTHON")
    os.environ["SLUICE_PURE_PYTHON"] = "1"  # not monkeypatch: hypothesis runs many examples
    try:
        reference = text(arr)
    finally:
        if before is None:
            del os.environ["SLUICE_PURE_PYTHON"]
        else:
            os.environ["SLUICE_PURE_PYTHON"] = before
    compiled.validate(full=True)
    assert compiled.to_pylist() == reference.to_pylist()
    assert compiled.buffers()[1:] == reference.buffers()[1:]  # null rows' texts too


def _reference(text: Any, arr: pa.Array) -> pa.Array:
    before = os.environ.get("SLUICE_PURE_PYTHON")
    os.environ["SLUICE_PURE_PYTHON"] = "1"  # not monkeypatch: hypothesis runs many examples
    try:
        return text(arr)
    finally:
        if before is None:
            del os.environ["SLUICE_PURE_PYTHON"]
        else:
            os.environ["SLUICE_PURE_PYTHON"] = before


@built
@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | st.integers(-(1 << 63), (1 << 63) - 1), max_size=20))
def test_compiled_integers_equal_arrows_cast(values: list[int | None]) -> None:
    arr = pa.array(values, pa.int64())
    compiled = arrow_json._number(arr)
    compiled.validate(full=True)
    assert compiled.to_pylist() == arr.cast(pa.string()).to_pylist()
    assert compiled.equals(_reference(arrow_json._number, arr))


@built
@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.none() | st.integers(-(10**18) + 1, 10**18 - 1), max_size=20),
    st.integers(0, 18),
    st.booleans(),
)
def test_compiled_decimals_equal_the_byte_matrices(
    values: list[int | None], scale: int, quoted: bool
) -> None:
    """Unscaled values of up to 18 digits, every scale, quoted or bare (uint64), nulls."""
    unscaled = pa.array([0 if v is None else v for v in values], pa.int64())
    wide = np.empty((len(values), 2), dtype=np.int64)
    wide[:, 0] = unscaled.to_numpy()
    wide[:, 1] = wide[:, 0] >> 63
    valid = np.asarray([v is not None for v in values])
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if not valid.all() else None
    arr = pa.Array.from_buffers(
        pa.decimal128(38, scale), len(values), [validity, pa.py_buffer(wide)]
    )
    text = arrow_json._decimal(scale, quoted)
    compiled = text(arr)
    compiled.validate(full=True)
    reference = _reference(text, arr)
    assert compiled.to_pylist() == reference.to_pylist()
    assert compiled.buffers()[1:] == reference.buffers()[1:]  # null rows' texts too
