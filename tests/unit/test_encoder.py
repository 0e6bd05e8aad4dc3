"""The specialised Avro encoder writes exactly what fastavro reads (and writes)."""

from __future__ import annotations

import io
from typing import Any

import fastavro
from hypothesis import given
from hypothesis import strategies as st

from sluice.schemas import RowCodec
from sluice.schemas.encoder import varint
from tests.unit.test_schemas import COLUMNS, SCHEMA, row_values


def _fastavro_bytes(codec: RowCodec, before: Any, after: Any) -> bytes:
    names = [f["name"] for f in SCHEMA.to_avro()["fields"]]

    def record(row: Any) -> Any:
        return None if row is None else dict(zip(names, row, strict=True))

    out = io.BytesIO()
    fastavro.schemaless_writer(
        out,
        fastavro.parse_schema(codec.envelope_schema()),
        {"before": record(before), "after": record(after)},
    )
    return out.getvalue()


@given(before=row_values, after=row_values)
def test_encoder_agrees_with_fastavro(before: tuple[Any, ...], after: tuple[Any, ...]) -> None:
    codec = RowCodec(SCHEMA)
    ours = codec.encode(before, after)
    reference = _fastavro_bytes(codec, before, after)
    assert codec.decode(ours) == codec.decode(reference)
    assert len(COLUMNS) == len(after)


@given(row=row_values)
def test_key_text_is_canonical_json(row: tuple[Any, ...]) -> None:
    import json

    codec = RowCodec(SCHEMA)
    key, _, _ = codec.decode_event(codec.encode(None, row))
    assert codec.key_text(row) == json.dumps(
        key, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


@given(n=st.integers(0, 2**64 - 1))
def test_varint_is_leb128(n: int) -> None:
    expected, value = bytearray(), n
    while value >= 0x80:
        expected.append((value & 0x7F) | 0x80)
        value >>= 7
    expected.append(value)
    assert varint(n) == bytes(expected)
