"""A row decoder generated per table map for the common case of a row without NULLs.

Fixed-width numeric runs become one precompiled ``struct`` unpack; short strings are sliced
and decoded inline; anything else calls its column decoder. The generated function is
``row(data, pos) -> (values, pos)``; rows with NULLs take the general per-column path.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from sluice.capture.binlog import constants as t
from sluice.capture.binlog.tablemap import BinlogColumn
from sluice.capture.binlog.values import ValueDecoder, shortest_float32

FastRow = Callable[[bytes, int], tuple[list[Any], int]]

_FIXED = {
    t.T_TINY: "b",
    t.T_SHORT: "h",
    t.T_LONG: "i",
    t.T_LONGLONG: "q",
    t.T_FLOAT: "f",
    t.T_DOUBLE: "d",
    t.T_YEAR: "B",
}


def _fixed_code(col: BinlogColumn) -> str | None:
    code = _FIXED.get(col.type)
    if code is not None and col.unsigned and code in "bhiq":
        code = code.upper()
    return code


def _post(col: BinlogColumn, kind: str, name: str) -> str:
    """An expression turning the unpacked ``name`` into the canonical value."""
    if col.type == t.T_FLOAT:
        return f"_f32({name})"
    if col.type == t.T_YEAR:
        return f"({name} + 1900 if {name} else 0)"
    if kind == "uint64":
        return f"_Decimal({name})"
    return name


def _inline_string(col: BinlogColumn, codec: str | None, kind: str, i: int) -> list[str] | None:
    """Inline code for VARCHAR/CHAR text (a common hot column), or None."""
    if kind != "string" or codec not in ("utf-8", "ascii"):
        return None
    if col.type in (t.T_VARCHAR, t.T_VAR_STRING, t.T_STRING):
        if col.length < 256:
            return [
                f"n = data[pos]; v{i} = data[pos + 1 : pos + 1 + n].decode('{codec}'); pos += 1 + n"
            ]
        return [
            f"n = data[pos] | data[pos + 1] << 8; "
            f"v{i} = data[pos + 2 : pos + 2 + n].decode('{codec}'); pos += 2 + n"
        ]
    return None


def build_fast_row(
    columns: Sequence[BinlogColumn],
    kinds: Sequence[str],
    codecs: Sequence[str | None],
    decoders: Sequence[ValueDecoder],
) -> FastRow:
    env: dict[str, Any] = {"_f32": shortest_float32, "_Decimal": Decimal}
    lines = ["def row(data, pos):"]
    run: list[tuple[int, str]] = []

    def flush() -> None:
        if not run:
            return
        fmt = "<" + "".join(code for _, code in run)
        env[f"_s{run[0][0]}"] = struct.Struct(fmt)
        names = ", ".join(f"u{i}" for i, _ in run) + ("," if len(run) == 1 else "")
        lines.append(
            f"    {names} = _s{run[0][0]}.unpack_from(data, pos); pos += {struct.calcsize(fmt)}"
        )
        for i, _ in run:
            lines.append(f"    v{i} = {_post(columns[i], kinds[i], f'u{i}')}")
        run.clear()

    for i, (col, kind, codec) in enumerate(zip(columns, kinds, codecs, strict=True)):
        code = _fixed_code(col)
        if code is not None and not (kind == "uint64" and col.type != t.T_LONGLONG):
            run.append((i, code))
            continue
        flush()
        inline = _inline_string(col, codec, kind, i)
        if inline is not None:
            lines += [f"    {line}" for line in inline]
        else:
            env[f"_d{i}"] = decoders[i]
            lines.append(f"    v{i}, pos = _d{i}(data, pos)")
    flush()
    lines.append("    return [" + ", ".join(f"v{i}" for i in range(len(columns))) + "], pos")
    exec("\n".join(lines), env)
    fast: FastRow = env["row"]
    return fast
