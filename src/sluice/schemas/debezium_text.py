"""Debezium's images as JSON text straight from the Avro payload, generated once per table
version: the text ``json.dumps(image, ensure_ascii=False, separators=(",", ":"))`` writes
for ``DebeziumFormatter._image``'s dict, without making the dict (issue 41: building and
dumping the envelope's dicts was half of the Kafka sink's time).

Each column is read as its canonical value (``decoder.canonical_lines``, what the dict path
reads) and written by the cheapest recipe that gives its converter's JSON: the canonical
value's own text where the converter is the identity (``int`` of an int, ``str`` of a str),
``bool``, a float's text, the converter's int (``Field.text == "int"``), the placeholder of
an unchanged TOASTed value, precise decimals from their unscaled bytes; any other column
through its converter and the JSON encoder (``value_text``). ``tests/unit/
test_debezium_text.py`` holds every recipe to the dict path, byte for byte.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from typing import Any

from sluice.schemas.codegen import run_generated
from sluice.schemas.columns import KIND, UNCHANGED_TOAST, Column, float_json, float_text
from sluice.schemas.debezium_values import Field
from sluice.schemas.decoder import canonical_env, canonical_lines

__all__ = ["ImagesText", "ascii_json", "compact", "images_text", "value_text"]

# (data, pos) -> the texts of the payload at pos: before, after ("null" when absent), the
# key's payload (None without a key), and where the payload ends
ImagesText = Callable[[bytes, int], tuple[str, str, str | None, int]]
compact: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# Precise decimals of up to this many digits are rendered here; longer ones (rare) go through
# the dict path's converter, which is exact at any size (decoder.EXACT).
_EXACT_DIGITS = 28


def value_text(value: Any) -> str:
    """A converted value's JSON text, as ``compact`` writes it (strings and ints without the
    encoder's call)."""
    kind = type(value)
    if kind is str:
        return encode_basestring(value)
    if kind is int:
        return int.__repr__(value)
    return compact(value)


def ascii_json(text: str) -> str:
    """``text`` (compact JSON) as ``json.dumps(..., separators=(",", ":"))`` writes its value
    with ``ensure_ascii`` on: tombstones have always been written so."""
    if text.isascii():
        return text
    return json.dumps(json.loads(text), separators=(",", ":"))


def _decimal_quoted(raw: bytes) -> str:
    """Debezium's precise decimal from Avro's decimal bytes at the same scale: base64 of the
    unscaled value's minimal two's complement (Java's ``BigInteger.toByteArray()``)."""
    unscaled = int.from_bytes(raw, "big", signed=True)
    minimal = unscaled.to_bytes((unscaled.bit_length() + 8) // 8, "big", signed=True)
    return '"' + base64.b64encode(minimal).decode("ascii") + '"'


def _decimal_exact(col: Column, field: Field) -> bool:
    """A precise decimal whose Avro bytes hold Debezium's unscaled value as it is."""
    kind = KIND[col.kind]
    if field.text != "decimal" or kind.wire != "decimal":
        return False
    scale, digits = (col.scale, col.precision) if kind.avro is None else (0, kind.avro["precision"])
    return field.schema["parameters"]["scale"] == str(scale) and 0 < digits <= _EXACT_DIGITS


_READ_BYTES = [
    "n = data[pos]",
    "if n < 128: n >>= 1; pos += 1",
    "else: n, pos = _L(data, pos)",
    "r = data[pos : pos + n]; pos += n",
]


class _Generator:
    """Statements per column writing the JSON text of its non-null value at ``pos`` into
    ``t<i>``."""

    def __init__(self, placeholder: str) -> None:
        self.env = canonical_env()
        self.env |= {
            "_esc": encode_basestring,
            "_float": float_text,
            "_text": value_text,
            "_dec": _decimal_quoted,
            "_TOAST": UNCHANGED_TOAST,
            "_PH": encode_basestring(placeholder),
        }

    def column(self, i: int, col: Column, field: Field) -> list[str]:
        if _decimal_exact(col, field):
            return [*_READ_BYTES, f"t{i} = _dec(r)"]
        return [*canonical_lines(i, col, self.env), f"t{i} = {self._text(i, col, field)}"]

    def _text(self, i: int, col: Column, field: Field) -> str:
        """The expression of ``v<i>``'s (its canonical value's) Debezium JSON text."""
        wire, convert, v = KIND[col.kind].wire, field.convert, f"v{i}"
        if wire == "long" and convert is int and col.kind != "bool":
            return f"str({v})"
        if wire == "long" and convert is bool:
            return f'("true" if {v} else "false")'
        if wire == "double" and convert is float_json:
            return f"_float({v})"
        if wire == "string" and convert is str:
            return f"_esc({v})"
        if wire == "string" and field.text == "toast":
            return f"(_PH if {v} == _TOAST else _esc({v}))"
        self.env[f"_c{i}"] = convert
        if field.text == "int":
            return f"str(_c{i}({v}))"
        return f"_text(_c{i}({v}))"


def _format(pairs: Sequence[tuple[str, int]]) -> str:
    """A %-format of ``{"name":%s,...}`` whose values are the texts ``t<i>``."""
    text = "{" + ",".join(encode_basestring(n).replace("%", "%%") + ":%s" for n, _ in pairs) + "}"
    values = ", ".join(f"t{i}" for _, i in pairs)
    return f"{text!r} % ({values}{',' if len(pairs) == 1 else ''})"


def images_text(
    columns: Sequence[Column],
    fields: Sequence[Field],
    key_index: Sequence[tuple[str, int]],
    placeholder: str,
    what: str,
) -> ImagesText:
    """``(data, pos) -> (before, after, key payload, end)`` of a table version's payload at
    ``pos``: the images as ``_image``'s dicts dump, "null" when absent; the key's ``{name:
    value}`` of the after image, else the before image (None when the table has no key)."""
    gen = _Generator(placeholder)
    lines = ["def row(data, pos):"]
    for i, (col, field) in enumerate(zip(columns, fields, strict=True)):
        body = gen.column(i, col, field)
        if isinstance(col.avro_type(), list):
            lines.append(f'    if data[pos] == 0: pos += 1; t{i} = "null"')
            lines += ["    else:", "        pos += 1", *(f"        {line}" for line in body)]
        else:
            lines += [f"    {line}" for line in body]
    image = _format([(col.name, i) for i, col in enumerate(columns)])
    key = _format(key_index) if key_index else "None"
    lines.append(f"    return {image}, {key}, pos")
    run_generated(lines, gen.env, f"Debezium text of {what}")
    row: Callable[[bytes, int], tuple[str, str | None, int]] = gen.env["row"]

    def envelope(data: bytes, pos: int) -> tuple[str, str, str | None, int]:
        key: str | None = None
        if data[pos]:
            before, key, pos = row(data, pos + 1)
        else:
            before, pos = "null", pos + 1
        if data[pos]:
            after, key, pos = row(data, pos + 1)
        else:
            after, pos = "null", pos + 1
        return before, after, key, pos

    return envelope
