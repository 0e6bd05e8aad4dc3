"""What a batch does to each target table, worked out without a database (pure).

A window is one transaction, so only its net effect per key matters: the changes of a keyed
table between two truncates collapse to "this row" or "gone" per key (a primary-key change is
"gone" for the old key and "this row" for the new one), which the target then applies as a
few bulk statements. Tables without a key are replayed change by change (insert; delete one
row equal to the before image).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.schemas.avro import TableSchema
from sluice.sink.target import Change


@dataclass(frozen=True, slots=True)
class Clear:
    """Every row of the table goes (a truncate, or a snapshot starting over)."""

    table: str


@dataclass(slots=True)
class KeyedChanges:
    """The net effect on one keyed table: rows to upsert (by column set) and keys to delete."""

    table: str
    key: tuple[str, ...]
    schema: TableSchema  # a version that has the key's columns (to convert deleted keys)
    rows: dict[str, tuple[TableSchema, list[Any]] | None] = field(default_factory=dict)
    key_values: dict[str, list[Any]] = field(default_factory=dict)

    def upsert(self, key: str, schema: TableSchema, row: list[Any]) -> None:
        self.rows.pop(key, None)  # the newest state goes last: statement order follows it
        self.rows[key] = (schema, row)

    def delete(self, key: str, values: list[Any]) -> None:
        self.rows.pop(key, None)
        self.rows[key] = None
        self.key_values[key] = values

    def deletes(self) -> list[list[Any]]:
        return [self.key_values[k] for k, state in self.rows.items() if state is None]

    def upserts(self) -> Iterator[tuple[TableSchema, list[list[Any]]]]:
        """Rows grouped by schema version (a window may span an ALTER)."""
        groups: dict[int, tuple[TableSchema, list[list[Any]]]] = {}
        for state in self.rows.values():
            if state is not None:
                schema, row = state
                groups.setdefault(schema.version, (schema, []))[1].append(row)
        yield from groups.values()


@dataclass(frozen=True, slots=True)
class KeylessChange:
    """One change of a table without a key, applied as it comes."""

    table: str
    schema: TableSchema
    delete: list[Any] | None  # delete one row equal to this image
    insert: list[Any] | None


Step = Clear | KeyedChanges | KeylessChange


_KEY_POSITIONS: dict[tuple[str, int, tuple[str, ...]], tuple[int, ...]] = {}


def key_values(schema: TableSchema, image: Sequence[Any]) -> list[Any]:
    where = (schema.source, schema.version, schema.primary_key)
    positions = _KEY_POSITIONS.get(where)
    if positions is None:
        index = {col.name: i for i, col in enumerate(schema.columns)}
        positions = _KEY_POSITIONS[where] = tuple(index[n] for n in schema.primary_key)
    return [image[i] for i in positions]


def plan(changes: Sequence[Change], table_of: dict[str, str]) -> list[Step]:
    """The steps of a batch in order; ``table_of`` maps a source to its target table."""
    steps: list[Step] = []
    open_keyed: dict[str, KeyedChanges] = {}
    for change in changes:
        table = table_of[change.source]
        if change.op == "t":
            open_keyed.pop(table, None)  # later changes start a new net effect after it
            steps.append(Clear(table))
            continue
        schema = change.schema
        assert schema is not None
        if not schema.primary_key:
            steps.append(KeylessChange(table, schema, change.before, change.after))
            continue
        keyed = open_keyed.get(table)
        if keyed is None:
            keyed = open_keyed[table] = KeyedChanges(table, schema.primary_key, schema)
            steps.append(keyed)
        _collapse(keyed, schema, change)
    return steps


def _collapse(keyed: KeyedChanges, schema: TableSchema, change: Change) -> None:
    before, after = change.before, change.after
    if before is not None:
        old = key_values(schema, before)
        new = key_values(schema, after) if after is not None else None
        if after is None or old != new:  # a delete, or the key changed: the old key goes
            keyed.delete(_key_text(old), old)
    if after is not None:
        keyed.upsert(_key_text(key_values(schema, after)), schema, after)


def _key_text(values: list[Any]) -> str:
    return repr(values)
