"""A replica fed by one key partition of the stream (``partition=I/N``, a group's member):
a truncate, or a snapshot starting over, clears only the rows of its own partition.

A truncate reaches every partition (it concerns every key), and each partition's sink applies
it when its own stream gets there: deleting the whole table would take rows the other
partitions wrote after the truncate. A row's partition is the one its key hashes to, as
capture hashes it (``crc32`` of the key's canonical text, modulo N), so the sink reads the
table's keys, hashes their text and deletes those of its partition. A table without a key is
partition 0's (``wire.KEYLESS_HASH``): that partition clears it whole, the others leave it.

The key text is exact for the kinds whose replica value is the canonical value (integers and
text); another key kind (a decimal, a date, binary) would be hashed from a value that may not
be capture's, so such a table stops the sink with a clear error instead of clearing the wrong
rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from zlib import crc32

from sluice.core.wire import KEYLESS_HASH
from sluice.errors import ConfigError
from sluice.schemas.avro import key_formatter
from sluice.sink.sql.engines import Engine, MariaDB, Postgres, Sqlite

EXACT_KINDS = frozenset({"int", "uint64", "year", "string"})
PAGE = 1000


def clear_partition(
    engine: Engine,
    cur: Any,
    table: str,
    key: Sequence[tuple[str, str]] | None,
    partition: tuple[int, int],
) -> int:
    """Delete the rows of ``table`` in ``partition`` (index, count); how many went.
    ``key``: (column, kind) of the table's key as the sink last saw it (sorted by name), or
    None to read it from the catalog."""
    index, count = partition
    if key is None:
        key = catalog_key(engine, cur, table)
    if not key:
        if KEYLESS_HASH % count != index:
            return 0
        cur.execute(engine.clear_sql(table))
        return int(cur.rowcount or 0)
    for name, kind in key:
        if kind not in EXACT_KINDS:
            raise ConfigError(
                f"a truncate of {table} reached key partition {index}/{count}: its key column "
                f"{name!r} is {kind}, whose rows this sink cannot assign to partitions exactly "
                "(integer and text keys only); deliver that table with a sink of its own "
                "(--source), outside the group"
            )
    names = [name for name, _ in key]
    parts = [(json.dumps(n, ensure_ascii=False) + ":", key_formatter(kind)) for n, kind in key]
    q = engine.quote
    cur.execute(f"SELECT {', '.join(q(n) for n in names)} FROM {table}")
    gone = []
    for row in cur.fetchall():
        text = ",".join(h + f(_canonical(v)) for (h, f), v in zip(parts, row, strict=True))
        if crc32(("{" + text + "}").encode()) % count == index:
            gone.append(tuple(row))
    sql = engine.delete_sql(table, names)
    for start in range(0, len(gone), PAGE):
        cur.executemany(sql, gone[start : start + PAGE])
    return len(gone)


def _canonical(value: Any) -> Any:
    """A driver's value as capture's canonical one (for the exact kinds)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode()
    return value


def catalog_key(engine: Engine, cur: Any, table: str) -> list[tuple[str, str]]:
    """The table's primary key from the database's catalog: (column, kind), sorted by name;
    kinds other than integers and text are named by their SQL type (and refused)."""
    if isinstance(engine, Sqlite):
        cur.execute(f"PRAGMA table_info({table})")
        rows = [(r[1], r[2]) for r in sorted(cur.fetchall(), key=lambda r: r[5]) if r[5]]
    elif isinstance(engine, Postgres):
        cur.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = %s::regclass AND i.indisprimary",
            (table,),
        )
        rows = list(cur.fetchall())
    elif isinstance(engine, MariaDB):
        cur.execute(
            "SELECT k.COLUMN_NAME, c.COLUMN_TYPE FROM information_schema.KEY_COLUMN_USAGE k "
            "JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = k.TABLE_SCHEMA "
            "AND c.TABLE_NAME = k.TABLE_NAME AND c.COLUMN_NAME = k.COLUMN_NAME "
            "WHERE k.TABLE_SCHEMA = DATABASE() AND k.TABLE_NAME = %s "
            "AND k.CONSTRAINT_NAME = 'PRIMARY'",
            (table.strip("`").replace("``", "`"),),
        )
        rows = list(cur.fetchall())
    else:  # pragma: no cover - every engine is above
        raise ConfigError(f"no catalog query for {engine.name}")
    return sorted((str(name), _kind(str(sql_type))) for name, sql_type in rows)


def _kind(sql_type: str) -> str:
    t = sql_type.lower()
    if t.startswith("tinyint(1)"):
        return sql_type  # a boolean's column, maybe: its key text would be true/false
    if "int" in t and "point" not in t and "interval" not in t:
        return "int"
    if t.startswith(("char", "varchar", "character", "text", "tinytext", "mediumtext",
                     "longtext", "nvarchar", "nchar")):  # fmt: skip
        return "string"
    return sql_type
