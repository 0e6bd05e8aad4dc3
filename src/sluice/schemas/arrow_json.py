"""JSON text of many rows at once from Arrow columns (``arrow_decoder.Images``): what the
generated text decoder (``RowCodec.decode_text``) writes, one Arrow kernel per column and
piece instead of Python per value.

Each column's value text is built by Arrow (integers cast, dates and times formatted, strings
JSON-escaped by substring replacement, decimals from their digits) or, for the few kinds whose
text Arrow cannot give exactly (floats' shortest repr, base64, JSON documents, strings with
rare control characters), by the row decoder's own converter per value.
``tests/unit/test_arrow_json.py`` checks every kind against ``decode_text``.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.schemas.arrow_decoder import Images
from sluice.schemas.arrow_decoder import validity_bitmap as _validity
from sluice.schemas.avro import TableSchema
from sluice.schemas.columns import (
    KIND,
    Column,
    date_text,
    datetime_text,
    float_text,
    time_text,
    timestamp_text,
)
from sluice.schemas.compiled import load, pure_python_forced

_ENCODER = json.JSONEncoder(ensure_ascii=False)
_DAY_MICROS = 86_400_000_000
# date_text's range: 0001-01-01 .. 9999-12-31 as days since 1970
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896
# What encode_basestring escapes by name; any other control character takes the row path.
_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"),
            ("\b", "\\b"), ("\f", "\\f"))  # fmt: skip
_OTHER_CONTROL = "[\\x00-\\x07\\x0b\\x0e-\\x1f]"
_NEEDS_ESCAPE = '[\\x00-\\x1f"\\\\]'


@functools.cache
def _null() -> pa.Scalar:
    """The text ``null`` as an Arrow scalar, made on first use: Arrow's first scalar or array
    imports pandas (~0.15 s), which a process that never takes this path need not pay."""
    return pa.scalar("null")


_kernels, _MISSING = load("sluice.schemas._kernels", "the compiled column kernels")

Text = Callable[[pa.Array], pa.Array]
Texts: TypeAlias = "pa.Array | pa.Scalar"  # a column of texts, or one text for every row


def _join(*parts: pa.Array | pa.Scalar | str) -> pa.Array:
    scalars = [pa.scalar(p) if isinstance(p, str) else p for p in parts]
    joined = _compiled_join(scalars)
    if joined is not None:
        return joined
    return pc.binary_join_element_wise(*scalars, pa.scalar(""))


def _compiled_join(parts: list[pa.Array | pa.Scalar]) -> pa.Array | None:
    """``_join`` by the compiled kernel (``_kernels.c``: one pass over the rows instead of
    Arrow's per part); None where it does not apply (no array among the parts, a part not
    of ``pa.string()``, a null scalar), and the caller joins with Arrow, its reference."""
    if _kernels is None or pure_python_forced():
        return None
    arrays = [p for p in parts if isinstance(p, pa.Array)]
    if not arrays:
        return None
    n = len(arrays[0])
    spec: list[bytes | tuple[int, Any, Any, Any]] = []
    for part in parts:
        if part.type != pa.string() or (isinstance(part, pa.Array) and len(part) != n):
            return None
        if isinstance(part, pa.Scalar):
            if not part.is_valid:
                return None
            spec.append(part.as_py().encode())
            continue
        valid, offsets, data = part.buffers()
        spec.append((part.offset, valid if part.null_count else None, offsets, data or b""))
    valid, offsets, data = _kernels.concat(n, spec)
    return pa.Array.from_buffers(
        pa.string(), n, [valid and pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _quoted(text: pa.Array) -> pa.Array:
    return _join('"', text, '"')


def _pad(values: pa.Array | np.ndarray, width: int) -> pa.Array:
    return pc.utf8_lpad(pa.array(values).cast(pa.string()), width=width, padding="0")


def _per_value(convert: Callable[[Any], str]) -> Text:
    def text(arr: pa.Array) -> pa.Array:
        return pa.array([None if v is None else convert(v) for v in arr.to_pylist()], pa.string())

    return text


def _number(arr: pa.Array) -> pa.Array:
    if arr.type == pa.int64():
        valid = np.asarray(arr.is_valid()) if arr.null_count else None
        compiled = _compiled_numbers(arr, _values(arr), valid, 0, quoted=False)
        if compiled is not None:
            return compiled
    return arr.cast(pa.string())


def _compiled_numbers(
    arr: pa.Array, values: np.ndarray, valid: np.ndarray | None, scale: int, quoted: bool
) -> pa.Array | None:
    """Integers' (``scale`` 0) and decimals' texts by the compiled kernel (``_kernels.c``
    numbers): as Arrow's cast and the decimal matrices write them; None where it is not
    built (or not to be used), or for the one value it leaves to them (int64's minimum)."""
    if _kernels is None or pure_python_forced():
        return None
    written = _kernels.numbers(np.ascontiguousarray(values, np.int64), valid, scale, quoted)
    return _strings(arr, written)


def _bool(arr: pa.Array) -> pa.Array:
    return pc.if_else(pc.not_equal(arr, 0), "true", "false")


def _in_range(days: np.ndarray) -> bool:
    return bool(((days >= _MIN_DAY) & (days <= _MAX_DAY)).all())


def _values(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _date(arr: pa.Array) -> pa.Array:
    days = _values(arr)
    compiled = _compiled_dates(arr, days, True, "")
    if compiled is not None:
        return compiled
    if not _in_range(days):
        return _quoted(_per_value(date_text)(arr))  # its error, as the row path raises it
    return _fixed_text(arr, [_QUOTE, *_ymd(days), _QUOTE])


def _compiled_dates(arr: pa.Array, values: np.ndarray, days: bool, suffix: str) -> pa.Array | None:
    """The byte matrices' texts of dates (``days``) or datetimes written by the compiled
    kernel (``_kernels.c`` datetimes); None where it is not built (or not to be used) or a
    value is outside 0001..9999 (infinities: their texts are written per value)."""
    if _kernels is None or pure_python_forced():
        return None
    written = _kernels.datetimes(np.ascontiguousarray(values, np.int64), days, suffix.encode())
    return _strings(arr, written)


def _strings(arr: pa.Array, written: tuple[bytes, bytes] | None) -> pa.Array | None:
    """A kernel's (offsets, data) as a string array with ``arr``'s nulls; None if it refused."""
    if written is None:
        return None
    offsets, data = written
    validity = _validity(np.asarray(arr.is_valid())) if arr.null_count else None
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), len(arr), buffers)


