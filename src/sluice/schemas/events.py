"""Turning window records into events, given a way to find each schema version's codec."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from sluice.core import wire
from sluice.core.event import Event, JsonWindow, Window
from sluice.schemas.avro import RowCodec

CodecLookup = Callable[[str, int], RowCodec]


def decode_window(record: bytes, codec_for: CodecLookup) -> Window:
    header = wire.read_window_header(record)
    events = []
    for raw in wire.decode_events(record):
        if raw.op == "t":  # a truncate: no key, no images
            key = before = after = None
        else:
            codec = codec_for(raw.source, raw.schema_version)
            key, before, after = codec.decode_event(raw.payload)
        events.append(
            Event(
                scn=header.scn,
                source=raw.source,
                op=raw.op,
                key=key,
                before=before,
                after=after,
                ts_ms=header.ts_ms,
                schema_version=raw.schema_version,
            )
        )
    return Window(header.scn, header.ts_ms, tuple(events))


def window_json(record: bytes, codec_for: CodecLookup) -> JsonWindow:
    """A window record as JSON lines, straight from Avro to text (``sluice tail``'s path)."""
    header = wire.read_window_header(record)
    return JsonWindow(header.scn, header.ts_ms, tuple(json_lines(record, codec_for)))


def json_lines(record: bytes, codec_for: CodecLookup) -> Iterator[str]:
    """The window's events as JSON lines (no newline), one at a time: what
    ``json.dumps(event.to_json_dict(), ensure_ascii=False)`` gives, without the events."""
    header = wire.read_window_header(record)
    scn, ts = f'{{"scn": {header.scn}, "source": ', f', "ts_ms": {header.ts_ms}, "schema_version": '
    for raw in wire.decode_events(record):
        if raw.op == "t":
            key = before = after = "null"
        else:
            key, before, after = codec_for(raw.source, raw.schema_version).decode_text(raw.payload)
        yield (
            f'{scn}{_source_text(raw.source)}, "op": "{raw.op}", "key": {key}, '
            f'"before": {before}, "after": {after}{ts}{raw.schema_version}}}'
        )


def json_line(scn: int, ts_ms: int, raw: wire.RawEvent, key: str, before: str, after: str) -> str:
    """One event's JSON line from its parts' JSON texts: what ``json_lines`` yields (which
    builds the same text with its window's parts made once)."""
    return (
        f'{{"scn": {scn}, "source": {_source_text(raw.source)}, "op": "{raw.op}", "key": {key}, '
        f'"before": {before}, "after": {after}, "ts_ms": {ts_ms}, '
        f'"schema_version": {raw.schema_version}}}'
    )


_sources: dict[str, str] = {}


def _source_text(source: str) -> str:
    text = _sources.get(source)
    if text is None:
        text = _sources[source] = json.dumps(source, ensure_ascii=False)
    return text
