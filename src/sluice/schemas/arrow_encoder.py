"""Avro payloads for a whole Arrow batch at once: the seed's fast path.

``RowCodec.encode`` costs microseconds per row in Python; a seed reading millions of rows
through Spark's JDBC source gets them as Arrow columns, and this module encodes every row of
a batch with numpy and Arrow kernels instead: per column, the Avro bytes of every value
(zigzag LEB128 for longs, length-prefixed bytes for strings, 8 little-endian bytes for
doubles, minimal two's complement for decimals, a union branch byte where the column is
nullable). Consecutive fixed-size values (and a string's length) are written into one byte
matrix per run and read out with one mask; a string's bytes are joined to them by one Arrow
element-wise join per row. ``tests/unit/test_arrow_encoder.py`` checks
the bytes against ``RowCodec.encode`` for every kind it takes.

Input columns hold the kind's canonical value, with one difference: a decimal column holds
its unscaled integer at the column's scale (what a SQL ``CAST(x * 10^s AS SIGNED)`` gives),
so it must fit in 64 bits (precision <= 18).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias
from zlib import crc32

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.core import wire
from sluice.schemas import arrow_frames
from sluice.schemas.avro import TableSchema, key_formatter
from sluice.schemas.columns import KIND

# Kinds whose canonical value is an integer, a float64, text or bytes, and whose wire form
# this module writes. The rest (FLOAT's shortest float32, SET, BIT, TIME...) take the row path.
ARROW_KINDS = frozenset(
    {"int", "date", "datetime", "timestamp", "double", "decimal", "string", "enum", "json"}
    | {"uuid", "inet6", "bytes", "bool"}
)
_INT_KEY_KINDS = frozenset({"int"})
MAX_DECIMAL_PRECISION = 18  # unscaled values fit an int64

_EMPTY = pa.scalar(b"", pa.binary())


class Unencodable(ValueError):
    """A batch this path cannot encode exactly (a null where the schema allows none): the
    caller encodes those rows another way."""


def arrow_encodable(schema: TableSchema) -> bool:
    """Whether every column (and the key) can take this path."""
    return arrow_refusal(schema) is None


def arrow_refusal(schema: TableSchema) -> str | None:
    """Why this path cannot take the table (a column, the key), or None when it can."""
    for col in schema.columns:
        if col.kind not in ARROW_KINDS:
            return f"column {col.name!r} is {col.source_type or col.kind}"
        if col.kind == "decimal" and max(col.precision, 1) > MAX_DECIMAL_PRECISION:
            return f"column {col.name!r} has more than {MAX_DECIMAL_PRECISION} digits"
    if not schema.primary_key:
        return "the table has no primary key"
    kinds = {c.name: c.kind for c in schema.columns}
    # A decimal key's text needs the Decimal the row path has; such tables take that path.
    decimal = next((k for k in schema.primary_key if kinds[k] == "decimal"), None)
    return None if decimal is None else f"its key column {decimal!r} is a decimal"


def _binary(lengths: np.ndarray, data: np.ndarray) -> pa.BinaryArray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))]
    return pa.BinaryArray.from_buffers(pa.binary(), len(lengths), buffers)


# A run of a row's consecutive fixed-size pieces becomes one binary column: every piece writes
# its bytes into a block of one byte matrix laid out by byte position (a matrix row per
# position, a column per table row, so each write is contiguous), a mask of the same shape
# says which bytes each row uses, and one masked read of the transposed matrix gives every
# row's bytes in order. A piece is its width and the function that fills its block and
# returns each row's byte count (None: all of its width).
_Fill = Callable[[np.ndarray], "np.ndarray | None"]
_Piece = tuple[int, _Fill]
# A nullable column's union branch before its value: None (not nullable), True (no nulls in
# the batch) or each row's validity (a null is the branch byte alone).
_Branch: TypeAlias = "bool | np.ndarray | None"
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_DECIMAL_LIMITS = np.array([1 << (8 * k - 1) for k in range(1, 8)], dtype=np.uint64)


def _varint(z: np.ndarray) -> _Piece:
    """Unsigned LEB128 of each value (uint64)."""
    lengths = (np.searchsorted(_VARINT_LIMITS, z, side="right") + 1).astype(np.uint8)
    width = int(lengths.max()) if len(z) else 1

    def fill(out: np.ndarray) -> np.ndarray:
        for k in range(width):
            byte = (z >> np.uint64(7 * k)).astype(np.uint8)
            byte &= np.uint8(0x7F)
            if k < width - 1:  # the continuation bit of every byte but a value's last
                byte |= (lengths > k + 1).view(np.uint8) << np.uint8(7)
            out[k] = byte
        return lengths

    return width, fill


def zigzag(values: np.ndarray) -> np.ndarray:
    v = values.astype(np.int64, copy=False)
    return ((v << np.int64(1)) ^ (v >> np.int64(63))).view(np.uint64)


def _ints(arr: pa.Array) -> np.ndarray:
    if pa.types.is_boolean(arr.type):  # a bool is the long 0 or 1
        arr = arr.cast(pa.int64())
    return np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _long(arr: pa.Array) -> _Piece:
    return _varint(zigzag(_ints(arr)))


def _double(arr: pa.Array) -> _Piece:
    values = np.asarray(arr.fill_null(0.0).to_numpy(zero_copy_only=False), dtype="<f8")

    def fill(out: np.ndarray) -> None:
        out[:] = values.view(np.uint8).reshape(-1, 8).T

    return 8, fill


def _decimal(arr: pa.Array) -> _Piece:
    """Avro decimal bytes of unscaled int64 values: big-endian two's complement in
    ``bit_length // 8 + 1`` bytes (as ``int.to_bytes`` in the row encoder), after their
    length (at most 8: one varint byte)."""
    values = _ints(arr)
    magnitude = np.abs(values).astype(np.uint64)
    sizes = (np.searchsorted(_DECIMAL_LIMITS, magnitude, side="right") + 1).astype(np.uint8)

    def fill(out: np.ndarray) -> np.ndarray:
        out[0] = sizes << np.uint8(1)  # zigzag of 1..8, one varint byte
        # shifted left, the value's minimal bytes lead its big-endian form
        shift = np.uint64(8) * (8 - sizes).astype(np.uint64)
        leading = (values.view(np.uint64) << shift).astype(">u8")
        out[1:] = leading.view(np.uint8).reshape(-1, 8).T
        counts: np.ndarray = sizes + np.uint8(1)
        return counts

    return 9, fill


def _length(raw: pa.Array) -> _Piece:
    lengths = np.asarray(pc.binary_length(raw).to_numpy(zero_copy_only=False), dtype=np.int64)
    return _varint(zigzag(lengths))


def _envelope(out: np.ndarray) -> None:
    out[0] = 0  # no before image
    out[1] = 2  # an after image


def _run(rows: int, run: list[tuple[_Branch, _Piece]]) -> pa.Array:
    """One binary column of a run's pieces, each after its branch."""
    width = sum(w + (branch is not None) for branch, (w, _) in run)
    matrix = np.empty((width, rows), dtype=np.uint8)
    mask = np.empty((width, rows), dtype=bool)
    total = np.zeros(rows, dtype=np.int64)
    at = 0
    for branch, (w, fill) in run:
        valid = branch if isinstance(branch, np.ndarray) else None
        if branch is not None:
            matrix[at] = 2 if valid is None else valid.view(np.uint8) << np.uint8(1)
            mask[at] = True
            total += 1
            at += 1
        lengths = fill(matrix[at : at + w])
        if lengths is None:
            mask[at : at + w] = True if valid is None else valid[None, :]
            total += w if valid is None else np.where(valid, w, 0)
        else:
            if valid is not None:
                lengths = np.where(valid, lengths, np.uint8(0))
            positions = np.arange(w, dtype=np.uint8)[:, None]
            np.less(positions, lengths[None, :], out=mask[at : at + w])
            total += lengths
        at += w
    return _binary(total, matrix.T[mask.T])


