"""A whole window's row changes as spans of its record, per table: what a table target
decodes in bulk (``schemas.arrow_decoder``) instead of taking one ``Change`` per event.

Only windows that need nothing per event take this form: whole windows (not pieces), no
truncate, every table keyed, decodable by the Arrow path and without a filter. Anything else
is shaped event by event, and a target that cannot use a columnar window (it needs DDL, or
starts a snapshot) asks for those ``Change``s instead (``Columnar.rows``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sluice.core import wire
from sluice.core.event import TRUNCATE
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
