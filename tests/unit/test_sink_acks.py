"""``Acks``: a sink counts what its target acknowledged, not what it read (issue 40)."""

from __future__ import annotations

from sluice.core.checkpoint import Online
from sluice.sink.acks import Acks, Rate


def _deliver(acks: Acks, scn: int, events: int, ts_ms: int = 1_000) -> None:
    acks.read(scn, ts_ms, events)
    acks.taken(scn, ts_ms, events, Online(scn), last=True)


def test_held_windows_count_once_their_checkpoint_is_committed() -> None:
    acks = Acks()
    for scn in (10, 11, 12):
        _deliver(acks, scn, 5)
    acks.settle(None)
    assert (acks.events, acks.windows, acks.unacknowledged) == (0, 0, 15)
    acks.settle(Online(11))
    assert (acks.events, acks.windows, acks.last_scn, acks.unacknowledged) == (10, 2, 11, 5)
    acks.settle(Online(12))
    assert (acks.events, acks.windows, acks.unacknowledged) == (15, 3, 0)


def test_a_lost_group_read_again_counts_once() -> None:
    """The outage of the issue: held windows lost, read again and again; only the delivery
    the target acknowledged counts (it counted 18,526 against 5,356 at the relay)."""
    acks = Acks()
    _deliver(acks, 10, 4)
    acks.settle(Online(10))
    for _ in range(5):  # five tries while the target is down, each lost
        for scn in (11, 12):
            _deliver(acks, scn, 3)
        acks.settle(Online(10))
        acks.lost()
    for scn in (11, 12):
        _deliver(acks, scn, 3)
    acks.settle(Online(12))
    assert acks.events == 10 and acks.windows == 3
    assert acks.read_events == 4 + 6 * 6
    assert acks.reread_events == 5 * 6 and acks.lost_events == 5 * 6


def test_a_big_windows_pieces_count_when_its_last_piece_is_acknowledged() -> None:
    acks = Acks()
    acks.read(20, 1_000, 100, first=True)
    acks.taken(20, 1_000, 100, None, last=False)
    acks.settle(Online(19))
    assert acks.events == 0 and acks.unacknowledged == 100
    acks.lost()  # the window is read again from its start
    assert acks.lost_events == 100 and acks.unacknowledged == 0
    for piece, last in ((100, False), (50, True)):
        acks.read(20, 1_000, piece, first=not last)
        acks.taken(20, 1_000, piece, Online(20), last=last)
    acks.settle(Online(20))
    assert (acks.events, acks.windows, acks.reread_events) == (150, 1, 100)


def test_targets_that_acknowledge_at_once_count_at_once() -> None:
    acks = Acks()
    _deliver(acks, 5, 2)
    acks.settle(None, all_done=True)
    assert acks.events == 2 and acks.windows == 1


def test_lag_is_from_what_the_target_committed() -> None:
    """A stuck checkpoint shows its age even while windows keep being read."""
    acks = Acks()
    _deliver(acks, 10, 1, ts_ms=1_000)
    acks.settle(Online(10))
    _deliver(acks, 11, 1, ts_ms=2_000)  # read, never acknowledged
    _deliver(acks, 12, 1, ts_ms=30_000)
    assert acks.lag_s(0, now_ms=31_000) == 0.0
    assert acks.lag_s(2, now_ms=31_000) == 29.0  # from the oldest unacknowledged window
    acks.lost()
    acks.settle(Online(10))
    assert acks.lag_s(2, now_ms=31_000) == 30.0  # from the newest acknowledged one
    assert Acks().lag_s(5) is None


def test_the_rate_falls_to_zero_when_nothing_is_acknowledged() -> None:
    rate = Rate(span_s=10)
    rate.add(0, now=0.0)
    rate.add(100, now=1.0)
    assert rate.per_second(now=1.0) == 100.0
    assert rate.per_second(now=20.0) == 0.0
