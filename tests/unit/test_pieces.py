"""``PieceParser``: big windows come out in pieces while they arrive, whatever the chunking,
and the pieces hold exactly the window's events in order; a damaged big window is refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import wire
from sluice.core.pieces import Piece, PieceParser
from sluice.errors import DecodeError


def _event(i: int, size: int) -> bytes:
    return wire.encode_event(wire.RawEvent("db.t", "c", 1, i, bytes([i % 256]) * size))


def _stream(windows: list[list[int]]) -> tuple[bytes, list[list[bytes]]]:
    body, expect = b"", []
    for n, sizes in enumerate(windows):
        events = [_event(n + i, size) for i, size in enumerate(sizes)]
        body += wire.encode_window(10 + n, 9 + n, n, events) + wire.encode_heartbeat(10 + n)
        expect.append(events)
    return body, expect


@settings(max_examples=200, deadline=None)
@given(
    windows=st.lists(
        st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=30),
        min_size=1,
        max_size=6,
    ),
    piece_bytes=st.integers(min_value=40, max_value=3000),
    chunk=st.integers(min_value=1, max_value=5000),
)
def test_pieces_hold_each_window_exactly(
    windows: list[list[int]], piece_bytes: int, chunk: int
) -> None:
    body, expect = _stream(windows)
    parser = PieceParser(piece_bytes)
    frames: list[bytes | wire.Heartbeat | Piece] = []
    for start in range(0, len(body), chunk):
        frames += parser.feed(body[start : start + chunk])
    assert parser.pending == 0
    got: list[list[bytes]] = []
    beats = 0
    for frame in frames:
        if isinstance(frame, wire.Heartbeat):
            beats += 1
            continue
        if isinstance(frame, Piece):
            header = wire.read_window_header(frame.record)
            events = [wire.encode_event(e) for e in wire.decode_events(frame.record)]
            assert wire.window_is_valid(frame.record, 0, len(frame.record))
            if frame.first_seq == 0:
                got.append([])
            assert frame.first_seq == len(got[-1])
            assert sum(map(len, events[:-1])) < piece_bytes  # cut once it holds enough
            got[-1] += events
            assert frame.last == (len(got[-1]) == len(expect[len(got) - 1]))
            assert header.scn == 10 + len(got) - 1
        else:
            assert len(frame) <= piece_bytes  # only small windows come whole
            got.append([wire.encode_event(e) for e in wire.decode_events(frame)])
    assert got == expect and beats == len(windows)


def test_a_damaged_big_window_is_refused_at_its_end() -> None:
    body, _ = _stream([[200] * 20])
    damaged = bytearray(body)
    damaged[wire.WINDOW_HEADER_SIZE + 500] ^= 1
    parser = PieceParser(1000)
    with pytest.raises(DecodeError, match="checksum"):
        parser.feed(bytes(damaged))
    parser = PieceParser(1000)
    cut = parser.feed(body[:3000])  # a cut stream: pieces so far, none the last
    assert cut and not any(isinstance(f, Piece) and f.last for f in cut) and parser.pending
