"""Debezium's JSON as text (``DebeziumFormatter.text``, ``DebeziumWindows.lines``) is byte
for byte what ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))`` writes for the
dicts of ``DebeziumFormatter.event``: every column kind MariaDB and PostgreSQL sources give,
both connectors, schemas on and off, and Debezium's options."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.capture.mysql.capture import described_source as mysql_source
from sluice.capture.postgres.capture import described_source as postgres_source
from sluice.client import RecordWindow
from sluice.core import wire
from sluice.core.checkpoint import Online
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.columns import (
    DATE_INFINITY,
    DATE_MINUS_INFINITY,
    MICROS_INFINITY,
    MICROS_MINUS_INFINITY,
    UNCHANGED_TOAST,
)
from sluice.schemas.debezium import DebeziumFormatter, DebeziumOptions, DebeziumWindows
from sluice.sink import shape
from sluice.sink.shape import Shaper, ShapeSettings

Strategy = st.SearchStrategy[Any]
_YEAR_MICROS = 365 * 86_400 * 10**6
_DAYS = st.integers(-719_162, 2_932_896)  # 0001-01-01 .. 9999-12-31
_MICROS = st.integers(-(62_135_596_800 * 10**6), 253_402_300_799 * 10**6)
_TEXT = st.text(max_size=12)


def _decimal(precision: int, scale: int) -> Strategy:
    bound = 10 ** min(precision - scale, 18) - 1
    return st.decimals(-bound, bound, places=scale, allow_nan=False)


def _ints(bits: int) -> Strategy:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


_MYSQL: list[tuple[Column, Strategy]] = [
    (Column("id", "int", False, "bigint"), _ints(64)),
    (Column("ti", "int", True, "tinyint", default="3"), _ints(8)),
    (Column("tu", "int", True, "tinyint unsigned"), st.integers(0, 255)),
    (Column("su", "int", True, "smallint unsigned"), st.integers(0, 65535)),
    (Column("mi", "int", True, "mediumint"), _ints(24)),
    (Column("iu", "int", True, "int unsigned"), st.integers(0, 2**32 - 1)),
    (Column("bu", "uint64", True, "bigint unsigned"), st.integers(0, 2**64 - 1).map(Decimal)),
    (Column("b64", "uint64", True, "bit(64)"), st.integers(0, 2**64 - 1).map(Decimal)),
    (Column("b1", "bit", True, "bit(1)"), st.integers(0, 1)),
    (Column("b9", "bit", True, "bit(9)"), st.integers(0, 511)),
    (Column("y", "year", True, "year"), st.integers(1901, 2155)),
    (Column("dc", "decimal", True, "decimal(10,2)", 10, 2, default="1.50"), _decimal(10, 2)),
    (Column("d0", "decimal", True, "decimal(28,0)", 28, 0), _decimal(28, 0)),
    (Column("dw", "decimal", True, "decimal(40,10)", 40, 10), _decimal(40, 10)),
    (Column("f", "float", True, "float"), st.floats(width=32)),
    (Column("db", "double", True, "double"), st.floats()),
    (Column("bl", "bytes", True, "blob"), st.binary(max_size=12)),
    (Column("g", "geometry", True, "geometry"), st.binary(max_size=12)),
    (Column("dt", "date", True, "date"), _DAYS),
    (
        Column("t0", "time", True, "time(0)"),
        st.integers(-3_020_399, 3_020_399).map(lambda seconds: seconds * 10**6),
    ),
    (Column("t6", "time", True, "time(6)"), st.integers(-839 * 3600 * 10**6, 839 * 3600 * 10**6)),
    (Column("m0", "datetime", True, "datetime(0)"), _MICROS),
    (Column("m3", "datetime", True, "datetime(3)"), _MICROS),
    (Column("m6", "datetime", True, "datetime(6)"), _MICROS),
    (Column("z0", "timestamp", True, "timestamp(0)"), st.integers(0, 2**31 * 10**6)),
    (Column("z6", "timestamp", True, "timestamp(6)"), st.integers(0, 2**31 * 10**6)),
    (Column("e", "enum", True, "enum"), _TEXT),
    (Column("s", "set", True, "set"), st.lists(st.sampled_from(["a", "b", "ü"]), unique=True)),
    (Column('v "%s"', "string", True, "varchar", default="x"), _TEXT),
    (Column("tx", "string", True, "text"), _TEXT),
    (Column("js", "json", True, "json"), st.sampled_from(['{"a": [1, 2]}', "[]", '"é"'])),
    (Column("uu", "uuid", True, "uuid"), st.uuids().map(str)),
    (Column("i6", "inet6", True, "inet6"), st.sampled_from(["::1", "fe80::1"])),
]
_PG_TEXT = _TEXT | st.just(UNCHANGED_TOAST)
_PG: list[tuple[Column, Strategy]] = [
    (Column("id", "int", False, "integer"), _ints(32)),
    (Column("sm", "int", True, "smallint", default="7"), _ints(16)),
    (Column("bi", "int", True, "bigint"), _ints(64)),
    (Column("o", "int", True, "oid"), st.integers(0, 2**32 - 1)),
    (Column("b", "bool", True, "boolean", default="true"), st.integers(0, 1)),
    (Column("r", "float", True, "real"), st.floats(width=32)),
    (Column("d", "double", True, "double precision"), st.floats()),
    (Column("by", "bytes", True, "bytea"), st.binary(max_size=12)),
    (
        Column("dt", "date", True, "date"),
        _DAYS | st.sampled_from([DATE_INFINITY, DATE_MINUS_INFINITY]),
    ),
    (Column("tm", "time", True, "time without time zone"), st.integers(0, 86_400 * 10**6)),
    (Column("t3", "time", True, "time(3) without time zone"), st.integers(0, 86_400 * 10**6)),
    (
        Column("ts", "datetime", True, "timestamp without time zone"),
        _MICROS | st.sampled_from([MICROS_INFINITY, MICROS_MINUS_INFINITY]),
    ),
    (Column("t3s", "datetime", True, "timestamp(3) without time zone"), _MICROS),
    (
        Column("tz", "timestamp", True, "timestamp with time zone"),
        _MICROS | st.sampled_from([MICROS_INFINITY, MICROS_MINUS_INFINITY]),
    ),
    (Column("tz3", "timestamp", True, "timestamp(3) with time zone"), _MICROS),
    (Column("u", "uuid", True, "uuid"), st.uuids().map(str)),
    (Column("j", "json", True, "json"), st.sampled_from(['{"a": 1}', '"ä"', UNCHANGED_TOAST])),
    (Column("jb", "json", True, "jsonb"), st.sampled_from(['{"a": 1}', "null", UNCHANGED_TOAST])),
    (Column("ai", "json", True, "integer[]"), st.lists(st.none() | _ints(32)).map(json.dumps)),
    (Column("at", "json", True, "text[]"), st.lists(st.none() | _TEXT).map(json.dumps)),
    (Column("af", "json", True, "double precision[]"), st.lists(st.floats()).map(json.dumps)),
    (
        Column("n", "string", True, "numeric(10,2)"),
        _decimal(8, 2).map(str) | st.sampled_from(["NaN", "Infinity", "-Infinity"]),
    ),
    (Column("nv", "string", True, "numeric"), _decimal(30, 6).map(str) | st.just("NaN")),
    (Column("mon", "string", True, "money"), st.sampled_from(["$1,234.56", "-$5.00", "$0.10"])),
    (Column("iv", "string", True, "interval"), st.sampled_from(["P1Y2M3DT4H5M6.5S", "PT0S"])),
    (Column("tt", "string", True, "time with time zone"), st.sampled_from(["10:11:12+02"])),
    (Column("bt", "string", True, "bit(3)"), st.sampled_from(["101", "000"])),
    (Column("vb", "string", True, "bit varying"), st.sampled_from(["", "1", "110010011"])),
    (Column("c", "string", True, "character(3)"), _PG_TEXT),
    (Column("tx", "string", True, "text"), _PG_TEXT),
    (Column("ip", "string", True, "inet"), st.sampled_from(["10.0.0.1/32"])),
]
_OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "decimal.handling.mode": st.sampled_from(["precise", "string", "double"]),
        "time.precision.mode": st.sampled_from(
            ["adaptive", "adaptive_time_microseconds", "connect"]
        ),
        "binary.handling.mode": st.sampled_from(["bytes", "base64", "base64-url-safe", "hex"]),
        "bigint.unsigned.handling.mode": st.sampled_from(["long", "precise"]),
        "schemas.enable": st.sampled_from(["false", "true"]),
        "provide.transaction.metadata": st.sampled_from(["false", "true"]),
        "keys": st.sampled_from(["false", "true"]),
        "tombstones.on.delete": st.sampled_from(["false", "true"]),
        "skipped.operations": st.sampled_from(["none", "t", "c,d"]),
        "unavailable.value.placeholder": st.sampled_from(["?", 'ünavailable "x"']),
    },
)
CONNECTORS = {
    "mysql": (_MYSQL, mysql_source(7, "mariadb-bin")),
    "postgresql": (_PG, postgres_source("shöp")),
}


@st.composite
def _case(draw: st.DrawFn) -> tuple[TableSchema, dict[str, Any], list[Any]]:
    """A table of some of a connector's columns (keyed or not), its source, and events."""
    columns, source = CONNECTORS[draw(st.sampled_from(sorted(CONNECTORS)))]
    picked = [columns[0], *draw(st.lists(st.sampled_from(columns[1:]), unique=True, max_size=12))]
    key = draw(st.sampled_from([("id",), (), tuple(c.name for c, _ in picked[:2])]))
    schema = TableSchema("shop.t", 1, tuple(c for c, _ in picked), key)
    image = st.tuples(*(s if not c.nullable else st.none() | s for c, s in picked))
    events = draw(
        st.lists(
            st.sampled_from("cudrt").flatmap(
                lambda op: st.tuples(
                    st.just(op),
                    st.none() if op in "crt" else image,
                    st.none() if op in "dt" else image,
                )
            ),
            min_size=1,
            max_size=6,
        )
    )
    return schema, source, events