def _datetime(suffix: str) -> Text:
    def text(arr: pa.Array) -> pa.Array:
        micros = _values(arr)
        compiled = _compiled_dates(arr, micros, False, suffix)
        if compiled is not None:
            return compiled
        days = np.floor_divide(micros, _DAY_MICROS)
        if not _in_range(days):
            text = timestamp_text if suffix else datetime_text  # infinity has no "Z"
            return _quoted(_per_value(text)(arr))
        seconds, frac = np.divmod(micros - days * _DAY_MICROS, 1_000_000)
        hour, rest = np.divmod(seconds, 3600)
        minute, sec = np.divmod(rest, 60)
        pieces: list[_Piece] = [_QUOTE, *_ymd(days), _byte("T"), *_digits(hour, 2), _byte(":"),
                  *_digits(minute, 2), _byte(":"), *_digits(sec, 2)]  # fmt: skip
        shown = frac != 0  # the fraction only where there is one, as isoformat()
        if shown.any():
            pieces += [(_byte("."), shown), *((d, shown) for d in _digits(frac, 6))]
        pieces += [_byte(c) for c in suffix] + [_QUOTE]
        return _fixed_text(arr, pieces)

    return text


# A text piece of every row: one byte per row (or the same byte for all), and optionally
# which rows have it. Dates and datetimes are written this way as a byte matrix, a row per
# piece, then read out row by row with one mask (Arrow's strftime costs ~1.5 us a value).
_Piece = Any  # an array or a byte, or (that, the rows that have it)
_QUOTE = np.uint8(ord('"'))


