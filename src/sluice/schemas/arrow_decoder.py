"""Canonical images of many Avro payloads at once, as Arrow columns: the inverse of
``arrow_encoder``.

``canonical_envelope`` reads one payload in Python, a few microseconds per row. Here every
payload of a batch is read in lockstep: one cursor per payload, and per column a handful of
numpy operations over all cursors (a varint's bytes are read while any cursor still has a
continuation bit; a string is its length, then its bytes gathered at once). Payloads stay
where they are (a window record's bytes): the decoder takes their start offsets, so nothing
is copied per event. ``tests/unit/test_arrow_decoder.py`` checks ``to_pylist()`` of every
column against ``canonical_envelope`` on every kind this path takes.

A column's Arrow type follows its wire form: ``long`` -> int64 (dates, times, bools: their
canonical integers), ``double`` -> float64, ``string`` -> string, ``bytes`` -> binary,
``decimal`` -> decimal128(38, scale) (its ``to_pylist()`` is the canonical ``Decimal``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sluice.schemas.avro import TableSchema
from sluice.schemas.columns import KIND
from sluice.schemas.compiled import load, pure_python_forced

# Wire forms read here; ``strings`` (SET) takes the row path.
DECODABLE_WIRES = frozenset({"long", "double", "string", "bytes", "decimal"})
_U7 = np.uint8(0x7F)
MAX_DECIMAL_DIGITS = 18  # an unscaled value within 18 digits fits an int64
_kernels, _MISSING = load("sluice.schemas._kernels", "the compiled column kernels")


class Undecodable(ValueError):
    """A batch this path cannot decode exactly (a decimal wider than 64 bits): the caller
    decodes it another way."""


def arrow_decodable(schema: TableSchema) -> bool:
    return all(KIND[c.kind].wire in DECODABLE_WIRES for c in schema.columns)


def never_undecodable(schema: TableSchema) -> bool:
    """Decodable, and no value can be too wide: every decimal column is declared within 18
    digits (BIGINT UNSIGNED and unbounded numerics may need more than 64 bits)."""
    return arrow_decodable(schema) and all(
        c.kind == "decimal" and 1 <= c.precision <= MAX_DECIMAL_DIGITS
        for c in schema.columns
        if KIND[c.kind].wire == "decimal"
    )


@dataclass(frozen=True, slots=True)
class Images:
    """The before and after images of ``n`` payloads: which payloads have each, and one
    Arrow column per schema column (null where the image is absent or the value null)."""

    has_before: np.ndarray
    has_after: np.ndarray
    before: list[pa.Array]
    after: list[pa.Array]


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at ``pos``: (int64 values, positions after them); by the compiled
    kernel (``_kernels.c``) where it is built, ``_numpy_varints`` (its reference) if not."""
    if _kernels is None or pure_python_forced() or buf.dtype != np.uint8:
        return _numpy_varints(buf, pos)
    try:
        values, ends = _kernels.varints(buf, np.ascontiguousarray(pos, dtype=np.int64))
    except ValueError as exc:
        raise Undecodable(str(exc)) from None
    return np.frombuffer(values, np.int64), np.frombuffer(ends, np.int64)


def _numpy_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    first = buf[pos]
    raw = (first & _U7).astype(np.uint64)
    end = pos + 1
    active = np.flatnonzero(first >= 0x80)
    shift = 7
    while active.size:
        if shift > 63:
            raise Undecodable("a varint longer than ten bytes")
        byte = buf[end[active]]
        raw[active] |= (byte & _U7).astype(np.uint64) << np.uint64(shift)
        end[active] += 1
        active = active[byte >= 0x80]
        shift += 7
    values = (raw >> np.uint64(1)).view(np.int64) ^ -(raw & np.uint64(1)).view(np.int64)
    return values, end


