"""The compiled framer (``_frames.c``) gives exactly the numpy path's wire events
(``frame_events`` of ``payloads``): every kind the Arrow path takes, nulls, NOT NULL
columns, sliced arrays (an offset into their buffers), text keys and every op."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.schemas import arrow_frames
from sluice.schemas.arrow_encoder import ArrowEncoder, Unencodable, frame_events
from tests.unit.test_arrow_encoder import KINDS, _filled, _schema

rows = st.lists(
    st.tuples(*(st.one_of(st.none(), values) for _, _, _, values, _, _ in KINDS)),
    min_size=1,
    max_size=40,
)


@pytest.fixture(autouse=True)
def _compiled() -> None:
    if os.environ.get("CI") != "true" and arrow_frames.unavailable():
        pytest.skip(arrow_frames.unavailable())


@settings(max_examples=150, deadline=None)
@given(rows=rows, cut=st.integers(0, 3), text_key=st.booleans())
def test_compiled_events_equal_the_numpy_path(
    rows: list[tuple[Any, ...]], cut: int, text_key: bool
) -> None:
    rows = [
        ((-1) ** i * i * 1_000_003, *row[1:]) for i, row in enumerate(rows)
    ]  # keys of both signs
    for nullable in (True, False):
        schema = _schema(nullable, ("c0", "c6") if text_key else ("c0",))
        if not nullable or text_key:
            rows = [tuple(_filled(k, v) for k, v in zip(KINDS, row, strict=True)) for row in rows]
        # a few rows before the batch: arrays that start at an offset into their buffers
        padded = (rows * 4)[:cut] + rows
        columns = [
            pa.array([row[i] for row in padded], arrow).slice(cut)
            for i, (_, _, arrow, _, _, _) in enumerate(KINDS)
        ]
        encoder = ArrowEncoder(schema)
        keys = encoder.keys(columns)
        ops = np.resize(np.frombuffer(b"cur", dtype=np.uint8), len(rows))
        compiled = encoder.events(columns, ops)  # integer keys: the framer writes their text
        assert compiled == frame_events(schema, encoder.payloads(columns), keys, ops)


def test_a_null_in_a_not_null_column_is_refused_as_the_numpy_path_refuses_it() -> None:
    schema = _schema(False)
    values = [[0, 1], *[[None, None]] * (len(KINDS) - 1)]
    columns = [pa.array(v, k[2]) for v, k in zip(values, KINDS, strict=True)]
    encoder = ArrowEncoder(schema)
    ops = np.full(2, ord("c"), dtype=np.uint8)
    with pytest.raises(Unencodable):
        encoder.events(columns, ops)
    with pytest.raises(Unencodable):
        encoder.payloads(columns)


def test_sluice_pure_python_frames_by_the_numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
    assert arrow_frames.unavailable() == "SLUICE_PURE_PYTHON is set"


def test_the_framer_is_built() -> None:
    assert arrow_frames.unavailable() == ""
