"""Cutting an integer key into chunks by arithmetic, and when not to."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.capture.seeding import KeyRange, even_ranges


def test_a_dense_key_is_cut_into_chunks_of_the_asked_size() -> None:
    assert even_ranges(1, 1_000_000, 1_000_000, 250_000) == [
        KeyRange(None, (250_000,)),
        KeyRange((250_000,), (500_000,)),
        KeyRange((500_000,), (750_000,)),
        KeyRange((750_000,), None),
    ]
    assert even_ranges(-5, 4, 10, 100) == [KeyRange(None, None)]


def test_sparse_keys_and_unknown_estimates_are_left_to_seeks() -> None:
    assert even_ranges(1, 1_000_000, 400_000, 1000) is None  # 2.5 key values per row
    assert even_ranges(1, 10, 0, 1000) is None  # no estimate: the server does not know


@settings(deadline=None)
@given(
    lowest=st.integers(-(10**12), 10**12),
    span=st.integers(1, 10**7),
    fill=st.floats(0.5, 1.0),
    chunk_rows=st.integers(1000, 10**6),
)
def test_ranges_cover_every_key_once(lowest: int, span: int, fill: float, chunk_rows: int) -> None:
    estimate = max(-(-span // 2), int(span * fill))  # at least half the key values are rows
    ranges = even_ranges(lowest, lowest + span - 1, estimate, chunk_rows)
    assert ranges is not None
    assert ranges[0].lower is None and ranges[-1].upper is None
    for before, after in itertools.pairwise(ranges):
        assert before.upper == after.lower  # (lower, upper]: no key in two chunks, none missed
        assert before.upper is not None and lowest <= before.upper[0] < lowest + span - 1
    uppers = [r.upper[0] for r in ranges[:-1] if r.upper is not None]
    assert uppers == sorted(set(uppers))
