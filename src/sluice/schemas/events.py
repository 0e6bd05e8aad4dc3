"""Turning window records into events, given a way to find each schema version's codec."""

from __future__ import annotations

from collections.abc import Callable

from sluice.core import wire
from sluice.core.event import Event, Window
from sluice.schemas.avro import RowCodec

CodecLookup = Callable[[str, int], RowCodec]


def decode_window(record: bytes, codec_for: CodecLookup) -> Window:
    header = wire.read_window_header(record)
    events = []
    for raw in wire.decode_events(record):
        codec = codec_for(raw.source, raw.schema_version)
        before, after = codec.decode(raw.payload)
        events.append(
            Event(
                scn=header.scn,
                source=raw.source,
                op=raw.op,
                key=codec.key_of(after if after is not None else before),
                before=before,
                after=after,
                ts_ms=header.ts_ms,
                schema_version=raw.schema_version,
            )
        )
    return Window(header.scn, header.ts_ms, tuple(events))
