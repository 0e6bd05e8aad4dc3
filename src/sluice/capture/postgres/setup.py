"""Connecting to PostgreSQL and getting it ready for capture: the URL, the server's settings
and privileges, the publication of the captured tables and the replication slot. Every
refusal says what to change."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import psycopg2

from sluice.capture.source import bad_url
from sluice.core.names import source_name, split_source
from sluice.errors import ConfigError, SourceConnectionError, SourceSetupError, first_line

_HINT = "expected postgresql://USER[:PASSWORD]@HOST:PORT/DBNAME[?slot=NAME&publication=NAME]"
_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True, slots=True)
class PgUrl:
    host: str
    port: int
    user: str
    dbname: str
    slot: str
    publication: str
    password: str = field(repr=False, default="")

    def dsn(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password or None,
            "dbname": self.dbname,
            # Values in the text forms types.py reads.
            "options": "-c TimeZone=UTC -c DateStyle=ISO -c extra_float_digits=1"
            " -c bytea_output=hex -c IntervalStyle=iso_8601",
            "connect_timeout": 10,
        }


def parse_pg_url(url: str) -> PgUrl:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise bad_url(_HINT) from None
    if not parts.hostname or not parts.username or not parts.path.strip("/"):
        raise ConfigError(f"source URL needs a user, a host and a database; {_HINT}")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    slot, publication = query.get("slot", "sluice"), query.get("publication", "sluice")
    for what, name in (("slot", slot), ("publication", publication)):
        if not _IDENT.fullmatch(name):
            raise ConfigError(f"{what} name {name!r}: lower-case letters, digits and _ only")
    password = unquote(parts.password or "") or os.environ.get("SLUICE_SOURCE_PASSWORD", "")
    return PgUrl(
        parts.hostname,
        port or 5432,
        unquote(parts.username),
        unquote(parts.path.strip("/")),
        slot,
        publication,
        password,
    )


def connect(url: PgUrl, **kwargs: Any) -> Any:
    try:
        conn = psycopg2.connect(**url.dsn(), **kwargs)
    except psycopg2.OperationalError as exc:
        text = first_line(exc)
        refused = ("password", "authentication", "does not exist", "replication role")
        if any(word in text for word in refused):
            raise SourceSetupError(f"PostgreSQL refused the login: {text}") from None
        raise SourceConnectionError(f"cannot reach PostgreSQL: {text}") from None
    return conn


def _one(conn: Any, sql: str, args: tuple[Any, ...] = ()) -> Any:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
        return None if row is None else row[0]


def check_server(conn: Any, url: PgUrl, tables: tuple[str, ...]) -> int:
    """Check settings, privileges and tables; make the publication and slot when absent.
    Returns the server's current WAL position (an SCN)."""
    if _one(conn, "SHOW wal_level") != "logical":
        raise SourceSetupError(
            "wal_level is not logical: set wal_level = logical in postgresql.conf and restart "
            "PostgreSQL"
        )
    encoding = _one(conn, "SHOW server_encoding")
    if encoding != "UTF8":
        raise SourceSetupError(
            f"database {url.dbname} uses encoding {encoding}: Sluice captures UTF8 databases "
            "(text reaches it in the server's encoding)"
        )
    if not _one(
        conn, "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    ):
        raise SourceSetupError(
            f"role {url.user} may not replicate: ALTER ROLE {url.user} REPLICATION"
        )
    for source in tables:
        schema, table = split_source(source)
        if _one(conn, "SELECT to_regclass(%s)", (f'"{schema}"."{table}"',)) is None:
            raise SourceSetupError(
                f"unknown table {source!r}: it does not exist in database {url.dbname}, or the "
                "capture user may not see it",
                source=source,
            )
    _publication(conn, url, tables)
    _slot(conn, url)
    return int(_one(conn, "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"))


def quoted_table(namespace: str, table: str) -> str:
    return _quoted(source_name(namespace, table))


def _quoted(source: str) -> str:
    schema, table = split_source(source)
    return '"{}"."{}"'.format(schema.replace('"', '""'), table.replace('"', '""'))


def _publication(conn: Any, url: PgUrl, tables: tuple[str, ...]) -> None:
    exists = _one(conn, "SELECT 1 FROM pg_publication WHERE pubname = %s", (url.publication,))
    have: set[tuple[str, str]] = set()
    if exists:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                (url.publication,),
            )
            have = {(str(s), str(t)) for s, t in cur.fetchall()}
    missing = [s for s in tables if split_source(s) not in have]
    if not missing:
        return
    names = ", ".join(_quoted(s) for s in missing)
    sql = (
        f"ALTER PUBLICATION {url.publication} ADD TABLE {names}"
        if exists
        else f"CREATE PUBLICATION {url.publication} FOR TABLE {names}"
    )
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    except psycopg2.Error as exc:
        raise SourceSetupError(
            f"cannot publish {', '.join(missing)} ({first_line(exc)}): run `{sql}` as the "
            "tables' owner, or make the capture user their owner"
        ) from None


