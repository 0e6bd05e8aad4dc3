"""The compiled ``event_spans`` loop (``core/_wire.c``) reads what the Python loop reads: the
same tables, payload starts, ops and order, and a corrupt window is left to the Python loop."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import wire

# Under CI a missing build fails (the tests run on the missing module), never skips.
built = pytest.mark.skipif(
    wire._wire is None and os.environ.get("CI") != "true",
    reason="the compiled wire loops are not built",
)
event = st.tuples(
    st.sampled_from(["db.a", "db.bb", "x", "é.t"]),
    st.sampled_from("cudrt"),
    st.integers(0, 3),
    st.integers(0, (1 << 32) - 1),
    st.binary(max_size=9),
)


def _window(events: list[tuple[str, str, int, int, bytes]]) -> bytes:
    raw = [
        wire.encode_event(wire.RawEvent(s, op, v, h, p))  # type: ignore[arg-type]
        for s, op, v, h, p in events
    ]
    return wire.encode_window(9, 8, 1_700_000_000_000, raw)


@built
@settings(max_examples=300, deadline=None)
@given(st.lists(event, max_size=20))
def test_the_compiled_spans_are_the_python_loops(
    events: list[tuple[str, str, int, int, bytes]],
) -> None:
    window = _window(events)
    assert wire.event_spans(window) == wire._event_spans(window)


@built
def test_a_corrupt_window_is_left_to_the_python_loop() -> None:
    window = _window([("db.a", "c", 1, 3, b"xy"), ("db.a", "c", 1, 4, b"z")])
    cut = window[: wire.WINDOW_HEADER_SIZE + 14]
    with pytest.raises(Exception) as compiled:
        wire.event_spans(cut)
    with pytest.raises(Exception) as reference:
        wire._event_spans(cut)
    assert type(compiled.value) is type(reference.value)
