"""SQL for MySQL/MariaDB key ranges, shared by seeding's row path (``seed.py``) and its
JDBC path (``bulk.py``): quoted names and the WHERE clause of a ``KeyRange``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sluice.capture.seeding import KeyRange
from sluice.core.names import split_source


def q(name: str) -> str:
    """A quoted identifier for a query run with arguments (``%`` doubled for PyMySQL)."""
    return "`" + name.replace("`", "``").replace("%", "%%") + "`"


def table_ref(source: str) -> str:
    schema, table = split_source(source)
    return f"{q(schema)}.{q(table)}"


def _after(columns: Sequence[str], strict: bool) -> str:
    """``(a,b,c) > (%s,%s,%s)`` (or ``<=``) spelled out so the optimizer uses a range scan."""
    parts = []
    for i, name in enumerate(columns):
        last = i == len(columns) - 1
        op = (">" if strict else "<=") if last else (">" if strict else "<")
        eqs = [f"{q(c)} = %s" for c in columns[:i]]
        parts.append("(" + " AND ".join([*eqs, f"{q(name)} {op} %s"]) + ")")
    return "(" + " OR ".join(parts) + ")"


def _bound_args(values: tuple[Any, ...]) -> list[Any]:
    args: list[Any] = []
    for i in range(len(values)):
        args += [*values[:i], values[i]]
    return args


def range_condition(key: Sequence[str], bounds: KeyRange) -> tuple[str, list[Any]]:
    """The WHERE clause (and its bound arguments) of a key range."""
    clauses, args = [], []
    if bounds.lower is not None:
        clauses.append(_after(key, strict=True))
        args += _bound_args(bounds.lower)
    if bounds.upper is not None:
        clauses.append(_after(key, strict=False))
        args += _bound_args(bounds.upper)
    return " AND ".join(clauses) or "TRUE", args
