"""PostgreSQL capture's pending windows (``capture/postgres/pending.py``'s ``Pending``): a run
of change messages spanning several windows is split back into exactly the windows its
messages came in, and the open transaction's part stays pending until it commits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sluice.capture.postgres.capture import PostgresCapture
from sluice.capture.postgres.pending import Pending
from sluice.capture.postgres.setup import parse_pg_url
from sluice.capture.source import CapturedWindow, CaptureSettings
from sluice.schemas import SchemaRegistry


def _fill(pending: Pending, sizes: list[int], open_part: int) -> list[tuple[int, int]]:
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


def _owners(pending: Pending) -> dict[int, int]:
    """id(window's event list) -> its window's number (the open one is the last)."""
    owners = {id(events): w for w, (_, _, events) in enumerate(pending.windows)}
    owners[id(pending.events)] = len(pending.windows)
    return owners


@given(st.lists(st.integers(0, 5), max_size=8), st.integers(0, 5))
def test_each_window_gets_exactly_its_own_messages(sizes: list[int], open_part: int) -> None:
    pending = Pending()
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
    pending = Pending()
    pending.commit(1, 0)  # a window before the run began
    pending.run.append("open")
    assert pending.take_run(committed=True) == ([], [])
    assert pending.run == ["open"]


def test_a_big_transaction_is_handed_over_in_parts_after_the_windows_before_it() -> None:
    delivered: list[CapturedWindow] = []
    settings = CaptureSettings(("public.t",), SchemaRegistry(), delivered.append, part_bytes=100)
    capture = PostgresCapture(parse_pg_url("postgresql://u@localhost:5432/db"), settings)
    pending = Pending()
    pending.events.append(b"a" * 60)
    pending.commit(1000, 5_000_000)
    pending.events += [b"b" * 60, b"c" * 30]
    capture._check_size(pending)  # 90 bytes so far: not a part yet
    assert delivered == []
    pending.events.append(b"d" * 30)
    capture._check_size(pending)
    assert delivered == [
        CapturedWindow(1000, 5000, [b"a" * 60]),
        CapturedWindow(0, 0, [b"b" * 60, b"c" * 30, b"d" * 30], more=True),
    ]
    pending.commit(2000, 6_000_000)  # committed with nothing after the part: still a window
    capture._deliver(pending)
    assert delivered[-1] == CapturedWindow(2000, 6000, [])
    assert capture.stats.events == 4 and capture.stats.windows == 2
