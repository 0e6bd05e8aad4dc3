"""A live table's schema from information_schema (Databus's schema generator)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pymysql

from sluice.capture.mysql.metadata import json_columns, mariadb_default
from sluice.core.names import split_source
from sluice.errors import SourceSetupError
from sluice.schemas import Column, TableSchema

_INTS = ("tinyint", "smallint", "mediumint", "int", "bigint")
_TEXTS = {
    "char": "char",
    "varchar": "varchar",
    "tinytext": "text",
    "text": "text",
    "mediumtext": "text",
    "longtext": "text",
}
_BINARIES = {
    "binary": "binary",
    "varbinary": "varbinary",
    "tinyblob": "blob",
    "blob": "blob",
    "mediumblob": "blob",
    "longblob": "blob",
}
_GEOMETRIES = {
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
}


def _column(row: dict[str, Any], json_columns: set[str]) -> Column:
    column = _typed_column(row, json_columns)
    default = mariadb_default(row["COLUMN_DEFAULT"])
    return column if default is None else dataclasses.replace(column, default=default)


def _typed_column(row: dict[str, Any], json_columns: set[str]) -> Column:
    name, dtype = str(row["COLUMN_NAME"]), str(row["DATA_TYPE"]).lower()
    ctype = str(row["COLUMN_TYPE"]).lower()
    nullable = row["IS_NULLABLE"] == "YES"
    unsigned = "unsigned" in ctype
    if dtype in _INTS:
        kind = "uint64" if dtype == "bigint" and unsigned else "int"
        return Column(name, kind, nullable, dtype + (" unsigned" if unsigned else ""))
    if dtype in ("float", "double", "year", "date", "enum", "set", "uuid", "inet6"):
        return Column(name, dtype, nullable, dtype)
    if dtype == "decimal":
        precision, scale = int(row["NUMERIC_PRECISION"]), int(row["NUMERIC_SCALE"])
        return Column(name, "decimal", nullable, f"decimal({precision},{scale})", precision, scale)
    if dtype in ("datetime", "timestamp", "time"):
        return Column(name, dtype, nullable, f"{dtype}({int(row['DATETIME_PRECISION'] or 0)})")
    if dtype == "bit":
        bits = int(row["NUMERIC_PRECISION"])
        return Column(name, "uint64" if bits > 63 else "bit", nullable, f"bit({bits})")
    if dtype in _TEXTS:
        if name in json_columns:
            return Column(name, "json", nullable, "json")
        return Column(name, "string", nullable, _TEXTS[dtype])
    if dtype in _BINARIES:
        return Column(name, "bytes", nullable, _BINARIES[dtype])
    if dtype in _GEOMETRIES:
        return Column(name, "geometry", nullable, "geometry")
    raise SourceSetupError(f"column {name!r} has a type Sluice does not know: {ctype}")


def describe_table(conn: pymysql.Connection[Any], source: str) -> TableSchema:
    schema, table = split_source(source)
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, "
            "NUMERIC_SCALE, DATETIME_PRECISION, COLUMN_DEFAULT FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        rows = list(cur.fetchall())
        if not rows:
            raise SourceSetupError(f"unknown table {source!r}", source=source)
        cur.execute(
            "SELECT COLUMN_NAME AS c FROM information_schema.KEY_COLUMN_USAGE WHERE "
            "TABLE_SCHEMA=%s AND TABLE_NAME=%s AND CONSTRAINT_NAME='PRIMARY' "
            "ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        primary_key = tuple(str(r["c"]) for r in cur.fetchall())
    json_names = json_columns(conn, source)
    columns = tuple(_column(row, json_names) for row in rows)
    return TableSchema(source, 1, columns, primary_key)