def _byte(char: str) -> np.uint8:
    return np.uint8(ord(char))


# "00".."99" as one uint16 each (the two ASCII digits in memory order)
_PAIRS = np.array([[48 + i // 10, 48 + i % 10] for i in range(100)], np.uint8).view(np.uint16)
_INT32 = np.iinfo(np.int32)


def _digits(values: np.ndarray, width: int) -> list[np.ndarray]:
    """The ASCII digits of each value, ``width`` of them (zero-padded), left to right: the
    value's last ``width`` digits (by floor division, as ``(v // 10**k) % 10``), two at a
    time from a table of the 100 pairs, in int32 where the values fit (faster division)."""
    if values.size and _INT32.min <= values.min() and values.max() <= _INT32.max:
        values = values.astype(np.int32)
    pairs: list[np.ndarray] = []
    rest = values
    for _ in range((width + 1) // 2):
        quotient = rest // 100
        pairs.append(np.take(_PAIRS, rest - quotient * 100).view(np.uint8).reshape(-1, 2))
        rest = quotient
    digits = [pair[:, i] for pair in reversed(pairs) for i in (0, 1)]
    return digits[len(digits) - width :]


def _ymd(days: np.ndarray) -> list[_Piece]:
    """YYYY-MM-DD of days since 1970 (years 1..9999), by the civil-from-days algorithm
    (H. Hinnant, "chrono-compatible low-level date algorithms")."""
    z = days + 719_468
    era = np.floor_divide(z, 146_097)
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    dash = _byte("-")
    return [*_digits(year, 4), dash, *_digits(month, 2), dash, *_digits(day, 2)]


def _fixed_text(arr: pa.Array, pieces: list[_Piece]) -> pa.Array:
    n = len(arr)
    validity = _validity(np.asarray(arr.is_valid())) if arr.null_count else None
    # A piece every row has is a plain piece; one no row has is left out.
    pieces = [p[0] if isinstance(p, tuple) and p[1].all() else p for p in pieces]
    pieces = [p for p in pieces if not isinstance(p, tuple) or p[1].any()]
    if not any(isinstance(p, tuple) for p in pieces):  # every text as long: no mask to apply
        matrix = np.empty((n, len(pieces)), dtype=np.uint8)
        for i, piece in enumerate(pieces):
            matrix[:, i] = piece
        offsets = np.arange(0, (n + 1) * len(pieces), len(pieces), dtype=np.int32)
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(matrix)]
        return pa.Array.from_buffers(pa.string(), n, buffers)
    matrix = np.empty((len(pieces), n), dtype=np.uint8)
    mask = np.ones((len(pieces), n), dtype=bool)
    for i, piece in enumerate(pieces):
        if isinstance(piece, tuple):
            matrix[i], mask[i] = piece
        else:
            matrix[i] = piece
    lengths = mask.sum(axis=0)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = matrix.T[mask.T]
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), n, buffers)


def _time(arr: pa.Array) -> pa.Array:
    micros = _values(arr)
    if (micros == np.iinfo(np.int64).min).any():  # no int64 magnitude: the row path's text
        return _quoted(_per_value(time_text)(arr))
    seconds, frac = np.divmod(np.abs(micros), 1_000_000)
    minutes, sec = np.divmod(seconds, 60)
    hours, minute = np.divmod(minutes, 60)
    sign = pc.if_else(pa.array(micros < 0), "-", "")
    fraction = pc.if_else(pa.array(frac != 0), _join(".", _pad(frac, 6)), "")
    text = _join(sign, _pad(hours, 2), ":", _pad(minute, 2), ":", _pad(sec, 2), fraction)
    return _quoted(_masked(text, arr))


def _decimal(scale: int, quoted: bool) -> Text:
    def text(arr: pa.Array) -> pa.Array:
        """Sign, integer digits (at least one), then ``scale`` fraction digits: a byte
        matrix as for datetimes, the integer part's leading zeros masked out."""
        unscaled = _unscaled(arr)
        compiled = _compiled_numbers(arr, unscaled, None, scale, quoted)
        if compiled is not None:
            return compiled
        magnitude = np.abs(unscaled)
        width = max(len(str(int(magnitude.max(initial=0)))), scale + 1)
        digits = _digits(magnitude, width)
        # digit k (from the left) is shown when it is in the fraction, the units, or below
        # the value's first nonzero digit
        shown_from = width - np.maximum(_digit_count(magnitude), scale + 1)
        pieces: list[_Piece] = [_QUOTE] if quoted else []
        pieces.append((_byte("-"), unscaled < 0))
        units = width - scale
        for k in range(units):
            pieces.append((digits[k], shown_from <= k) if k < units - 1 else digits[k])
        if scale:
            pieces += [_byte("."), *digits[units:]]
        if quoted:
            pieces.append(_QUOTE)
        return _fixed_text(arr, pieces)

    return text


_POWERS = np.array([10**k for k in range(1, 19)], dtype=np.int64)


def _digit_count(values: np.ndarray) -> np.ndarray:
    """Decimal digits of each non-negative value (1 for 0)."""
    return np.searchsorted(_POWERS, values, side="right") + 1


def _unscaled(arr: pa.Array) -> np.ndarray:
    """The int64 unscaled values of a decimal128 column (``arrow_decoder`` builds them so)."""
    data = np.frombuffer(arr.buffers()[1], dtype=np.int64)
    offset = arr.offset * 2
    return data[offset : offset + 2 * len(arr) : 2]


def _needs_escape(arr: pa.Array) -> bool:
    """Whether any text holds a control character, a quote or a backslash (its bytes at once:
    UTF-8 never has these bytes inside a longer character)."""
    if arr.type != pa.string():
        return bool(pc.any(pc.match_substring_regex(arr, _NEEDS_ESCAPE)).as_py())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[
        arr.offset : arr.offset + len(arr) + 1
    ]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]]
    return bool(((data < 0x20) | (data == 0x22) | (data == 0x5C)).any())