_FIXED = {"long": _long, "double": _double, "decimal": _decimal}


class ArrowEncoder:
    """Payloads (as capture writes for an insert) and canonical keys of Arrow batches whose
    columns are the schema's, in order."""

    def __init__(self, schema: TableSchema) -> None:
        if not arrow_encodable(schema):
            raise ValueError(f"{schema.source} has columns the Arrow path does not take")
        self.schema = schema
        self.nullable = [isinstance(c.avro_type(), list) for c in schema.columns]
        index = {c.name: i for i, c in enumerate(schema.columns)}
        self.key = [
            (index[name], name, schema.columns[index[name]].kind)
            for name in sorted(schema.primary_key)
        ]
        self._int_key: arrow_frames.IntKey | None = None
        if all(kind in _INT_KEY_KINDS for _, _, kind in self.key):
            self._int_key = [
                (i, ("{" if n == 0 else ",") + _json_name(name) + ":")
                for n, (i, name, _) in enumerate(self.key)
            ]

    def payloads(self, columns: Sequence[pa.Array]) -> pa.Array:
        rows = len(columns[0]) if columns else 0
        run: list[tuple[_Branch, _Piece]] = [(None, (2, _envelope))]
        parts: list[pa.Array] = []
        self._check_nulls(columns)
        for col, arr, nullable in zip(self.schema.columns, columns, self.nullable, strict=True):
            wire = KIND[col.kind].wire
            raw = None
            if wire in _FIXED:
                piece = _FIXED[wire](arr)
            else:  # its length joins the run; its bytes follow as their own part
                raw = arr.cast(pa.binary()).fill_null(b"")
                piece = _length(raw)
            branch: _Branch = None
            if nullable:
                branch = True if arr.null_count == 0 else np.asarray(arr.is_valid())
            run.append((branch, piece))
            if raw is not None:
                parts += [_run(rows, run), raw]
                run = []
        if run:
            parts.append(_run(rows, run))
        if len(parts) == 1:
            return parts[0]
        return pc.binary_join_element_wise(*parts, _EMPTY)

    def events(self, columns: Sequence[pa.Array], ops: np.ndarray) -> list[bytes]:
        """The batch's wire events: by the compiled framer where it is built
        (``arrow_frames``; it writes integer keys' text itself), else ``frame_events`` of
        ``payloads`` and ``keys``."""
        if arrow_frames.unavailable():
            return frame_events(self.schema, self.payloads(columns), self.keys(columns), ops)
        self._check_nulls(columns)
        keys: pa.Array | arrow_frames.IntKey = (
            self._int_key if self._int_key is not None else self.keys(columns)
        )
        return arrow_frames.compiled_events(self.schema, columns, self.nullable, keys, ops)

    def _check_nulls(self, columns: Sequence[pa.Array]) -> None:
        for col, arr, nullable in zip(self.schema.columns, columns, self.nullable, strict=True):
            if arr.null_count and not nullable:
                raise Unencodable(f"{self.schema.source}.{col.name} is null in a row")

    def keys(self, columns: Sequence[pa.Array]) -> pa.Array:
        """The canonical key text of each row (``RowCodec.key_text``)."""
        if self._int_key is not None:
            parts: list[Any] = []
            for i, head in self._int_key:
                text = pc.cast(columns[i], pa.string()).fill_null("null")
                parts += [pa.scalar(head), text]
            return pc.binary_join_element_wise(*parts, pa.scalar("}"), pa.scalar(""))
        formats = [(i, _json_name(name) + ":", key_formatter(kind)) for i, name, kind in self.key]
        values = [columns[i].to_pylist() for i, _, _ in formats]
        texts = [
            "{"
            + ",".join(head + fmt(v) for (_, head, fmt), v in zip(formats, row, strict=True))
            + "}"
            for row in zip(*values, strict=True)
        ]
        return pa.array(texts, pa.string())


