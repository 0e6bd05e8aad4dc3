"""A table's current rows as the design brief's JSON values, read straight from the server.

This is the independent side of every "replica equals source" check: it converts what a
plain ``SELECT`` returns, never what the binlog decoder produced.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pymysql

from sluice.core.names import split_source
from sluice.schemas.columns import json_converter, shortest_float32
from sluice.testing.consumers import key_text

_BINARY = {
    "binary",
    "varbinary",
    "tinyblob",
    "blob",
    "mediumblob",
    "longblob",
    "geometry",
    "point",
    "linestring",
    "polygon",
}


def _time_text(value: dt.timedelta) -> str:
    micros = value.days * 86_400_000_000 + value.seconds * 1_000_000 + value.microseconds
    return str(json_converter("time")(micros))


def json_value(data_type: str, scale: int, value: Any) -> Any:
    if value is None:
        return None
    if data_type in ("date", "datetime", "timestamp") and isinstance(value, str):
        return None  # a zero date comes back as text
    if data_type == "decimal":
        return format(Decimal(value), "f")  # the server sends exactly `scale` digits
    if data_type in _BINARY:
        return base64.b64encode(value).decode()
    if data_type == "bit":
        return int.from_bytes(value, "big")
    if data_type == "set":
        return value.split(",") if value else []
    if data_type == "json":
        return json.loads(value)
    if data_type == "timestamp":
        return value.isoformat() + "Z"
    if data_type in ("datetime", "date"):
        return value.isoformat()
    if data_type == "time":
        return _time_text(value)
    if data_type == "float":
        # Read as DOUBLE (exact), shown as the shortest text of the stored float32.
        return shortest_float32(float(value))
    return value


def table_rows(conn: pymysql.Connection[Any], source: str) -> dict[str, dict[str, Any]]:
    """``{key_text: row}`` of a table, values mapped to JSON as the relay maps them."""
    schema, table = split_source(source)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, NUMERIC_SCALE, COLUMN_KEY FROM "
            "information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
            "ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        columns = list(cur.fetchall())
        cur.execute(
            "SELECT CONSTRAINT_NAME FROM information_schema.CHECK_CONSTRAINTS WHERE "
            "CONSTRAINT_SCHEMA=%s AND TABLE_NAME=%s AND CHECK_CLAUSE LIKE 'json_valid(%%'",
            (schema, table),
        )
        json_columns = {r[0] for r in cur.fetchall()}
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA=%s "
            "AND TABLE_NAME=%s AND CONSTRAINT_NAME='PRIMARY' ORDER BY ORDINAL_POSITION",
            (schema, table),
        )
        key_columns = [r[0] for r in cur.fetchall()]
        # SET as text keeps the members in definition order; FLOAT's text form is rounded.
        casts = {"set": "CAST(`{}` AS CHAR)", "float": "CAST(`{}` AS DOUBLE)"}
        names = ", ".join(casts.get(c[1], "`{}`").format(c[0]) for c in columns)
        cur.execute(f"SELECT {names} FROM `{schema}`.`{table}`")
        rows = cur.fetchall()
    out: dict[str, dict[str, Any]] = {}
    for raw in rows:
        row = {
            name: json_value("json" if name in json_columns else dtype, int(scale or 0), value)
            for (name, dtype, scale, _key), value in zip(columns, raw, strict=True)
        }
        out[key_text({k: row[k] for k in key_columns})] = row
    return out


def _pg_json(value: Any) -> Any:
    """A value psycopg2 returns (session TimeZone UTC) -> the JSON value Sluice gives."""
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, list):
        return [_pg_json(v) for v in value]
    if isinstance(value, memoryview | bytes):
        return base64.b64encode(bytes(value)).decode()
    return value  # json/jsonb: already the value


def pg_table_rows(conn: Any, source: str) -> dict[str, dict[str, Any]]:
    """``{key_text: row}`` of a PostgreSQL table (psycopg2 connection), values as Sluice's
    JSON mapping gives them, for the types the demo and tests use (numbers, text, numeric,
    dates, timestamps, json, arrays, bytea)."""
    schema, table = split_source(source)
    name = '"{}"."{}"'.format(schema.replace('"', '""'), table.replace('"', '""'))
    with conn.cursor() as cur:
        cur.execute("SET TimeZone = 'UTC'")
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)",
            (name,),
        )
        key_columns = [r[0] for r in cur.fetchall()]
        cur.execute(f"SELECT * FROM {name}")
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
    out: dict[str, dict[str, Any]] = {}
    for raw in rows:
        row = {n: _pg_json(v) for n, v in zip(names, raw, strict=True)}
        out[key_text({k: row[k] for k in key_columns})] = row
    return out