def _record(schema: TableSchema, events: list[Any]) -> bytes:
    codec = RowCodec(schema)
    raw = []
    for seq, (op, before, after) in enumerate(events):
        payload = b"" if op == "t" else codec.encode(before, after)
        raw.append(wire.encode_event(wire.RawEvent(schema.source, op, 1, seq, payload)))
    return wire.encode_window((7 << 32) | 4_000, 1, 1_700_000_000_123, raw)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _dict_lines(stream: DebeziumWindows, record: bytes, codec_for: Any) -> list[str]:
    """``DebeziumWindows.lines`` as it was: ``json.dumps`` of ``events``' dicts."""
    keys, tombstones = stream.options.keys, stream.options.keys and stream.options.tombstones
    out = []
    for raw, key, value in stream.events(record, codec_for, with_keys=keys):
        out.append(_dumps({"key": key, "value": value} if keys else value))
        if tombstones and raw.op == "d":
            out.append(json.dumps({"key": key, "value": None}, separators=(",", ":")))
    return out


@settings(max_examples=400, deadline=None)
@given(case=_case(), options=_OPTIONS, snapshot=st.booleans())
def test_text_is_the_dicts_json_byte_for_byte(
    case: Any, options: dict[str, str], snapshot: bool
) -> None:
    schema, source, events = case
    codec = RowCodec(schema)
    codec_for = lambda _source, _version: codec  # noqa: E731
    record = _record(schema, events)
    stream = DebeziumWindows(source, DebeziumOptions.parse(options, name="ïnventory"))
    assert list(stream.lines(record, codec_for)) == _dict_lines(stream, record, codec_for)
    header = wire.read_window_header(record)
    for raw, formatter, op, tx in stream._walk(record, codec_for, "r" if snapshot else None):
        payload = None if raw.op == "t" else raw.payload
        for with_key in (False, True):
            key, value = formatter.event(op, payload, header.scn, header.ts_ms, tx, with_key)
            expected = (None if key is None else _dumps(key)), _dumps(value)
            assert formatter.text(op, payload, header.scn, header.ts_ms, tx, with_key) == expected


