"""A replica's checkpoint rows fenced by ownership epochs, for sink groups (``sluice.cluster``).

Each partition of a group has its own row in the checkpoint table, with the ``epoch`` it was
last taken with. The member that takes a partition first raises the row's epoch to its own
(``take``: its own transaction, before it reads the checkpoint); from then on every window's
transaction writes the checkpoint with ``WHERE epoch = mine`` and commits only if that found
the row (``write``). A member that lost the partition (paused past its session, say) finds
the row moved on and rolls back: nothing of its window lands. The row lock orders the two:
a window in flight either commits before the takeover (and the new owner reads its
checkpoint) or is refused after it.
"""

from __future__ import annotations

from typing import Any

from sluice.errors import Fenced
from sluice.sink.sql.engines import Engine

NO_CHECKPOINT = ""  # a row made by ``take`` before the partition's first window


def add_epoch_column(engine: Engine, conn: Any, table: str) -> None:
    """Checkpoint tables made before groups existed get the column (once)."""
    cur = conn.cursor()
    try:
        cur.execute(f"SELECT {engine.quote('epoch')} FROM {table} WHERE 1 = 0")
        cur.fetchall()
        conn.commit()
        return
    except Exception:  # the column is missing (each driver says so its own way)
        conn.rollback()
    cur = conn.cursor()
    cur.execute(f"ALTER TABLE {table} ADD COLUMN {engine.quote('epoch')} BIGINT NOT NULL DEFAULT 0")
    conn.commit()


def take(engine: Engine, cur: Any, table: str, name: str, epoch: int, partition: int) -> None:
    """Raise the row's epoch to ``epoch`` (made if missing); ``Fenced`` if it is higher."""
    q, p = engine.quote, engine.param
    cur.execute(
        f"UPDATE {table} SET {q('epoch')} = {p} WHERE {q('name')} = {p} AND {q('epoch')} <= {p}",
        (epoch, name, epoch),
    )
    if cur.rowcount == 1:
        return
    cur.execute(f"SELECT {q('epoch')} FROM {table} WHERE {q('name')} = {p}", (name,))
    row = cur.fetchone()
    if row is not None:
        raise Fenced(
            f"partition {partition}: its checkpoint row {name!r} holds epoch {row[0]}, newer "
            f"than this member's {epoch}: another member took it over",
            partition=partition,
        )
    cur.execute(
        f"INSERT INTO {table} ({q('name')}, {q('checkpoint')}, {q('tables')}, {q('epoch')}) "
        f"VALUES ({p}, {p}, {p}, {p})",
        (name, NO_CHECKPOINT, "[]", epoch),
    )


def write(
    engine: Engine,
    cur: Any,
    table: str,
    name: str,
    epoch: int,
    partition: int,
    values: tuple[str, str],
) -> None:
    """The checkpoint and written tables, only while the row's epoch is ``epoch``."""
    q, p = engine.quote, engine.param
    cur.execute(
        f"UPDATE {table} SET {q('checkpoint')} = {p}, {q('tables')} = {p} "
        f"WHERE {q('name')} = {p} AND {q('epoch')} = {p}",
        (*values, name, epoch),
    )
    if cur.rowcount != 1:
        raise Fenced(
            f"partition {partition}: the window was not committed: its checkpoint row "
            f"{name!r} no longer holds epoch {epoch} (another member took the partition over)",
            partition=partition,
        )
