"""Each target database's SQL: its type map, quoting, upsert, and which errors mean "down".

The type map (also in the README) takes the source-neutral column kind, so any source reaches
any engine: MariaDB -> PostgreSQL and PostgreSQL -> MariaDB alike.
"""

from __future__ import annotations

import datetime as dt
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from sluice.errors import SluiceError
from sluice.schemas.arrow_json import UNESCAPED_KINDS
from sluice.schemas.columns import (
    DATE_INFINITY,
    DATE_MINUS_INFINITY,
    KIND,
    MICROS_INFINITY,
    MICROS_MINUS_INFINITY,
    Column,
)

Convert = Callable[[Any], Any]
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)


class Unstorable(SluiceError):
    """A value the target's column type cannot hold (PostgreSQL's infinite dates and
    timestamps in MariaDB): the sink stops and says so rather than store another value."""


# PostgreSQL's infinite dates and timestamps (capture keeps them as these sentinels)
INFINITE_DAYS = {DATE_INFINITY: "infinity", DATE_MINUS_INFINITY: "-infinity"}
INFINITE_MICROS = {MICROS_INFINITY: "infinity", MICROS_MINUS_INFINITY: "-infinity"}


_FIX = " (leave the column out with --exclude-column, or its rows with --filter)"


def _date(days: int) -> dt.date:
    if days in INFINITE_DAYS:
        raise Unstorable(f"an {INFINITE_DAYS[days]} date has no DATE value in this target{_FIX}")
    return _EPOCH_DATE + dt.timedelta(days=days)


def _datetime(micros: int) -> dt.datetime:
    if micros in INFINITE_MICROS:
        raise Unstorable(
            f"an {INFINITE_MICROS[micros]} timestamp has no DATETIME value in this target{_FIX}"
        )
    return _EPOCH + dt.timedelta(microseconds=micros)


def _timestamp(micros: int) -> dt.datetime:
    return _datetime(micros).replace(tzinfo=dt.UTC)


def _pg_date(days: int) -> dt.date | str:
    return INFINITE_DAYS.get(days) or _date(days)  # PostgreSQL takes 'infinity' as it is


def _pg_datetime(micros: int) -> dt.datetime | str:
    return INFINITE_MICROS.get(micros) or _datetime(micros)


def _pg_timestamp(micros: int) -> dt.datetime | str:
    return INFINITE_MICROS.get(micros) or _timestamp(micros)


def _interval(micros: int) -> dt.timedelta:
    return dt.timedelta(microseconds=micros)


def _json_list(members: list[str]) -> str:
    return json.dumps(members, ensure_ascii=False)


class Engine(ABC):
    """One SQL dialect. ``param`` is the driver's placeholder."""

    name: str
    param = "%s"
    ddl_commits = False  # DDL ends the open transaction (MariaDB)

    @abstractmethod
    def quote(self, name: str) -> str: ...

    @abstractmethod
    def column_type(self, col: Column, key_columns: int) -> str:
        """The DDL type of a column; ``key_columns`` > 0: it is one of that many key columns."""

    @abstractmethod
    def converter(self, col: Column) -> Convert:
        """A canonical value (what capture decoded) -> the driver's parameter."""

    def arrow_type(self, col: Column) -> pa.DataType | None:
        """An Arrow type whose Python values are the converter's (the bulk path casts a
        column of canonical values to it), or None: the converter runs per value."""
        return self.arrow_types.get(col.kind)

    arrow_types: dict[str, pa.DataType] = {}
    # Kinds whose converter is the canonical JSON value, a text Arrow writes for a whole
    # column (``arrow_json.value_texts``): the bulk path takes those instead.
    json_texts: frozenset[str] = frozenset()

    def create_table(self, table: str, columns: Sequence[Column], key: Sequence[str]) -> str:
        defs = [
            f"{self.quote(c.name)} {self.column_type(c, len(key) if c.name in key else 0)}"
            + (" NOT NULL" if c.name in key else "")
            for c in columns
        ]
        if key:
            defs.append(f"PRIMARY KEY ({', '.join(self.quote(k) for k in key)})")
        return f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(defs)}){self.table_options}"

    table_options = ""

    def add_column(self, table: str, col: Column) -> str:
        return f"ALTER TABLE {table} ADD COLUMN {self.quote(col.name)} {self.column_type(col, 0)}"

    @abstractmethod
    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str: ...

    def delete_sql(self, table: str, key: Sequence[str]) -> str:
        where = " AND ".join(f"{self.quote(k)} = {self.param}" for k in key)
        return f"DELETE FROM {table} WHERE {where}"

    def insert_sql(self, table: str, columns: Sequence[str]) -> str:
        names = ", ".join(self.quote(c) for c in columns)
        return f"INSERT INTO {table} ({names}) VALUES ({', '.join([self.param] * len(columns))})"

    def on_conflict(self, columns: Sequence[str], key: Sequence[str]) -> str:
        """``ON CONFLICT (key) DO UPDATE SET c = excluded.c, ...`` (PostgreSQL, SQLite)."""
        rest = [self.quote(c) for c in columns if c not in key]
        conflict = ", ".join(self.quote(k) for k in key)
        if not rest:
            return f"ON CONFLICT ({conflict}) DO NOTHING"
        return f"ON CONFLICT ({conflict}) DO UPDATE SET " + ", ".join(
            f"{c} = excluded.{c}" for c in rest
        )

    @abstractmethod
    def delete_one_sql(self, table: str, columns: Sequence[str], nulls: Sequence[bool]) -> str:
        """Delete one row equal to an image (a table without a key)."""

    def clear_sql(self, table: str) -> str:
        return f"DELETE FROM {table}"  # TRUNCATE would commit (MariaDB) or need more rights


