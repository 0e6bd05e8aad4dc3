"""Property tests of the wire codecs, filters, checkpoints and SCNs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.capture.mysql.scn import make_scn, scn_file_no, scn_position
from sluice.core import wire
from sluice.core.checkpoint import (
    CatchUp,
    Online,
    Snapshot,
    decode_checkpoint,
    encode_checkpoint,
)
from sluice.core.scn import parse_scn
from sluice.errors import CheckpointError, ConfigError, DecodeError

events = st.lists(
    st.builds(
        wire.RawEvent,
        source=st.sampled_from(["a.x", "b.y", "ü.z"]),
        op=st.sampled_from(["c", "u", "d", "r"]),
        schema_version=st.integers(0, 65535),
        key_hash=st.integers(0, 2**32 - 1),
        payload=st.binary(max_size=200),
    ),
    max_size=20,
)


@given(events=events, scn=st.integers(1, 2**64 - 1), ts=st.integers(0, 2**63))
def test_window_roundtrip_and_stream_parsing(
    events: list[wire.RawEvent], scn: int, ts: int
) -> None:
    record = wire.encode_window(scn, scn - 1, ts, [wire.encode_event(e) for e in events])
    assert len(record) % 8 == 0 and wire.window_is_valid(record, 0, len(record))
    assert wire.decode_events(record) == events
    header = wire.read_window_header(record)
    assert (header.scn, header.prev_scn, header.ts_ms, header.n_events) == (
        scn,
        scn - 1,
        ts,
        len(events),
    )
    stream = record + wire.encode_heartbeat(scn) + record
    parser = wire.FrameParser()
    frames = [f for i in range(0, len(stream), 7) for f in parser.feed(stream[i : i + 7])]
    assert frames == [record, wire.Heartbeat(scn), record] and parser.pending == 0


with_truncates = st.lists(
    st.builds(
        wire.RawEvent,
        source=st.sampled_from(["a.x", "b.y", "ü.z"]),
        op=st.sampled_from(["c", "u", "d", "r", "t"]),
        schema_version=st.integers(0, 65535),
        key_hash=st.integers(0, 2**32 - 1),
        payload=st.binary(max_size=200),
    ),
    max_size=20,
)


@given(
    events=with_truncates,
    index=st.integers(0, 3),
    count=st.one_of(st.none(), st.integers(1, 4)),
    sources=st.one_of(st.none(), st.sets(st.sampled_from(["a.x", "b.y", "ü.z"]))),
)
def test_filters_keep_exactly_the_matching_events(
    events: list[wire.RawEvent], index: int, count: int | None, sources: set[str] | None
) -> None:
    record = wire.encode_window(9, 8, 0, [wire.encode_event(e) for e in events])
    partition = None if count is None else (index % count, count)
    names = None if sources is None else frozenset(s.encode() for s in sources)
    flt = wire.Filter(names, partition)
    # a truncate concerns every key: every partition keeps it
    kept = [
        e
        for e in events
        if (sources is None or e.source in sources)
        and (partition is None or e.op == "t" or e.key_hash % partition[1] == partition[0])
    ]
    result = wire.filter_window(record, flt)
    if not kept:
        assert result is None or (flt.is_open and not events)
    else:
        assert result is not None and wire.decode_events(result) == kept
        assert wire.read_window_header(result).scn == 9
        if len(kept) == len(events):
            assert result == record  # kept whole: the record itself


def test_corrupt_stream_is_an_error() -> None:
    record = bytearray(
        wire.encode_window(1, 0, 0, [wire.encode_event(wire.RawEvent("a.b", "c", 1, 0, b"x" * 20))])
    )
    record[-9] ^= 1
    with pytest.raises(DecodeError, match="checksum"):
        wire.FrameParser().feed(bytes(record))
    with pytest.raises(DecodeError, match="unknown frame"):
        wire.FrameParser().feed(b"JUNKJUNKJUNK")


@given(
    checkpoint=st.one_of(
        st.builds(Online, st.integers(0, 2**64 - 1)),
        st.builds(CatchUp, st.integers(0, 2**64 - 1)),
        st.builds(
            Snapshot, st.integers(0, 2**64 - 1), st.none() | st.text(), st.integers(-1, 2**40)
        ),
    )
)
def test_checkpoint_codec_roundtrip(checkpoint: Online | CatchUp | Snapshot) -> None:
    assert decode_checkpoint(encode_checkpoint(checkpoint)) == checkpoint


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '{"version": 1}',
        '{"version": 2, "scn": 1}',
        '{"version": 1, "phase": "online", "scn": -1}',
        '{"version": 1, "phase": "online", "scn": "7"}',
        '{"version": 1, "phase": "snapshot", "scn": 7, "row": "3"}',
        '{"version": 1, "phase": "later", "scn": 7}',
    ],
)
def test_bad_checkpoints(text: str) -> None:
    with pytest.raises(CheckpointError):
        decode_checkpoint(text)


@given(file_no=st.integers(0, 2**32 - 1), pos=st.integers(0, 2**32 - 1))
def test_scn_arithmetic(file_no: int, pos: int) -> None:
    scn = make_scn(file_no, pos)
    assert (scn_file_no(scn), scn_position(scn)) == (file_no, pos)
    assert parse_scn(str(scn)) == scn and parse_scn(f"{file_no}:{pos}") == scn


def test_design_brief_example_scn() -> None:
    assert make_scn(1, 318139) == 4295285435
    for bad in ("x", "-1", str(2**64)):
        with pytest.raises(ConfigError):
            parse_scn(bad)


def test_an_lsn_and_a_binlog_position_parse_to_their_64_bit_scns() -> None:
    assert parse_scn("16/B374D848") == 0x16 << 32 | 0xB374D848
    assert parse_scn("0/0") == 0 and parse_scn("3:4") == 3 << 32 | 4
    for bad in ("1/G", "1:2:3", "1:-2", f"1:{2**32}", "x/1", "/"):
        with pytest.raises(ConfigError):
            parse_scn(bad)
