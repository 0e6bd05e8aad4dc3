"""Wire events of an Arrow batch by the compiled framer (``_frames.c``).

``ArrowEncoder.events`` takes it where it is built: one C loop writes every row's payload,
frame and key hash, where the numpy path (``payloads`` then ``frame_events``, which stays
the reference and the fallback; ``tests/unit/test_arrow_frames.py`` compares them) makes an
Arrow array per column run and a Python bytes per key. Columns are cast here to what each
Avro wire form reads: int64 for longs (bools, dates, times) and decimals' unscaled values,
float64 for doubles, binary for text and bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sluice.schemas.avro import TableSchema
from sluice.schemas.columns import KIND
from sluice.schemas.compiled import load, pure_python_forced

_frames, _MISSING = load("sluice.schemas._frames", "the compiled event framer")

_WIRES = {"long": (1, pa.int64()), "double": (2, pa.float64()), "decimal": (3, pa.int64())}
_BYTES = (4, pa.binary())

Column = tuple[int, int, int, pa.Buffer | None, pa.Buffer, pa.Buffer | None]
IntKey = Sequence[tuple[int, str]]  # (column, its JSON prefix) of integer key columns


def unavailable() -> str:
    """Why batches are framed by the numpy path ('' when the compiled framer frames them)."""
    return _MISSING or pure_python_forced()


def compiled_events(
    schema: TableSchema,
    columns: Sequence[pa.Array],
    nullable: Sequence[bool],
    keys: pa.Array | IntKey,
    ops: np.ndarray,
) -> list[bytes]:
    """The batch's wire events (each an insert's payload, hashed by its key text, tagged with
    its op), as ``frame_events(schema, payloads(columns), keys, ops)`` gives them. ``keys``:
    each row's key text, or the integer key columns whose text the framer writes itself
    (``(column, '{"name":')``... in the key's order, as ``ArrowEncoder.keys`` writes it)."""
    assert _frames is not None
    prepared = [
        _column(c.kind, a, n) for c, a, n in zip(schema.columns, columns, nullable, strict=True)
    ]
    source = schema.source.encode()
    rows = len(columns[0]) if columns else 0
    spec: tuple[Any, ...]
    if isinstance(keys, pa.Array):
        key = keys.cast(pa.binary())
        buffers = key.buffers()
        spec = ("text", key.offset, None, buffers[1], buffers[2])
    else:
        spec = ("ints", tuple((i, prefix.encode()) for i, prefix in keys))
    ops = np.ascontiguousarray(ops, dtype=np.uint8)
    events: list[bytes] = _frames.frames(prepared, rows, spec, ops, source, schema.version)
    return events


def _column(kind: str, arr: pa.Array, nullable: bool) -> Column:
    code, target = _WIRES.get(KIND[kind].wire, _BYTES)
    if arr.type != target:
        arr = arr.cast(target)
    buffers = arr.buffers()
    valid = buffers[0] if arr.null_count else None
    data = buffers[2] if len(buffers) > 2 else None
    return (code, int(nullable), arr.offset, valid, buffers[1], data)
