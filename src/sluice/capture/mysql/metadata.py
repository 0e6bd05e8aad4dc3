"""What the server says about itself and its tables: settings checks, charsets, column info."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pymysql

from sluice.capture.mysql.scn import scn_of_log, split_log_name
from sluice.core.names import split_source
from sluice.errors import SourceSetupError

# MySQL charset names -> Python codecs ("binary" is raw bytes).
_CODECS = {
    "utf8mb4": "utf-8",
    "utf8mb3": "utf-8",
    "utf8": "utf-8",
    "latin1": "cp1252",
    "ascii": "ascii",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "latin2": "iso8859-2",
    "greek": "iso8859-7",
    "hebrew": "iso8859-8",
    "latin5": "iso8859-9",
    "latin7": "iso8859-13",
    "koi8r": "koi8-r",
    "koi8u": "koi8-u",
    "sjis": "shift_jis",
    "cp932": "cp932",
    "ujis": "euc_jp",
    "eucjpms": "euc_jp",
    "gbk": "gbk",
    "gb2312": "gb2312",
    "big5": "big5",
    "euckr": "euc_kr",
    "tis620": "tis-620",
    "cp850": "cp850",
    "cp852": "cp852",
    "cp866": "cp866",
    "macroman": "mac_roman",
    "macce": "mac_latin2",
}

_REQUIRED = {
    "log_bin": ("ON", "start the server with --log-bin (the binary log is off)"),
    "binlog_format": ("ROW", "SET GLOBAL binlog_format='ROW' (and binlog_format=ROW in my.cnf)"),
    "binlog_row_image": (
        "FULL",
        "SET GLOBAL binlog_row_image='FULL' (and binlog_row_image=FULL in my.cnf)",
    ),
    "binlog_row_metadata": (
        "FULL",
        "SET GLOBAL binlog_row_metadata='FULL' (and binlog_row_metadata=FULL in my.cnf)",
    ),
}

# Settings that make the binlog hold events Sluice cannot read: name -> (refused value, fix).
# A server without the variable (MariaDB has neither MySQL one, MySQL not log_bin_compress)
# has it off. Sessions can still set the MySQL two: capture stops at such an event
# (``binlog.events``).
_REFUSED = {
    "binlog_transaction_compression": (
        "ON",
        "SET GLOBAL binlog_transaction_compression=OFF (and binlog_transaction_compression=OFF "
        "in my.cnf): MySQL then writes each transaction as one zstd-compressed "
        "TRANSACTION_PAYLOAD event, which Sluice does not decode",
    ),
    "binlog_row_value_options": (
        "PARTIAL_JSON",
        "SET GLOBAL binlog_row_value_options='' (and binlog_row_value_options='' in my.cnf): "
        "MySQL then logs JSON updates as PARTIAL_UPDATE_ROWS events without the full after "
        "image",
    ),
    "log_bin_compress": (
        "ON",
        "SET GLOBAL log_bin_compress=OFF (and log_bin_compress=OFF in my.cnf): MariaDB then "
        "compresses rows events, which Sluice does not decode",
    ),
}


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    data_type: str
    is_json: bool
    default: str | None = None  # a constant default's literal text (``mariadb_default``)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    log_base: str
    end_scn: int
    logs: tuple[str, ...]
    collations: dict[int, str | None]


def _query(conn: pymysql.Connection[Any], sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def check_server(conn: pymysql.Connection[Any], tables: tuple[str, ...]) -> ServerInfo:
    """Refuse a server that cannot feed CDC, naming the setting and the fix."""
    names = ",".join(f"'{n}'" for n in (*_REQUIRED, *_REFUSED))
    settings = {
        str(k).lower(): str(v).upper()
        for k, v in _query(conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
    }
    for name, (want, fix) in _REQUIRED.items():
        have = settings.get(name, "(not set)")
        if have != want:
            raise SourceSetupError(f"the server has {name}={have}, Sluice needs {want}: {fix}")
    for name, (refused, fix) in _REFUSED.items():
        have = settings.get(name, "")
        if refused in have.split(","):
            raise SourceSetupError(f"the server has {name}={have}, Sluice cannot read it: {fix}")
    status = _binlog_position(conn)
    _check_replication_grant(conn)
    _check_tables(conn, tables)
    logs = _query(conn, "SHOW BINARY LOGS")
    base, _ = split_log_name(status[0])
    return ServerInfo(
        base,
        scn_of_log(status[0], int(status[1])),
        tuple(str(row[0]) for row in logs),
        load_collations(conn),
    )


def end_scn(conn: pymysql.Connection[Any]) -> int:
    status = _binlog_position(conn)
    return scn_of_log(status[0], int(status[1]))


_PARSE_ERROR = 1064
_MASTER_STATUS = "SHOW MASTER STATUS"  # MariaDB (any), MySQL before 8.4
_BINARY_LOG_STATUS = "SHOW BINARY LOG STATUS"  # MySQL 8.2+ (8.4 removed the other)


def binlog_status(conn: pymysql.Connection[Any]) -> tuple[Any, ...] | None:
    """The first row of the server's binlog status (``File``, ``Position``, ...), or None
    when the binary log is off. MySQL 8.4 removed ``SHOW MASTER STATUS`` for ``SHOW BINARY
    LOG STATUS`` (8.2+); MariaDB keeps the old one. The handshake's version picks which to
    try first, and a syntax error (1064) moves on to the other. Other driver errors pass
    through (a lost connection stays retriable)."""
    for sql in _status_statements(str(getattr(conn, "server_version", "") or "")):
        try:
            rows = _query(conn, sql)
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] == _PARSE_ERROR:
                continue
            raise
        return rows[0] if rows else None
    raise SourceSetupError(
        f"the server knows neither {_MASTER_STATUS} nor {_BINARY_LOG_STATUS}: it is not a "
        "MySQL or MariaDB server Sluice can read the binlog position of"
    )


def _status_statements(version: str) -> tuple[str, str]:
    match = re.match(r"(\d+)\.(\d+)", version)
    if "mariadb" in version.lower() or match is None:
        return _MASTER_STATUS, _BINARY_LOG_STATUS
    if (int(match[1]), int(match[2])) >= (8, 2):
        return _BINARY_LOG_STATUS, _MASTER_STATUS
    return _MASTER_STATUS, _BINARY_LOG_STATUS


def _binlog_position(conn: pymysql.Connection[Any]) -> tuple[Any, ...]:
    try:
        row = binlog_status(conn)
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] in (1227, 1142):
            raise SourceSetupError(
                "the capture user may not read the binlog position: "
                "GRANT BINLOG MONITOR, REPLICATION SLAVE ON *.* TO the user "
                "(MySQL: REPLICATION CLIENT, REPLICATION SLAVE)"
            ) from None
        raise
    if row is None:
        raise SourceSetupError("the binary log is off: start the server with --log-bin")
    return row


def _check_replication_grant(conn: pymysql.Connection[Any]) -> None:
    grants = " ".join(str(row[0]).upper() for row in _query(conn, "SHOW GRANTS"))
    if (
        "ALL PRIVILEGES ON *.*" in grants
        or "REPLICATION SLAVE" in grants
        or ("REPLICATION REPLICA" in grants)
    ):
        return
    raise SourceSetupError(
        "the capture user lacks REPLICATION SLAVE: GRANT REPLICATION SLAVE, BINLOG MONITOR "
        "ON *.* TO the user, plus SELECT on the captured tables"
    )


def _check_tables(conn: pymysql.Connection[Any], tables: tuple[str, ...]) -> None:
    for source in tables:
        schema, table = split_source(source)
        found = _query(
            conn,
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
            (schema, table),
        )
        if not found:
            raise SourceSetupError(
                f"unknown table {source!r}: it does not exist on the server, or the capture "
                "user may not see it (GRANT SELECT ON it)",
                source=source,
            )


def load_collations(conn: pymysql.Connection[Any]) -> dict[int, str | None]:
    """Collation id -> Python codec (None for binary)."""
    out: dict[int, str | None] = {}
    for ident, charset in _query(
        conn,
        "SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE ID IS NOT NULL",
    ):
        out[int(ident)] = None if charset == "binary" else _CODECS.get(str(charset), str(charset))
    return out


def json_columns(conn: pymysql.Connection[Any], source: str) -> set[str]:
    """MariaDB's JSON columns: LONGTEXT with a ``json_valid`` CHECK named after the column."""
    schema, table = split_source(source)
    rows = _query(
        conn,
        "SELECT CONSTRAINT_NAME FROM information_schema.CHECK_CONSTRAINTS WHERE "
        "CONSTRAINT_SCHEMA=%s AND TABLE_NAME=%s AND CHECK_CLAUSE LIKE 'json_valid(%%'",
        (schema, table),
    )
    return {str(row[0]) for row in rows}


def column_info(conn: pymysql.Connection[Any], source: str) -> dict[str, ColumnInfo]:
    schema, table = split_source(source)
    checks = json_columns(conn, source)
    rows = _query(
        conn,
        "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_DEFAULT FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
        (schema, table),
    )
    return {
        str(name): ColumnInfo(str(dtype).lower(), str(name) in checks, mariadb_default(default))
        for name, dtype, default in rows
    }


_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:e[+-]?\d+)?$", re.IGNORECASE)


def mariadb_default(text: Any) -> str | None:
    """``information_schema.COLUMNS.COLUMN_DEFAULT`` as a literal's text: MariaDB quotes
    string literals (``'x'``), writes numbers bare and ``NULL`` for none; anything else is
    an expression (``current_timestamp()``, ``b'101'``) and gives None."""
    if text is None:
        return None
    value = str(text)
    if len(value) >= 2 and value.startswith("'") and value.endswith("'"):
        return value[1:-1].replace("''", "'").replace("\\\\", "\\")
    return value if _NUMBER.match(value) else None