class Postgres(Engine):
    name = "postgresql"
    arrow_types = {
        "bool": pa.bool_(),
        "time": pa.duration("us"),
        "date": pa.date32(),
        "datetime": pa.timestamp("us"),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def column_type(self, col: Column, key_columns: int) -> str:
        if col.kind == "decimal":
            if 1 <= col.precision <= 1000:
                return f"numeric({col.precision},{col.scale})"
            return "numeric"
        return _PG_TYPES[col.kind]

    def converter(self, col: Column) -> Convert:
        return _PG_CONVERT.get(col.kind, same)

    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        names = ", ".join(self.quote(c) for c in columns)
        return f"INSERT INTO {table} ({names}) VALUES %s " + self.on_conflict(columns, key)

    def delete_one_sql(self, table: str, columns: Sequence[str], nulls: Sequence[bool]) -> str:
        where = " AND ".join(
            f"{self.quote(c)} IS NULL" if null else f"{self.quote(c)} = %s"
            for c, null in zip(columns, nulls, strict=True)
        )
        return f"DELETE FROM {table} WHERE ctid IN (SELECT ctid FROM {table} WHERE {where} LIMIT 1)"


def same(value: Any) -> Any:
    return value


_PG_TYPES = {
    "int": "bigint",
    "year": "integer",
    "bit": "numeric(20,0)",
    "bool": "boolean",
    "time": "interval",
    "date": "date",
    "datetime": "timestamp(6)",
    "timestamp": "timestamptz",
    "float": "real",
    "double": "double precision",
    "uint64": "numeric(20,0)",
    "bytes": "bytea",
    "geometry": "bytea",
    "string": "text",
    "enum": "text",
    "uuid": "text",
    "inet6": "text",
    "json": "jsonb",
    "set": "text[]",
}
_PG_CONVERT: dict[str, Convert] = {
    "bool": bool,
    "time": _interval,
    "date": _pg_date,
    "datetime": _pg_datetime,
    "timestamp": _pg_timestamp,
}


class MariaDB(Engine):
    name = "mariadb"
    arrow_types = {
        "time": pa.duration("us"),
        "date": pa.date32(),
        "datetime": pa.timestamp("us"),
        "timestamp": pa.timestamp("us"),
    }
    ddl_commits = True
    table_options = " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    KEY_BYTES = 3072  # InnoDB's limit for one index

    def quote(self, name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    def column_type(self, col: Column, key_columns: int) -> str:
        kind = KIND[col.kind]
        if col.kind == "decimal":
            if 1 <= col.precision <= 65 and col.scale <= 30:
                return f"DECIMAL({col.precision},{col.scale})"
            return "VARCHAR(1100)" if key_columns else "LONGTEXT"  # exact as text
        if key_columns and kind.wire in ("string", "strings"):
            return f"VARCHAR({self.KEY_BYTES // key_columns // 4})"
        if key_columns and kind.wire == "bytes":
            return f"VARBINARY({self.KEY_BYTES // key_columns})"
        return _MARIADB_TYPES[col.kind]

    def converter(self, col: Column) -> Convert:
        if col.kind == "decimal" and not (1 <= col.precision <= 65 and col.scale <= 30):
            return str
        return _MARIADB_CONVERT.get(col.kind, same)

    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        return f"{self.insert_sql(table, columns)}{self.on_duplicate(columns, key)}"

    def upsert_parts(
        self, table: str, columns: Sequence[str], key: Sequence[str]
    ) -> tuple[str, str]:
        """The upsert around a list of ``(...)`` rows: what goes before it, and after."""
        names = ", ".join(self.quote(c) for c in columns)
        return f"INSERT INTO {table} ({names}) VALUES ", self.on_duplicate(columns, key)

    def on_duplicate(self, columns: Sequence[str], key: Sequence[str]) -> str:
        rest = [c for c in columns if c not in key] or list(key[:1])
        update = ", ".join(f"{self.quote(c)} = VALUES({self.quote(c)})" for c in rest)
        return f" ON DUPLICATE KEY UPDATE {update}"

    def delete_one_sql(self, table: str, columns: Sequence[str], nulls: Sequence[bool]) -> str:
        where = " AND ".join(f"{self.quote(c)} <=> %s" for c in columns)
        return f"DELETE FROM {table} WHERE {where} LIMIT 1"


_MARIADB_TYPES = {
    "int": "BIGINT",
    "year": "SMALLINT",
    "bit": "BIGINT UNSIGNED",
    "bool": "BOOLEAN",
    "time": "TIME(6)",
    "date": "DATE",
    "datetime": "DATETIME(6)",
    "timestamp": "DATETIME(6)",  # UTC: TIMESTAMP would convert by the session's time zone
    "float": "FLOAT",
    "double": "DOUBLE",
    "uint64": "BIGINT UNSIGNED",
    "bytes": "LONGBLOB",
    "geometry": "LONGBLOB",
    "string": "LONGTEXT",
    "enum": "LONGTEXT",
    "uuid": "VARCHAR(36)",
    "inet6": "VARCHAR(45)",
    "json": "LONGTEXT",
    "set": "LONGTEXT",
}
_MARIADB_CONVERT: dict[str, Convert] = {
    "time": _interval,
    "date": _date,
    "datetime": _datetime,
    "timestamp": _datetime,
    "set": _json_list,
    "uint64": int,
}


class Sqlite(Engine):
    name = "sqlite"
    param = "?"
    json_texts = UNESCAPED_KINDS  # dates, times and decimals are stored as their JSON text

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def column_type(self, col: Column, key_columns: int) -> str:
        return _SQLITE_TYPES.get(KIND[col.kind].json, "TEXT") if col.kind not in (
            "bytes", "geometry", "decimal", "uint64", "float", "double", "json", "set"
        ) else _SQLITE_SPECIAL[col.kind]  # fmt: skip

    def converter(self, col: Column) -> Convert:
        if col.kind in ("bytes", "geometry", "float", "double", "json"):
            return same
        if col.kind == "set":
            return _json_list
        if col.kind == "uint64":
            return str
        return KIND[col.kind].canonical_json()  # the JSON mapping's text (dates, decimals)

    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        return f"{self.insert_sql(table, columns)} " + self.on_conflict(columns, key)

    def delete_one_sql(self, table: str, columns: Sequence[str], nulls: Sequence[bool]) -> str:
        where = " AND ".join(f"{self.quote(c)} IS ?" for c in columns)
        return (
            f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE {where} LIMIT 1)"
        )


_SQLITE_TYPES = {"number": "INTEGER", "bool": "INTEGER", "quoted": "TEXT", "string": "TEXT"}
_SQLITE_SPECIAL = {
    "bytes": "BLOB",
    "geometry": "BLOB",
    "decimal": "TEXT",
    "uint64": "TEXT",
    "float": "REAL",
    "double": "REAL",
    "json": "TEXT",
    "set": "TEXT",
}