def _string(arr: pa.Array) -> pa.Array:
    if not len(arr) or not _needs_escape(arr):
        return _quoted(arr)  # most texts: nothing to escape
    escaped = arr
    for char, escape in _ESCAPES:
        escaped = pc.replace_substring(escaped, char, escape)
    odd = pc.match_substring_regex(escaped, _OTHER_CONTROL).fill_null(False)
    if pc.any(odd).as_py():
        rows = arr.to_pylist()
        fixed = [None if v is None else encode_basestring(v) for v in rows]
        return pa.array(fixed, pa.string())
    return _quoted(escaped)


def _masked(text: pa.Array, arr: pa.Array) -> pa.Array:
    """Nulls where the column is null (the text of a filled-in 0 is dropped)."""
    if not arr.null_count:
        return text
    return pc.if_else(arr.is_valid(), text, pa.scalar(None, pa.string()))


def _column_text(col: Column) -> Text:
    kind = KIND[col.kind]
    if kind.wire == "long":
        return {
            "date": _date,
            "datetime": _datetime(""),
            "timestamp": _datetime("Z"),
            "time": _time,
        }.get(col.kind, _bool if kind.json == "bool" else _number)
    if kind.wire == "decimal":
        if kind.json == "value":  # uint64: a bare number
            return _decimal(0, quoted=False)
        return _decimal(col.scale, quoted=True)
    if kind.wire == "string" and kind.json == "string":
        return _string
    if kind.wire == "double":
        return _per_value(float_text)  # NaN and the infinities as strings
    if kind.wire == "string":  # json: the document re-serialized, as the row path does
        return _per_value(lambda v: _ENCODER.encode(json.loads(v)))
    if kind.wire == "bytes":
        return _per_value(lambda v: '"' + base64.b64encode(v).decode("ascii") + '"')
    raise ValueError(f"no Arrow text for {col.kind}")