def test_the_benchmark_table_takes_no_converter_calls() -> None:
    """The common kinds (the benchmarks' table) are written without their converters."""
    schema = TableSchema("bench.t", 1, tuple(c for c, _ in _MYSQL[:14]), ("id",))
    formatter = DebeziumWindows(mysql_source(1, "b"), DebeziumOptions()).formatter(
        schema.source, 1, lambda _s, _v: RowCodec(schema)
    )
    row = [1, 2, 3, 4, 5, 6, Decimal(7), Decimal(8), 1, 9, 1999, Decimal("1.25"), Decimal(3), None]
    key, value = formatter.text("c", RowCodec(schema).encode(None, row), 5, 6, None, True)
    assert key == '{"id":1}'
    assert json.loads(value)["after"]["dc"] == "fQ=="  # 125 unscaled


@settings(max_examples=80, deadline=None)
@given(case=_case(), options=_OPTIONS, message_keys=st.booleans(), bulk=st.booleans())
def test_the_shapers_bodies_are_the_dicts_json(
    case: Any, options: dict[str, str], message_keys: bool, bulk: bool
) -> None:
    """The sink's changes (bodies, keys, ids): from the text, per event or per window
    (``bulk``: ``Shaper._debezium_changes``), as they were from the dicts per event."""
    schema, source, events = case
    codec = RowCodec(schema)
    record = _record(schema, events)
    header = wire.read_window_header(record)
    window = RecordWindow(
        header.scn, header.ts_ms, record, lambda _s, _v: codec, 0, True, Online(header.scn)
    )
    settings_ = ShapeSettings(
        format="debezium", debezium=tuple(options.items()), message_keys=message_keys
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shape, "BULK_EVENTS", 1 if bulk else 10**9)
        texts = Shaper(settings_, source).batch(window).changes

    def dicts(formatter: DebeziumFormatter, *args: Any) -> tuple[str | None, str]:
        key, value = formatter.event(*args)
        return (None if key is None else _dumps(key)), _dumps(value)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DebeziumFormatter, "text", dicts)
        patch.setattr(shape, "BULK_EVENTS", 10**9)
        expected = Shaper(settings_, source).batch(window).changes
    assert texts == expected