def _gather(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The bytes of every ``[start, start + length)`` range, concatenated; by the compiled
    kernel where it is built, ``_numpy_gather`` (its reference) if not."""
    if _kernels is None or pure_python_forced() or buf.dtype != np.uint8:
        return _numpy_gather(buf, starts, lengths)
    int64 = np.int64
    try:
        data = _kernels.gather(
            buf, np.ascontiguousarray(starts, int64), np.ascontiguousarray(lengths, int64)
        )
    except ValueError as exc:
        raise Undecodable(str(exc)) from None
    return np.frombuffer(data, np.uint8)


def _numpy_gather(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    total = int(lengths.sum())
    if not total:
        return np.empty(0, dtype=np.uint8)
    offsets = np.cumsum(lengths) - lengths
    index = np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)
    return buf[index]


def validity_bitmap(valid: np.ndarray) -> pa.Buffer | None:
    """Arrow's validity bitmap of a bool array (None when every value is valid)."""
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


class _Column:
    """Reads one column's values at a set of cursors, then builds its Arrow array."""

    def __init__(self, wire: str, arrow: pa.DataType, nullable: bool) -> None:
        self.wire, self.arrow, self.nullable = wire, arrow, nullable

    def read(
        self, buf: np.ndarray, rows: np.ndarray, pos: np.ndarray, n: int
    ) -> tuple[Callable[[], pa.Array], np.ndarray]:
        """Values of the payloads ``rows`` (cursors ``pos``, past their image's flag):
        (a builder of the length-``n`` column, cursors after the value)."""
        valid_rows, at = rows, pos
        end = pos.copy()
        if self.nullable:
            branch = buf[pos] != 0
            end += 1
            valid_rows, at = rows[branch], end[branch]
        valid = np.zeros(n, dtype=bool)
        valid[valid_rows] = True
        if self.wire == "double":
            values = buf[at[:, None] + np.arange(8)].copy().view("<f8").ravel()
            moved = at + 8
            build = self._fixed(valid, valid_rows, values, np.float64)
        elif self.wire == "long":
            values, moved = _varints(buf, at)
            build = self._fixed(valid, valid_rows, values, np.int64)
        else:
            lengths, starts = _varints(buf, at)
            moved = starts + lengths
            if self.wire == "decimal":
                build = self._fixed(valid, valid_rows, _unscaled(buf, starts, lengths), np.int64)
            else:
                build = self._bytes(buf, valid, valid_rows, starts, lengths)
        if self.nullable:
            end[np.flatnonzero(buf[pos] != 0)] = moved
        else:
            end = moved
        return build, end

    def _fixed(
        self, valid: np.ndarray, rows: np.ndarray, values: np.ndarray, dtype: type
    ) -> Callable[[], pa.Array]:
        def build() -> pa.Array:
            full: np.ndarray
            if len(rows) == len(valid):  # every payload has a value: in order already
                full = np.ascontiguousarray(values, dtype=dtype)
            else:
                full = np.zeros(len(valid), dtype=dtype)
                full[rows] = values
            if pa.types.is_decimal(self.arrow):
                wide = np.empty((len(full), 2), dtype=np.int64)
                wide[:, 0], wide[:, 1] = full, full >> 63  # 128-bit two's complement, LE
                data = pa.py_buffer(wide)
            else:
                data = pa.py_buffer(full)
            return pa.Array.from_buffers(self.arrow, len(full), [validity_bitmap(valid), data])

        return build

    def _bytes(
        self,
        buf: np.ndarray,
        valid: np.ndarray,
        rows: np.ndarray,
        starts: np.ndarray,
        lengths: np.ndarray,
    ) -> Callable[[], pa.Array]:
        data = _gather(buf, starts, lengths)

        def build() -> pa.Array:
            if len(rows) == len(valid):  # every payload has a value: in order already
                full = lengths
            else:
                full = np.zeros(len(valid), dtype=np.int64)
                full[rows] = lengths
            offsets = np.zeros(len(valid) + 1, dtype=np.int64)
            np.cumsum(full, out=offsets[1:])
            large = pa.large_string() if self.wire == "string" else pa.large_binary()
            buffers = [validity_bitmap(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
            return pa.Array.from_buffers(large, len(valid), buffers).cast(self.arrow)

        return build


def _unscaled(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Big-endian two's complement of 1..8 bytes -> int64 (left-aligned, then shifted back
    arithmetically: the sign extends itself)."""
    if lengths.size and (lengths.max() > 8 or lengths.min() < 1):
        raise Undecodable("a decimal wider than 64 bits")
    raw = np.zeros(len(starts), dtype=np.uint64)
    for k in range(int(lengths.max()) if lengths.size else 0):
        has = np.flatnonzero(lengths > k)
        byte = buf[starts[has] + k].astype(np.uint64)
        raw[has] |= byte << (np.uint64(8) * (np.uint64(7) - np.uint64(k)))
    shift = (np.int64(8) * (8 - lengths)).astype(np.int64)
    return raw.view(np.int64) >> shift


def _arrow_type(wire: str, scale: int) -> pa.DataType:
    return {
        "long": pa.int64(),
        "double": pa.float64(),
        "string": pa.string(),
        "bytes": pa.binary(),
        "decimal": pa.decimal128(38, scale),
    }[wire]


class ArrowDecoder:
    """Images of many payloads of one schema version."""

    def __init__(self, schema: TableSchema) -> None:
        if not arrow_decodable(schema):
            raise ValueError(f"{schema.source} has columns the Arrow path does not take")
        self.schema = schema
        self.columns = [
            _Column(
                KIND[c.kind].wire,
                _arrow_type(KIND[c.kind].wire, c.scale if KIND[c.kind].avro is None else 0),
                isinstance(c.avro_type(), list),
            )
            for c in schema.columns
        ]

    def images(self, buf: np.ndarray, starts: Sequence[int] | np.ndarray) -> Images:
        """The images of the payloads starting at ``starts`` in ``buf`` (uint8)."""
        pos = np.asarray(starts, dtype=np.int64)
        n = len(pos)
        has_before = buf[pos] != 0
        pos = pos + 1
        rows = np.flatnonzero(has_before)
        before, pos[rows] = self._row(buf, rows, pos[rows], n)
        has_after = buf[pos] != 0
        pos += 1
        rows = np.flatnonzero(has_after)
        after, _ = self._row(buf, rows, pos[rows], n)
        return Images(has_before, has_after, before, after)

    def _row(
        self, buf: np.ndarray, rows: np.ndarray, pos: np.ndarray, n: int
    ) -> tuple[list[pa.Array], np.ndarray]:
        if not rows.size:  # no payload has this image (inserts: no before; deletes: no after)
            return [pa.nulls(n, col.arrow) for col in self.columns], pos
        builders = []
        for col in self.columns:
            build, pos = col.read(buf, rows, pos, n)
            builders.append(build)
        return [build() for build in builders], pos
