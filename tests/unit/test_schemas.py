"""Property tests of the Avro row codec and the JSON mapping, and the registry's versions."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sluice.schemas import Column, RowCodec, SchemaRegistry, TableSchema
from sluice.schemas.columns import canonical_converter

COLUMNS = (
    Column("id", "int", False, "bigint"),
    Column("big", "uint64", True, "bigint unsigned"),
    Column("price", "decimal", True, "decimal(12,3)", 12, 3),
    Column("name with space", "string", True, "varchar"),
    Column("raw", "bytes", True, "blob"),
    Column("day", "date", True, "date"),
    Column("at", "datetime", True, "datetime(6)"),
    Column("ts", "timestamp", True, "timestamp(6)"),
    Column("dur", "time", True, "time(6)"),
    Column("tags", "set", True, "set"),
    Column("doc", "json", True, "json"),
    Column("ratio", "double", True, "double"),
)
SCHEMA = TableSchema("db.t", 1, COLUMNS, ("id",))

row_values = st.tuples(
    st.integers(-(2**63), 2**63 - 1),
    st.none() | st.integers(0, 2**64 - 1).map(Decimal),
    st.none() | st.decimals(min_value=-(10**9) + 1, max_value=10**9 - 1, places=3, allow_nan=False),
    st.none() | st.text(max_size=20),
    st.none() | st.binary(max_size=20),
    st.none() | st.dates().map(lambda d: d.toordinal() - dt.date(1970, 1, 1).toordinal()),
    st.none() | st.integers(-(10**15), 10**15),
    st.none() | st.integers(0, 10**15),
    st.none() | st.integers(-(839 * 3600 * 10**6), 839 * 3600 * 10**6),
    st.none() | st.lists(st.sampled_from(["a", "b"]), unique=True),
    st.none() | st.sampled_from(['{"a": [1, 2]}', "[]", "3", '"s"']),
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
)


@given(before=st.none() | row_values, after=row_values)
def test_codec_roundtrip_matches_json_mapping(
    before: tuple[Any, ...] | None, after: tuple[Any, ...]
) -> None:
    codec = RowCodec(SCHEMA)
    key, got_before, got_after = codec.decode_event(codec.encode(before, after))

    def expected(row: tuple[Any, ...] | None) -> dict[str, Any] | None:
        if row is None:
            return None
        return {
            c.name: None if v is None else canonical_converter(c.kind)(v)
            for c, v in zip(COLUMNS, row, strict=True)
        }

    assert got_before == expected(before) and got_after == expected(after)
    assert key == {"id": after[0]}


def test_json_mapping_examples() -> None:
    codec = RowCodec(SCHEMA)
    row = (
        7,
        Decimal(2**64 - 1),
        Decimal("-12.500"),
        "x",
        b"\0\1",
        0,
        1_500_000,
        0,
        -(12 * 3600 + 34 * 60 + 56) * 10**6 - 789012,
        [],
        "null",
        1.5,
    )
    _, after = codec.decode(codec.encode(None, row))
    assert after == {
        "id": 7,
        "big": 2**64 - 1,
        "price": "-12.500",
        "name with space": "x",
        "raw": "AAE=",
        "day": "1970-01-01",
        "at": "1970-01-01T00:00:01.500000",
        "ts": "1970-01-01T00:00:00Z",
        "dur": "-12:34:56.789012",
        "tags": [],
        "doc": None,
        "ratio": 1.5,
    }


def test_registry_versions_persist(tmp_path: Path) -> None:
    registry = SchemaRegistry(tmp_path)
    first = registry.register("db.t", COLUMNS, ("id",))
    assert registry.register("db.t", COLUMNS, ("id",)) is first
    second = registry.register("db.t", COLUMNS[:3], ("id",))
    assert (first.version, second.version) == (1, 2)
    again = SchemaRegistry(tmp_path)
    assert [s.version for s in again.versions("db.t")] == [1, 2]
    assert again.get("db.t", 1) == first
    assert TableSchema.from_avro(first.to_avro()) == first


def test_a_schema_written_before_source_type_still_loads() -> None:
    """Older ``.avsc`` files named the source's type ``sluice.mysql_type``."""
    schema = TableSchema("shop.t", 1, (Column("id", "int", False, "int(11)"),), ("id",))
    avro = schema.to_avro()
    assert avro["fields"][0]["sluice.source_type"] == "int(11)"
    old = dict(avro, fields=[dict(avro["fields"][0])])
    old["fields"][0]["sluice.mysql_type"] = old["fields"][0].pop("sluice.source_type")
    assert TableSchema.from_avro(old) == schema


def test_a_lost_schema_version_is_never_reused(tmp_path: Path) -> None:
    """v1.avsc gone, then an ALTER: the new version comes after the highest, never a second 1
    (consumers would misread every old event)."""
    registry = SchemaRegistry(tmp_path / "schemas")
    key = (Column("id", "int", False, "int"),)
    one = registry.register("db.t", key, ("id",))
    two = registry.register("db.t", (*key, Column("v", "int", True, "int")), ("id",))
    (tmp_path / "schemas" / "db.t" / "v1.avsc").unlink()
    again = SchemaRegistry(tmp_path / "schemas")
    three = again.register("db.t", (Column("id", "int", False, "bigint"),), ("id",))
    assert (one.version, two.version, three.version) == (1, 2, 3)
    assert again.fingerprints()["db.t"]["3"] == three.fingerprint() != two.fingerprint()


def test_columns_seen_before_get_their_original_version(tmp_path: Path) -> None:
    """Events read again from the binlog (the buffer was lost) after an ALTER keep the version
    they had, never a new number for the same columns."""
    registry = SchemaRegistry(tmp_path / "schemas")
    old = (Column("id", "int", False, "int"),)
    new = (*old, Column("v", "int", True, "int"))
    assert registry.register("db.t", old, ("id",)).version == 1
    assert registry.register("db.t", new, ("id",)).version == 2
    again = SchemaRegistry(tmp_path / "schemas")
    assert again.register("db.t", old, ("id",)).version == 1
    assert again.register("db.t", new, ("id",)).version == 2
    assert len(again.versions("db.t")) == 2


@given(before=st.none() | row_values, after=st.none() | row_values)
def test_canonical_values_roundtrip(
    before: tuple[Any, ...] | None, after: tuple[Any, ...] | None
) -> None:
    """The generated canonical decoder (sinks, Debezium) gives back what was encoded."""
    from sluice.schemas.decoder import canonical_envelope

    payload = RowCodec(SCHEMA).encode(before, after)
    got = canonical_envelope(COLUMNS)(payload)
    assert got == (None if before is None else list(before), None if after is None else list(after))
