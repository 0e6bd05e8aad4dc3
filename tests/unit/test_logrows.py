"""The bootstrap log's fast reader gives exactly the generic reader's rows (raw, no images)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.core import wire
from sluice.errors import DecodeError
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.spark import logcols
from sluice.spark.logcols import Events
from sluice.spark.logrows import LogRows
from sluice.spark.rows import GenericRows

SCHEMAS = {
    ("db.a", 1): TableSchema("db.a", 1, (Column("id", "int", False, "int"),), ("id",)),
    ("db.a", 2): TableSchema(
        "db.a", 2, (Column("id", "int", False, "int"), Column("v", "string", True, "text")), ("id",)
    ),
    ("db.c", 1): TableSchema(  # an integer key that does not lead the row
        "db.c", 1, (Column("v", "string", True, "text"), Column("id", "int", False, "int")), ("id",)
    ),
    ("db.b", 1): TableSchema(
        "db.b",
        1,
        (Column("k", "string", False, "varchar"), Column("n", "int", True, "int")),
        ("n", "k"),
    ),
}
CODECS = {k: RowCodec(v) for k, v in SCHEMAS.items()}

event = st.one_of(
    st.tuples(st.just(("db.a", 1)), st.sampled_from("cud"), st.integers(-(1 << 40), 1 << 40)),
    st.tuples(st.just(("db.a", 2)), st.sampled_from("cu"), st.integers(-(1 << 62), 1 << 62)),
    st.tuples(st.just(("db.b", 1)), st.sampled_from("cd"), st.integers(-300, 3_000_000)),
    st.tuples(st.just(("db.b", 1)), st.just("t"), st.just(0)),
    st.tuples(st.just(("db.c", 1)), st.sampled_from("cud"), st.integers(-(1 << 62), 1 << 62)),
)


def _raw(spec: tuple[tuple[str, int], str, int]) -> bytes:
    (source, version), op, n = spec
    if op == "t":
        return wire.encode_event(wire.RawEvent(source, "t", version, 0, b""))
    row = {
        "db.a": [n] if version == 1 else [n, f"v{n}"],
        "db.b": [f"k{n}", n],
        "db.c": [f"v{n}", n],
    }[source]
    # an update of db.a carries both images (the key unchanged), as capture gives them
    before = row if op == "d" or (op == "u" and source == "db.a") else None
    payload = CODECS[(source, version)].encode(before, None if op == "d" else row)
    return wire.encode_event(wire.RawEvent(source, op, version, n & 0xFFFF, payload))  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(event, min_size=1, max_size=12), min_size=1, max_size=6))
def test_fast_rows_equal_generic_rows(
    windows: list[list[tuple[tuple[str, int], str, int]]],
) -> None:
    records = [
        wire.encode_window(100 + i, 99 + i, 1_700_000_000_000 + i, [_raw(e) for e in events])
        for i, events in enumerate(windows)
    ]
    for op in (None, "r"):
        fast, generic = LogRows(op), GenericRows(True, op, images=False)
        for record in records:
            fast.add_window(record, lambda s, v: CODECS[(s, v)])
            generic.add_window(record, lambda s, v: CODECS[(s, v)])
        assert fast.batch().to_pylist() == generic.batch().to_pylist()


def test_leading_integer_keys_are_read_vectorized() -> None:
    """Inserts and deletes of a table keyed by a leading integer take the vectorized path,
    extremes included; its keys equal the key reader's."""
    values = [0, -1, 1, 63, -64, 64, 1 << 40, -(1 << 63), (1 << 63) - 1]
    specs = [(("db.a", 1), op, n) for n in values for op in "cd"]
    record = wire.encode_window(7, 6, 1_700_000_000_000, [_raw(s) for s in specs])
    events = Events([record])
    codec = CODECS[("db.a", 1)]
    found = events._fast_keys(codec, np.arange(len(specs)))
    assert found is not None
    index, texts = found
    assert index.tolist() == list(range(len(specs)))
    assert texts.to_pylist() == [f'{{"id":{n}}}' for n in values for _op in "cd"]


def test_a_corrupt_event_record_is_a_decode_error() -> None:
    good = _raw((("db.a", 1), "c", 5))
    bad_op = good[:8] + b"x" + good[9:]
    too_long = (len(good) + 100).to_bytes(4, "little") + good[4:]
    for event in (bad_op, too_long):
        record = wire.encode_window(7, 6, 0, [event])
        with pytest.raises(DecodeError, match="corrupt event record"):
            Events([record])


def _scans(records: list[bytes]) -> tuple[logcols.Scan, logcols.Scan]:
    buf = b"".join(records)
    u8 = np.frombuffer(buf + bytes(10), np.uint8)
    return logcols._scan(buf, u8, records), logcols._python_scan(buf, u8, records)


@pytest.mark.skipif(
    logcols._events is None and os.environ.get("CI") != "true",  # under CI: a failure
    reason="the compiled event scanner is not built",
)
@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(event, min_size=0, max_size=12), min_size=1, max_size=6))
def test_the_compiled_scan_equals_its_python_reference(
    windows: list[list[tuple[tuple[str, int], str, int]]],
) -> None:
    """Offsets, headers, names in order of appearance and each event's name index, windows
    without events included."""
    records = [
        wire.encode_window(100 + i, 99 + i, 0, [_raw(e) for e in events])
        for i, events in enumerate(windows)
    ]
    compiled, reference = _scans(records)
    assert compiled[0] == reference[0]
    assert compiled[3] == reference[3]
    for at in (1, 2, 4):  # offsets, headers, name indices
        mine, theirs = compiled[at], reference[at]
        assert isinstance(mine, np.ndarray) and isinstance(theirs, np.ndarray)
        assert mine.dtype == theirs.dtype
        assert mine.tolist() == theirs.tolist()


@pytest.mark.skipif(
    logcols._events is None and os.environ.get("CI") != "true",  # under CI: a failure
    reason="the compiled event scanner is not built",
)
def test_the_compiled_scan_refuses_events_past_their_window() -> None:
    good = _raw((("db.a", 1), "c", 5))
    for size in (len(good) + 100, 1 << 31, 13):
        record = wire.encode_window(7, 6, 0, [size.to_bytes(4, "little") + good[4:]])
        cut = record[: wire.WINDOW_HEADER_SIZE + 5]  # a header cut short, as a bad count gives
        for records in ([record], [cut, record]):
            with pytest.raises(DecodeError, match="corrupt event record"):
                Events(records)


def test_pure_python_events_equal_compiled_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = [(("db.a", 1), "c", 1), (("db.b", 1), "c", 2), (("db.a", 2), "u", 3)]
    record = wire.encode_window(7, 6, 0, [_raw(s) for s in specs])
    compiled = Events([record, record])
    monkeypatch.setenv("SLUICE_PURE_PYTHON", "1")
    reference = Events([record, record])
    assert compiled.names == reference.names == [b"db.a", b"db.b"]
    for name in ("offsets", "name_index", "op", "key_hash", "version", "payload_start"):
        assert getattr(compiled, name).tolist() == getattr(reference, name).tolist()
