"""A whole window's row changes as spans of its record, per table: what a table target
decodes in bulk (``schemas.arrow_decoder``) instead of taking one ``Change`` per event.

Only windows that need nothing per event take this form: whole windows (not pieces), no
truncate, every table keyed, decodable by the Arrow path and without a filter. Anything else
is shaped event by event, and a target that cannot use a columnar window (it needs DDL, or
starts a snapshot) asks for those ``Change``s instead (``Columnar.rows``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.core import wire
from sluice.core.event import TRUNCATE
from sluice.schemas.arrow_decoder import ArrowDecoder
from sluice.schemas.arrow_json import ArrowJson
from sluice.schemas.avro import TableSchema
from sluice.sink.target import Change


@dataclass(frozen=True, slots=True)
class TablePart:
    """One table version's events in a window: where their payloads start in the record."""

    source: str
    full: TableSchema  # the version's columns, as the payloads hold them
    schema: TableSchema  # the selected columns (what the target writes)
    keep: tuple[int, ...]  # indexes of the selected columns in ``full``
    route: str
    starts: np.ndarray  # int64 offsets of the payloads in the record, in event order


@dataclass(frozen=True, slots=True)
class Columnar:
    record: bytes
    parts: tuple[TablePart, ...]
    events: int
    rows: Callable[[], tuple[Change, ...]]  # the same window shaped event by event


def payload_spans(record: bytes) -> tuple[dict[tuple[str, int], list[int]], int] | None:
    """The payload starts of each (source, schema version), in event order, and the number
    of events, reading headers only; None when the window holds a truncate (a table target
    applies it in order, event by event)."""
    header = wire.read_window_header(record)
    unpack, head = wire.EVENT_HEADER.unpack_from, wire.EVENT_HEADER_SIZE
    spans: dict[tuple[bytes, int], list[int]] = {}
    pos = wire.WINDOW_HEADER_SIZE
    for _ in range(header.n_events):
        size, _hash, op, src_len, version = unpack(record, pos)
        if op == TRUNCATE or size < head + src_len:
            return None
        start = pos + head + src_len
        table = (record[pos + head : start], version)
        starts = spans.get(table)
        if starts is None:
            starts = spans[table] = []
        starts.append(start)
        pos += size
    by_name = {(raw.decode(), version): starts for (raw, version), starts in spans.items()}
    return by_name, header.n_events


@dataclass(frozen=True, slots=True)
class EventSpans:
    """A window's row events, reading headers only: its table versions, and per table the
    payload starts and ops of its events; ``order`` says whose each event is."""

    tables: list[tuple[str, int]]
    starts: list[list[int]]
    ops: list[list[str]]
    order: list[int]  # per event, its table's number (empty with one table)


_LETTERS = [chr(i) for i in range(256)]


def event_spans(record: bytes) -> EventSpans | None:
    """None when the window holds a truncate (shaped event by event)."""
    header = wire.read_window_header(record)
    unpack, head = wire.EVENT_HEADER.unpack_from, wire.EVENT_HEADER_SIZE
    numbers: dict[tuple[bytes, int], int] = {}
    starts: list[list[int]] = []
    ops: list[list[str]] = []
    order: list[int] = []
    last, last_version, number = b"", -1, -1
    pos = wire.WINDOW_HEADER_SIZE
    for _ in range(header.n_events):
        size, _hash, op, src_len, version = unpack(record, pos)
        if op == TRUNCATE or size < head + src_len:
            return None
        start = pos + head + src_len
        # most events are of the table before them: compared in place, no slice
        if not (
            version == last_version and src_len == len(last) and record.startswith(last, pos + head)
        ):
            last, last_version = record[pos + head : start], version
            number = numbers.get((last, version), -1)
            if number < 0:
                number = numbers[(last, version)] = len(starts)
                starts.append([])
                ops.append([])
                if number == 1:  # a second table: from now on, say whose each event is
                    order = [0] * len(starts[0])
        starts[number].append(start)
        ops[number].append(_LETTERS[op])
        if len(starts) > 1:
            order.append(number)
        pos += size
    tables = [(raw.decode(), version) for raw, version in numbers]
    return EventSpans(tables, starts, ops, order)


class JsonBodies:
    """Sluice JSON lines (what ``schemas.events.json_line`` writes) and canonical keys of
    one table version's payloads in a window, built with Arrow."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.decoder = ArrowDecoder(schema)
        self.texts = ArrowJson(schema)
        source = json.dumps(schema.source, ensure_ascii=False)
        self.source = f', "source": {source}, "op": "'

    def lines(
        self, record: bytes, scn: int, ts_ms: int, starts: list[int], ops: list[str]
    ) -> tuple[list[bytes], list[str]]:
        """(bodies, canonical keys) in the order of ``starts``; ``Undecodable`` passes."""
        images = self.decoder.images(np.frombuffer(record, dtype=np.uint8), starts)
        key, before, after, canonical = self.texts.texts_of(images)
        tail = f', "ts_ms": {ts_ms}, "schema_version": {self.schema.version}}}'
        parts = [
            pa.scalar(f'{{"scn": {scn}{self.source}'), pa.array(ops, pa.string()),
            pa.scalar('", "key": '), key, pa.scalar(', "before": '), before,
            pa.scalar(', "after": '), after, pa.scalar(tail),
        ]  # fmt: skip
        lines = pc.binary_join_element_wise(*parts, pa.scalar(""))
        return lines.cast(pa.binary()).to_pylist(), canonical.to_pylist()
