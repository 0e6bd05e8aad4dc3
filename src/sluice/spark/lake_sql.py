"""The SQL of ``sluice.spark.lake`` (pure text, no Spark): one MERGE per micro-batch into a
Delta table, SCD type 1 or 2, from a view of the batch's prepared changes.

The prepared view (``lake.py`` makes it) has the table's columns plus ``_scn``, ``_op``,
``_ts`` (the ``sluice`` source's typed rows) and ``_seq`` (the change's place in the batch):
SCD1 keeps the last change per key after the batch's last truncate; SCD2 keeps every change,
each with the SCN at which the next change of its key (or a truncate) ends it (``_end_scn``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# SCD2's bookkeeping columns (Declarative Pipelines calls its pair __START_AT / __END_AT)
START_SCN, END_SCN, START_AT, END_AT, OP, CURRENT = (
    "__start_scn", "__end_scn", "__start_at", "__end_at", "__op", "__is_current",
)  # fmt: skip
SCD2_COLUMNS = (START_SCN, END_SCN, START_AT, END_AT, OP, CURRENT)
META = ("_scn", "_op", "_ts", "_seq")  # the prepared view's own columns


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def table_ref(path: str) -> str:
    """A Delta table by its path (absolute: Delta resolves relative ones elsewhere)."""
    return "delta." + quote(path)


@dataclass(frozen=True)
class MergePlan:
    target: str  # table_ref(...)
    columns: tuple[str, ...]  # the table's own columns (the batch's)
    keys: tuple[str, ...]
    truncated: bool  # the batch holds a truncate: rows it does not name go (SCD1) or close


def _on(keys: Sequence[str], left: str, right: str) -> str:
    return " AND ".join(f"{left}.{quote(k)} <=> {right}.{quote(k)}" for k in keys)


def scd1_merge(plan: MergePlan, source: str) -> str:
    """``source``: the last change per key after the batch's last truncate. A truncate in the
    batch removes every row the batch does not write again (its earlier rows went with it)."""
    sets = ", ".join(f"t.{quote(c)} = s.{quote(c)}" for c in plan.columns)
    names = ", ".join(quote(c) for c in plan.columns)
    values = ", ".join(f"s.{quote(c)}" for c in plan.columns)
    text = (
        f"MERGE INTO {plan.target} t USING {source} s ON {_on(plan.keys, 't', 's')}\n"
        "WHEN MATCHED AND s._op = 'd' THEN DELETE\n"
        f"WHEN MATCHED THEN UPDATE SET {sets}\n"
        f"WHEN NOT MATCHED AND s._op <> 'd' THEN INSERT ({names}) VALUES ({values})"
    )
    if plan.truncated:
        text += "\nWHEN NOT MATCHED BY SOURCE THEN DELETE"
    return text


def scd2_merge(plan: MergePlan, source: str, truncate: tuple[int, int] | None) -> str:
    """``source``: one closing row per key the batch changes (``_merge_key`` = the key, its
    ``_end_scn`` the first change's SCN, or the batch's first truncate if earlier) and every
    version the batch makes (``_merge_key`` null: never matched, inserted). A truncate closes
    the current versions of keys the batch does not name (``truncate``: its SCN and commit
    time in microseconds since the epoch)."""
    match = " AND ".join(
        f"t.{quote(k)} <=> s.{quote('_mk_' + k)}" for k in plan.keys
    )  # the closing rows carry the key in _mk_ columns; versions have them null
    cols = [*plan.columns, START_SCN, END_SCN, START_AT, END_AT, OP, CURRENT]
    names = ", ".join(quote(c) for c in cols)
    values = ", ".join(
        [f"s.{quote(c)}" for c in plan.columns]
        + ["s._scn", "s._end_scn", "s._ts", "s._end_at", "s._op", "s._end_scn IS NULL"]
    )
    text = (
        f"MERGE INTO {plan.target} t USING {source} s\n"
        f"ON s._closing AND t.{quote(CURRENT)} AND {match}\n"
        f"WHEN MATCHED THEN UPDATE SET t.{quote(END_SCN)} = s._end_scn, "
        f"t.{quote(END_AT)} = s._end_at, t.{quote(CURRENT)} = false\n"
        f"WHEN NOT MATCHED AND NOT s._closing THEN INSERT ({names}) VALUES ({values})"
    )
    if truncate is not None:
        scn, micros = truncate
        text += (
            f"\nWHEN NOT MATCHED BY SOURCE AND t.{quote(CURRENT)} THEN UPDATE SET "
            f"t.{quote(END_SCN)} = {int(scn)}, "
            f"t.{quote(END_AT)} = timestamp_micros({int(micros)}), t.{quote(CURRENT)} = false"
        )
    return text


def create_table(path: str, ddl: str) -> str:
    return f"CREATE TABLE IF NOT EXISTS {table_ref(path)} ({ddl}) USING delta"


__all__ = ["SCD2_COLUMNS", "MergePlan", "create_table", "quote", "scd1_merge", "scd2_merge"]
