"""Source names: ``DB.TABLE``, with backquoted parts for names that hold dots or other
characters (``\\`topic-name.it\\`.\\`DBZ.1834\\```, a backquote doubled inside quotes).

A source has one canonical spelling, used everywhere a source is named (relay, wire format,
store, HTTP): a part is bare when it is made of ``[A-Za-z0-9_$]`` only, else backquoted. Any
spelling of the same table parses to it (``\\`shop\\`.\\`customer\\``` is ``shop.customer``).
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

from sluice.errors import ConfigError

_BARE = re.compile(r"[A-Za-z0-9_$]+")
_HINT = "quote a part that holds a dot or other characters with backquotes: `my.db`.`t-1`"


def _part(text: str, pos: int, whole: str) -> tuple[str, int]:
    """One name part starting at ``pos``: ``(part, position after it)``."""
    if pos < len(text) and text[pos] == "`":
        out, i = [], pos + 1
        while i < len(text):
            if text[i] == "`":
                if i + 1 < len(text) and text[i + 1] == "`":
                    out.append("`")
                    i += 2
                    continue
                return "".join(out), i + 1
            out.append(text[i])
            i += 1
        raise ConfigError(f"source {whole!r} has an unclosed backquote")
    end = text.find(".", pos)
    end = len(text) if end < 0 else end
    return text[pos:end], end


def split_source(name: str) -> tuple[str, str]:
    """``(database, table)`` of a source name; a clear error when it is not ``DB.TABLE``."""
    text = name.strip()
    db, pos = _part(text, 0, name)
    if pos >= len(text) or text[pos] != ".":
        raise ConfigError(f"source {name!r} must be DB.TABLE ({_HINT})")
    table, end = _part(text, pos + 1, name)
    if end != len(text) or not db or not table:
        raise ConfigError(f"source {name!r} must be DB.TABLE ({_HINT})")
    return db, table


def quote_part(part: str) -> str:
    return part if _BARE.fullmatch(part) else "`" + part.replace("`", "``") + "`"


def source_name(db: str, table: str) -> str:
    """The canonical name of table ``table`` in database ``db``."""
    return f"{quote_part(db)}.{quote_part(table)}"


def canonical_source(name: str) -> str:
    return source_name(*split_source(name))


def split_sources(text: str) -> list[str]:
    """A comma-separated list of source names (commas inside backquotes belong to names),
    each canonical."""
    names, start, quoted = [], 0, False
    for i, char in enumerate(text):
        if char == "`":
            quoted = not quoted  # a doubled backquote toggles twice: still inside
        elif char == "," and not quoted:
            names.append(text[start:i])
            start = i + 1
    names.append(text[start:])
    return [canonical_source(n) for n in names if n.strip()]


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$.-`@")


def folder_name(source: str) -> str:
    """A source name as one folder name of our own layout (seeds): characters outside a safe
    set as ``~XX`` per UTF-8 byte, so no path or URI syntax can leak in."""
    return "".join(c if c in _SAFE else "".join(f"~{b:02X}" for b in c.encode()) for c in source)


def schemas_path(source: str) -> str:
    """The HTTP path of a source's schemas (names may hold ``/``, ``#``, ``%``...)."""
    return "/schemas/" + quote(source, safe="")


_TRUNCATE = re.compile(
    rb"^\s*TRUNCATE\s+(?:TABLE\s+)?((?:`(?:[^`]|``)+`|[A-Za-z0-9_$]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[A-Za-z0-9_$]+))?)\s*;?\s*$",
    re.IGNORECASE,
)


def truncated_table(statement: bytes, default_db: bytes) -> str | None:
    """The source a ``TRUNCATE [TABLE] [db.]table`` statement empties (canonical), else None.
    ``default_db``: the statement's current database (the binlog event names it)."""
    match = _TRUNCATE.match(statement)
    if match is None:
        return None
    name = re.sub(rb"\s*\.\s*(?=`|[A-Za-z0-9_$])", b".", match.group(1)).decode()
    try:
        return canonical_source(name)
    except ConfigError:
        return canonical_source(f"{quote_part(default_db.decode())}.{name}")


def check_relay_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"bad relay URL {url!r}: expected http://HOST:PORT")
    try:
        _ = parts.port
    except ValueError:
        raise ConfigError(f"bad relay URL {url!r}: the port is not a number") from None
    return url.rstrip("/")


def redact(url: str) -> str:
    """A URL without its password, for logs, errors and ``/stats``."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)[1]
        user = parts.username or ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))
    except ValueError:
        return "<unparsable URL>"
