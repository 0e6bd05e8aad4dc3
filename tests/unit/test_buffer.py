"""Property tests of the circular event buffer, its SCN index and its restore."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import wire
from sluice.core.buffer import FILE_HEADER_SIZE, EventBuffer
from sluice.errors import BootstrapRequired, WindowTooLarge


def _event(i: int, size: int) -> bytes:
    return wire.encode_event(wire.RawEvent("db.t", "c", 1, i, bytes([i % 256]) * size))


def _scns(windows: list[bytes]) -> list[int]:
    return [wire.read_window_header(w).scn for w in windows]


def _read_all(buf: EventBuffer, since: int) -> list[int]:
    out: list[int] = []
    cursor = None
    while True:
        windows, cursor = buf.read(since, 300, cursor)
        if not windows:
            return out
        out += _scns(windows)
        since = out[-1]


sizes = st.lists(st.integers(min_value=0, max_value=1500), min_size=1, max_size=120)


@settings(max_examples=150, deadline=None)
@given(
    sizes=sizes,
    capacity=st.integers(min_value=4096, max_value=20000),
    restore_at=st.integers(min_value=0, max_value=119),
    block=st.sampled_from([64, 512, 4096]),
)
def test_buffer_holds_a_contiguous_suffix_and_survives_restore(
    sizes: list[int], capacity: int, restore_at: int, block: int
) -> None:
    mem = bytearray(FILE_HEADER_SIZE + capacity)
    buf = EventBuffer(mem, index_block=block)
    buf.format(100)
    appended: list[int] = []
    for n, size in enumerate(sizes):
        scn = 100 + (n + 1) * 7
        buf.append(scn, n, [_event(n, size), _event(n + 1, size // 2)])
        appended.append(scn)
        if n == restore_at:  # a restart: rebuild everything from the bytes alone
            buf = EventBuffer(mem, index_block=block)
            assert buf.restore()
        held = [s for s in appended if s > buf.start_scn]
        assert buf.max_scn == scn and buf.window_count == len(held)
        assert buf.bytes_held <= buf.capacity
        # reading from any held point gives exactly the later windows, in order
        assert _read_all(buf, buf.start_scn) == held
        mid = held[len(held) // 2]
        assert _read_all(buf, mid) == [s for s in held if s > mid]
        assert _read_all(buf, mid + 1) == [s for s in held if s > mid]
    if buf.start_scn > 100:
        with pytest.raises(BootstrapRequired) as info:
            buf.read(buf.start_scn - 1, 100)
        assert info.value.oldest_scn == buf.start_scn


def test_window_larger_than_buffer_is_refused() -> None:
    buf = EventBuffer(bytearray(FILE_HEADER_SIZE + 4096))
    buf.format(0)
    with pytest.raises(WindowTooLarge, match="outside the ring"):
        buf.append(1, 0, [_event(1, 5000)])
    buf.append(2, 0, [_event(2, 10)])
    assert _read_all(buf, 0) == [2]


def test_restore_ignores_a_torn_window() -> None:
    mem = bytearray(FILE_HEADER_SIZE + 8192)
    buf = EventBuffer(mem)
    buf.format(0)
    for scn in (1, 2, 3):
        buf.append(scn, 0, [_event(scn, 100)])
    record = buf.read(2, 1)[0][0]
    at = bytes(mem).find(record)
    mem[at + 60] ^= 0xFF  # corrupt the newest window
    again = EventBuffer(mem)
    assert again.restore()
    assert _read_all(again, 0) == [1, 2] and again.max_scn == 2


def test_restore_rejects_foreign_file() -> None:
    assert not EventBuffer(bytearray(FILE_HEADER_SIZE + 4096)).restore()


def test_append_must_increase_scn() -> None:
    buf = EventBuffer(bytearray(FILE_HEADER_SIZE + 4096))
    buf.format(10)
    with pytest.raises(ValueError, match="not after"):
        buf.append(10, 0, [_event(1, 1)])


def test_restore_reports_the_windows_a_damaged_block_cut_off() -> None:
    mem = bytearray(FILE_HEADER_SIZE + 64 * 1024)
    buf = EventBuffer(mem)
    buf.format(100)
    for n in range(1, 11):
        buf.append(100 + n, 0, [_event(n, 200)])
    # Zero the fifth window's record: the four before it are valid but no longer linked.
    windows, _cursor = buf.read(104, 1, None)
    header = wire.read_window_header(windows[0])
    at = bytes(mem).find(windows[0])
    mem[at : at + header.total_len] = bytes(header.total_len)
    again = EventBuffer(mem)
    assert again.restore()
    assert again.start_scn == 105 and again.max_scn == 110 and again.window_count == 5
    assert again.dropped == (4, 101, 104)


@settings(max_examples=150, deadline=None)
@given(
    windows=st.lists(
        st.tuples(st.booleans(), st.integers(min_value=0, max_value=900)), min_size=1, max_size=80
    ),
    restore_at=st.integers(min_value=0, max_value=79),
    budget=st.integers(min_value=0, max_value=6),
)
def test_windows_held_outside_the_ring_are_counted_evicted_and_restored(
    windows: list[tuple[bool, int]], restore_at: int, budget: int
) -> None:
    """Reference records keep SCN order with inline windows; every held-outside window is
    reported once when evicted (its file may go), counts match what is held, and a restore
    from the bytes alone finds the same ones."""
    mem = bytearray(FILE_HEADER_SIZE + 4096)
    buf = EventBuffer(mem, index_block=512)
    buf.format(0)
    outside: dict[int, int] = {}  # scn -> length, every one ever appended
    evicted: list[int] = []
    floor = 0  # nothing at or before it is held (an empty restored buffer forgets it)
    for n, (external, size) in enumerate(windows):
        scn = (n + 1) * 3
        if external:
            buf.append_reference(scn, n, 1000 + n, 10_000 + n)
            outside[scn] = 10_000 + n
            while buf.external_count > budget:  # the owner's disk budget
                buf.evict_oldest()
        else:
            buf.append(scn, n, [_event(n, size)])
        evicted += buf.take_evicted()
        floor = max(floor, buf.start_scn)
        if n == restore_at:
            buf = EventBuffer(mem, index_block=512)
            assert buf.restore()
            gone = [s for s in outside if s <= buf.start_scn and s not in evicted]
            evicted += gone  # the owner's tidy(): files no window refers to any more
        floor = max(floor, buf.start_scn)
        held = {s: length for s, length in outside.items() if s > floor}
        assert dict(buf.external()) == held
        assert buf.external_count == len(held) <= max(budget, 1)
        assert buf.external_bytes == sum(held.values())
        assert sorted(evicted) == sorted(s for s in outside if s <= floor)
        assert len(set(evicted)) == len(evicted)
        spans, _ = buf.spans(buf.start_scn, 1 << 30)
        assert [s.scn for s in spans if s.external] == sorted(held)
        assert all(s.external == held[s.scn] for s in spans if s.external)