def _slot(conn: Any, url: PgUrl) -> None:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT plugin, database, active_pid FROM pg_replication_slots WHERE slot_name = %s",
            (url.slot,),
        )
        found = cur.fetchone()
    plugin = None
    if found is not None:
        plugin, database, active_pid = found
        if database != url.dbname:
            raise SourceSetupError(
                f"replication slot {url.slot} belongs to database {database}: give this relay "
                "its own slot (?slot=NAME in the source URL)"
            )
        if active_pid is not None:
            raise SourceSetupError(
                f"replication slot {url.slot} is in use (server process {active_pid}, another "
                "relay?): give this relay its own slot (?slot=NAME in the source URL)"
            )
    if plugin is not None:
        if plugin != "pgoutput":
            raise SourceSetupError(
                f"replication slot {url.slot} uses plugin {plugin}, not pgoutput: give another "
                "slot (?slot=NAME in the source URL) or drop it"
            )
        return
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (url.slot,))
    except psycopg2.Error as exc:
        text = first_line(exc)
        hint = (
            "raise max_replication_slots in postgresql.conf (and restart), or drop an unused slot"
            if "max_replication_slots" in text or "all replication slots are in use" in text
            else "check the capture user's REPLICATION attribute"
        )
        raise SourceSetupError(
            f"cannot create replication slot {url.slot}: {text}; {hint}"
        ) from None


def primary_key(conn: Any, namespace: str, table: str) -> tuple[str, ...]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)",
            (_quoted(source_name(namespace, table)),),
        )
        return tuple(str(r[0]) for r in cur.fetchall())


def not_null(conn: Any, namespace: str, table: str) -> set[str]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
            "AND attnotnull AND NOT attisdropped",
            (_quoted(source_name(namespace, table)),),
        )
        return {str(r[0]) for r in cur.fetchall()}


def base_types(conn: Any, types: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each ``(oid, typmod)`` with a domain replaced by its base type (domains of domains
    too): a domain's values are its base type's, in the same text form."""
    resolved: dict[int, tuple[int, int]] = {}
    pending = {oid for oid, _ in types}
    with conn.cursor() as cur:
        while pending:
            cur.execute(
                "SELECT oid, typbasetype, typtypmod FROM pg_type "
                "WHERE oid = ANY(%s::oid[]) AND typtype = 'd'",
                (sorted(pending),),
            )
            rows = cur.fetchall()
            pending = set()
            for oid, base, typmod in rows:
                resolved[int(oid)] = (int(base), int(typmod))
                pending.add(int(base))
    out = []
    for type_oid, type_mod in types:
        oid, typmod = type_oid, type_mod
        while oid in resolved:
            oid, domain_typmod = resolved[oid]
            typmod = domain_typmod if typmod < 0 else typmod
        out.append((oid, typmod))
    return out


def type_names(conn: Any, types: list[tuple[int, int]]) -> list[str]:
    """``format_type`` of each ``(oid, typmod)``, in one round trip."""
    if not types:
        return []
    with conn.cursor() as cur:
        cur.execute(
            "SELECT format_type(t.oid, t.typmod) FROM unnest(%s::oid[], %s::int[]) "
            "WITH ORDINALITY AS t(oid, typmod, n) ORDER BY n",
            ([oid for oid, _ in types], [typmod for _, typmod in types]),
        )
        return [str(r[0]) for r in cur.fetchall()]
