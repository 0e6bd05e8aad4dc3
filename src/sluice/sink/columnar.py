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
        self, record: bytes, scn: int, ts_ms: int, starts: list[int], ops: list[str], keys: bool
    ) -> tuple[list[bytes], list[str] | None]:
        """(bodies, canonical keys if ``keys``) in the order of ``starts``; ``Undecodable``
        passes."""
        images = self.decoder.images(np.frombuffer(record, dtype=np.uint8), starts)
        key, before, after, canonical = self.texts.texts_of(images, canonical=keys)
        tail = f', "ts_ms": {ts_ms}, "schema_version": {self.schema.version}}}'
        parts = [
            pa.scalar(f'{{"scn": {scn}{self.source}'), pa.array(ops, pa.string()),
            pa.scalar('", "key": '), key, pa.scalar(', "before": '), before,
            pa.scalar(', "after": '), after, pa.scalar(tail),
        ]  # fmt: skip
        lines = pc.binary_join_element_wise(*parts, pa.scalar(""))
        texts = canonical.to_pylist() if canonical is not None else None
        return lines.cast(pa.binary()).to_pylist(), texts