def key_hashes(keys: pa.Array) -> np.ndarray:
    """The key hash of each canonical key text (``ArrowEncoder.keys``): its CRC-32, as every
    event's header holds it."""
    texts = keys.cast(pa.binary()).to_pylist()
    return np.fromiter(map(crc32, texts), dtype=np.uint32, count=len(texts))


_HEADER = np.dtype(wire.EVENT_HEADER_FIELDS)


def frame_events(
    schema: TableSchema, payloads: pa.Array, keys: pa.Array, ops: np.ndarray
) -> list[bytes]:
    """The wire events (``wire.encode_event``) of a batch's payloads, each hashed by its key
    text (``keys``) and tagged with its op (``ops``: one byte each, ``ord("c")``...)."""
    rows = len(payloads)
    name = schema.source.encode()
    if len(name) > 255:
        raise ValueError(f"source name too long: {schema.source!r}")
    head = np.empty(rows, dtype=_HEADER)
    lengths = pc.binary_length(payloads).to_numpy(zero_copy_only=False)
    head["size"] = wire.EVENT_HEADER_SIZE + len(name) + lengths
    head["hash"] = key_hashes(keys)
    head["op"] = ops
    head["src"] = len(name)
    head["ver"] = schema.version
    headers = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(wire.EVENT_HEADER_SIZE), rows, [None, pa.py_buffer(head.view(np.uint8))]
    ).cast(pa.binary())
    joined = pc.binary_join_element_wise(headers, pa.scalar(name, pa.binary()), payloads, b"")
    out: list[bytes] = joined.to_pylist()
    return out


def _json_name(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)
