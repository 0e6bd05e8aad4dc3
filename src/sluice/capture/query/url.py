"""Query source URLs (``query+sqlite:///app.db``, ``query+postgresql://...``,
``query+mysql://...``) and the dialect each one reads with: what capture (``capture.py``) and
seeding (``seed.py``) both need. Dialects are imported on demand: each needs its own driver."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from sluice.capture.query.dialect import Dialect
from sluice.errors import ConfigError

_HINT = (
    "expected query+sqlite:///relative/app.db, query+sqlite:////absolute/app.db, "
    "query+postgresql://USER@HOST:PORT/DB or query+mysql://USER@HOST:PORT"
)


@dataclass(frozen=True, slots=True)
class QueryUrl:
    kind: str  # sqlite | postgresql | mysql
    target: str  # the SQLite path, or the inner database URL (password included)

    def __repr__(self) -> str:
        return f"QueryUrl({self.kind})"


def parse_query_url(url: str) -> QueryUrl:
    scheme, _, rest = url.partition("://")
    inner = scheme.lower().removeprefix("query+")
    if not scheme.lower().startswith("query+") or not rest:
        raise ConfigError(f"bad query source URL; {_HINT}")
    if inner == "sqlite":
        parts = urlsplit("sqlite://" + rest)
        if parts.netloc or len(parts.path) < 2:
            raise ConfigError(f"bad SQLite URL (three slashes, then the path); {_HINT}")
        return QueryUrl("sqlite", parts.path[1:])
    if inner in ("postgresql", "postgres"):
        from sluice.capture.postgres.setup import parse_pg_url  # noqa: PLC0415

        parse_pg_url("postgresql://" + rest)
        return QueryUrl("postgresql", "postgresql://" + rest)
    if inner in ("mysql", "mariadb"):
        from sluice.capture.mysql.url import parse_source_url  # noqa: PLC0415

        parse_source_url("mysql://" + rest)
        return QueryUrl("mysql", "mysql://" + rest)
    raise ConfigError(f"unknown query source {scheme!r}; {_HINT}")


def dialect_of(parsed: QueryUrl) -> Dialect:
    if parsed.kind == "sqlite":
        from sluice.capture.query.sqlite import SqliteDialect  # noqa: PLC0415

        return SqliteDialect(parsed.target)
    if parsed.kind == "postgresql":
        from sluice.capture.query.postgres import PgDialect  # noqa: PLC0415

        return PgDialect(parsed.target)
    from sluice.capture.query.mysql import MySQLDialect  # noqa: PLC0415

    return MySQLDialect(parsed.target)