class ArrowJson:
    """The row, key and canonical-key JSON texts of a schema version's decoded images."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.texts = [_column_text(c) for c in schema.columns]
        names = [encode_basestring(c.name) for c in schema.columns]
        self.heads = ["{" + names[0] + ": "] + [", " + n + ": " for n in names[1:]]
        index = {c.name: i for i, c in enumerate(schema.columns)}
        self.key = [(encode_basestring(n), index[n]) for n in schema.primary_key]
        self.canonical = [(encode_basestring(n), index[n]) for n in sorted(schema.primary_key)]

    def texts_of(
        self, images: Images, canonical: bool = True, key: bool = True
    ) -> tuple[pa.Array | None, Texts, Texts, pa.Array | None]:
        """Per payload: (key, before, after, canonical key) JSON texts; ``null`` where absent
        (the key: of the after image, else the before image). An image no payload has is the
        scalar ``null``; the canonical key is None unless asked for, the key None if not."""
        before, before_row = self._image(images.before, images.has_before)
        after, after_row = self._image(images.after, images.has_after)
        if not self.key:
            nulls = pa.array(["null"] * len(images.has_after), pa.string())
            return nulls, before_row, after_row, nulls if canonical else None
        if before is None or after is None:
            keyed = [(after or before)[i] for _, i in self.key]  # type: ignore[index]
        else:
            has_after = pa.array(images.has_after)
            keyed = [pc.if_else(has_after, after[i], before[i]) for _, i in self.key]
        plain = (
            _join(*_pairs([n for n, _ in self.key], keyed, "{", ", ", ": "), "}") if key else None
        )
        if not canonical:
            return plain, before_row, after_row, None
        by_name = dict(zip((i for _, i in self.key), keyed, strict=True))
        canonical_key = _join(
            *_pairs([n for n, _ in self.canonical], [by_name[i] for _, i in self.canonical],
                    "{", ",", ":"),
            "}",
        )  # fmt: skip
        return plain, before_row, after_row, canonical_key

    def _image(
        self, columns: list[pa.Array], has: np.ndarray
    ) -> tuple[list[pa.Array] | None, Texts]:
        """The value texts of one image's columns and its row texts (None and the scalar
        ``null`` when no payload has it: inserts have no before image, deletes no after)."""
        if not has.any():
            return None, _null()
        values = [t(a).fill_null(_null()) for t, a in zip(self.texts, columns, strict=True)]
        parts = [p for head, v in zip(self.heads, values, strict=True) for p in (head, v)]
        row = _join(*parts, "}")
        if not has.all():
            row = pc.if_else(pa.array(has), row, _null())
        return values, row


def _pairs(
    names: Sequence[str], values: Sequence[pa.Array], first: str, sep: str, colon: str
) -> list[pa.Array | str]:
    out: list[pa.Array | str] = []
    for n, (name, value) in enumerate(zip(names, values, strict=True)):
        out += [(first if n == 0 else sep) + name + colon, value]
    return out


# Kinds whose canonical JSON value is a string that never needs escaping: their texts less
# the quotes are the values themselves (``value_texts``).
UNESCAPED_KINDS = frozenset({"date", "datetime", "timestamp", "time", "decimal"})


def value_texts(col: Column, arr: pa.Array) -> pa.Array:
    """``KIND[col.kind].canonical_json()`` of each value (an ISO date or time, a decimal's
    digits) for a kind in ``UNESCAPED_KINDS``; nulls stay null."""
    if col.kind not in UNESCAPED_KINDS:
        raise ValueError(f"the JSON value of {col.kind} is not a plain text")
    return pc.utf8_slice_codeunits(_column_text(col)(arr), 1, -1)


def json_strings(arr: pa.Array) -> pa.Array:
    """Texts as JSON strings (``json.dumps(v, ensure_ascii=False)``); nulls stay null."""
    return _string(arr)


def concat_texts(*parts: pa.Array | pa.Scalar | str) -> pa.Array:
    """Row by row concatenation of text columns and constants."""
    return _join(*parts)
