"""PostgreSQL capture's pending windows (``capture/postgres/capture.py``'s ``_Pending``): a run
of change messages spanning several windows is split back into exactly the windows its
messages came in, and the open transaction's part stays pending until it commits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sluice.capture.postgres.capture import _Pending


def _fill(pending: _Pending, sizes: list[int], open_part: int) -> list[tuple[int, int]]:
    """Append ``sizes[w]`` messages (named (window, n)) to window w and commit it, then
    ``open_part`` messages of a transaction still open."""
    messages = []
    for w, size in enumerate(sizes):
        for n in range(size):
            messages.append((w, n))
            pending.run.append((w, n))
        pending.commit(1000 + w, 0)
    for n in range(open_part):
        messages.append((len(sizes), n))
        pending.run.append((len(sizes), n))
    return messages


def _owners(pending: _Pending) -> dict[int, int]:
    """id(window's event list) -> its window's number (the open one is the last)."""
    owners = {id(events): w for w, (_, _, events) in enumerate(pending.windows)}
    owners[id(pending.events)] = len(pending.windows)
    return owners


@given(st.lists(st.integers(0, 5), max_size=8), st.integers(0, 5))
def test_each_window_gets_exactly_its_own_messages(sizes: list[int], open_part: int) -> None:
    pending = _Pending()
    messages = _fill(pending, sizes, open_part)
    owners = _owners(pending)
    committed = sum(sizes)

    run, parts = pending.take_run(committed=True)
    assert run == messages[:committed]
    lo = 0
    for hi, events in parts:
        assert all(message[0] == owners[id(events)] for message in run[lo:hi])
        lo = hi
    assert lo == len(run)
    # the open transaction's part stays, and is its window's when taken whole
    assert pending.run == messages[committed:]
    rest, parts = pending.take_run(committed=False)
    assert rest == messages[committed:] and pending.run == []
    assert [(hi, id(events)) for hi, events in parts] == [(len(rest), id(pending.events))]


def test_a_committed_take_with_nothing_committed_in_the_run_takes_nothing() -> None:
    pending = _Pending()
    pending.commit(1, 0)  # a window before the run began
    pending.run.append("open")
    assert pending.take_run(committed=True) == ([], [])
    assert pending.run == ["open"]
