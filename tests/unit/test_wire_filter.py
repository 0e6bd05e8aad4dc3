"""The compiled relay filter (``core/_wire.c``) keeps exactly what ``wire.filter_window``'s
Python loop keeps: the same window, the same rebuilt record, or nothing."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import wire

# Under CI a missing build fails (the tests run on the missing module), never skips.
built = pytest.mark.skipif(
    wire._wire is None and os.environ.get("CI") != "true",
    reason="the compiled relay filter is not built",
)
SOURCES = [b"db.a", b"db.bb", b"x"]
event = st.tuples(
    st.sampled_from(SOURCES),
    st.sampled_from("cudt"),
    st.integers(0, (1 << 32) - 1),
    st.binary(max_size=9),
)


def _window(events: list[tuple[bytes, str, int, bytes]]) -> bytes:
    raw = [
        wire.encode_event(wire.RawEvent(s.decode(), op, 1, h, p))  # type: ignore[arg-type]
        for s, op, h, p in events
    ]
    return wire.encode_window(9, 8, 1_700_000_000_000, raw)


@built
@settings(max_examples=300, deadline=None)
@given(
    st.lists(event, max_size=12),
    st.none() | st.frozensets(st.sampled_from(SOURCES)),
    st.none() | st.integers(1, 5).flatmap(lambda n: st.tuples(st.integers(0, n - 1), st.just(n))),
)
def test_the_compiled_filter_keeps_what_the_python_loop_keeps(
    events: list[tuple[bytes, str, int, bytes]],
    sources: frozenset[bytes] | None,
    partition: tuple[int, int] | None,
) -> None:
    window = _window(events)
    flt = wire.Filter(sources, partition)
    if flt.is_open:  # the window itself, before either loop
        assert wire.filter_window(window, flt) is window
        return
    got, want = wire.filter_window(window, flt), wire._filter_window(window, flt)
    assert got == want
    if want is not None and len(want) == len(window) and want == window:
        assert got is window  # kept whole: the record itself, not a copy


@built
def test_a_corrupt_window_is_left_to_the_python_loop() -> None:
    window = _window([(b"db.a", "c", 3, b"xy"), (b"db.a", "c", 4, b"z")])
    cut = window[: wire.WINDOW_HEADER_SIZE + 14]
    flt = wire.Filter(None, (0, 2))
    with pytest.raises(Exception) as compiled:
        wire.filter_window(cut, flt)
    with pytest.raises(Exception) as reference:
        wire._filter_window(cut, flt)
    assert type(compiled.value) is type(reference.value)
