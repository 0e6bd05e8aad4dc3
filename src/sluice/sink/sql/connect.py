"""Target URLs of the database kinds, their connections, and which driver errors mean the
target is down (retried) rather than refusing the data (the sink stops)."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from sluice.errors import ConfigError
from sluice.sink.config import redact
from sluice.sink.sql.engines import Engine, MariaDB, Postgres, Sqlite

_OWN_PARAMS = {"table", "schema"}


@dataclass(frozen=True, slots=True)
class DatabaseUrl:
    engine: Engine
    host: str
    port: int
    user: str
    password: str
    database: str  # the database name; for SQLite the file's path
    schema: str | None  # PostgreSQL: where the tables go (default public)
    options: tuple[tuple[str, str], ...]  # other query parameters, for the driver

    def describe(self) -> str:
        if isinstance(self.engine, Sqlite):
            return f"sqlite:///{self.database}"
        return f"{self.engine.name}://{self.user}@{self.host}:{self.port}/{self.database}"


def parse_database_url(url: str) -> DatabaseUrl:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"--to {redact(url)!r} is not a valid URL: {exc}") from None
    scheme = parts.scheme.lower()
    query = dict(parse_qsl(parts.query))
    options = tuple((k, v) for k, v in query.items() if k not in _OWN_PARAMS)
    if scheme == "sqlite":
        if parts.netloc or not parts.path[1:]:
            raise ConfigError(
                f"--to {url!r}: expected sqlite:///relative/replica.db or "
                "sqlite:////absolute/replica.db"
            )
        return DatabaseUrl(Sqlite(), "", 0, "", "", parts.path[1:], None, options)
    database = unquote(parts.path.lstrip("/"))
    engine: Engine = Postgres() if scheme in ("postgresql", "postgres") else MariaDB()
    if not parts.hostname or not database or "/" in database:
        raise ConfigError(
            f"--to {redact(url)!r}: expected {scheme}://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
        )
    return DatabaseUrl(
        engine,
        parts.hostname,
        port or (5432 if isinstance(engine, Postgres) else 3306),
        unquote(parts.username or ("postgres" if isinstance(engine, Postgres) else "root")),
        unquote(parts.password or ""),
        database,
        query.get("schema"),
        options,
    )


def connect(url: DatabaseUrl, timeout_s: float) -> Any:
    """A connection with autocommit off (each window is one transaction)."""
    if isinstance(url.engine, Sqlite):
        path = Path(url.database)
        if not path.parent.is_dir():
            raise ConfigError(f"no directory {path.parent} for the SQLite target {path}")
        conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn
    if isinstance(url.engine, Postgres):
        import psycopg2  # noqa: PLC0415 - optional: sluice[postgres]

        params: dict[str, Any] = {
            "host": url.host,
            "port": url.port,
            "user": url.user,
            "password": url.password or None,
            "dbname": url.database,
            "connect_timeout": max(1, int(timeout_s)),
            "application_name": "sluice-sink",
            **dict(url.options),
        }
        conn = psycopg2.connect(**params)
        conn.autocommit = False
        return conn
    import pymysql  # noqa: PLC0415
    from pymysql.constants import CLIENT  # noqa: PLC0415

    return pymysql.connect(
        host=url.host,
        port=url.port,
        user=url.user,
        password=url.password,
        database=url.database,
        charset="utf8mb4",
        autocommit=False,
        connect_timeout=max(1, int(timeout_s)),
        read_timeout=int(timeout_s) * 4,
        write_timeout=int(timeout_s) * 4,
        init_command=_MARIADB_SESSION,
        # an UPDATE's row count is the rows it matched, as PostgreSQL's and SQLite's are (a
        # group's fenced checkpoint write tells "not ours" by it: fence.py)
        client_flag=CLIENT.FOUND_ROWS,
    )


# lock_wait_timeout: DDL waiting for a table's metadata lock (another session's open
# transaction, say of a sink process just killed) fails after 30 s as "down" and is retried,
# visibly, instead of waiting for a year (MariaDB's default).
_MARIADB_SESSION = (
    "SET time_zone = '+00:00', sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO', "
    "lock_wait_timeout = 30"
)
# MariaDB client errors that mean the connection or server went away
_MARIADB_DOWN = {1040, 1053, 1205, 1213, 2002, 2003, 2006, 2013, 2055, 1927}


# PostgreSQL's refusals of a login (psycopg2 gives them no SQLSTATE: the server's FATAL text)
_PG_REFUSED_LOGIN = re.compile(
    r"password authentication failed|no pg_hba\.conf entry|role \S+ does not exist|"
    r"database \S+ does not exist|no password supplied|permission denied for database"
)


def is_down(exc: BaseException) -> bool:
    """Does this driver error mean "try again later" (not "your data is refused")?"""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        return "locked" in text or "busy" in text or "disk I/O" in text
    module = type(exc).__module__
    if module.startswith("psycopg2"):
        import psycopg2  # noqa: PLC0415
        import psycopg2.errors  # noqa: PLC0415

        if isinstance(exc, psycopg2.OperationalError) and _PG_REFUSED_LOGIN.search(str(exc)):
            return False  # a wrong password or role is not an outage: retrying cannot help
        return isinstance(
            exc,
            psycopg2.OperationalError
            | psycopg2.InterfaceError
            | psycopg2.errors.SerializationFailure
            | psycopg2.errors.DeadlockDetected,
        ) and not isinstance(exc, psycopg2.errors.InsufficientPrivilege)
    if module.startswith("pymysql"):
        import pymysql  # noqa: PLC0415

        if isinstance(exc, pymysql.err.InterfaceError):
            return True
        if isinstance(exc, pymysql.err.OperationalError):
            code = exc.args[0] if exc.args else 0
            return code in _MARIADB_DOWN
    return False


def refusal(exc: BaseException, url: DatabaseUrl) -> str:
    """The driver's complaint in one line, with what to check."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if "password" in text.lower() or "denied" in text.lower():
        return f"{url.describe()} refused the login or a privilege: {text}"
    return f"{url.describe()}: {text}"
