"""``mysql://USER[:PASSWORD]@HOST:PORT[?server_id=N]`` source URLs; the password never prints.

``server_id`` is the id the relay's binlog dump gives the server (it must differ from every
other replica's); a random one when left out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from sluice.capture.mysql.binlog.protocol import ConnectParams
from sluice.capture.source import bad_url
from sluice.errors import ConfigError

_HINT = "expected mysql://USER[:PASSWORD]@HOST:PORT[?server_id=N]"
_MAX_SERVER_ID = 2**32 - 1


@dataclass(frozen=True, slots=True)
class SourceUrl:
    host: str
    port: int
    user: str
    password: str = field(repr=False, default="")
    server_id: int | None = None  # the binlog dump's id; None: a random one

    def params(self) -> ConnectParams:
        return ConnectParams(self.host, self.port, self.user, self.password)

    def redacted(self) -> str:
        secret = ":***" if self.password else ""
        return f"mysql://{self.user}{secret}@{self.host}:{self.port}"

    def __str__(self) -> str:
        return self.redacted()


def parse_source_url(url: str) -> SourceUrl:
    """Parse a source URL; the password may also come from ``SLUICE_SOURCE_PASSWORD``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise bad_url(_HINT) from None
    if parts.scheme not in ("mysql", "mariadb"):
        shown = parts.scheme or "(none)"
        raise ConfigError(f"unknown source scheme {shown!r}; {_HINT}")
    if not parts.hostname or not parts.username:
        raise ConfigError(f"source URL needs a user and a host; {_HINT}")
    password = unquote(parts.password or "") or os.environ.get("SLUICE_SOURCE_PASSWORD", "")
    server_id = _server_id(parse_qs(parts.query).get("server_id"))
    return SourceUrl(parts.hostname, port or 3306, unquote(parts.username), password, server_id)


def _server_id(values: list[str] | None) -> int | None:
    if not values:
        return None
    text = values[-1]
    if not text.isdigit() or not 1 <= int(text) <= _MAX_SERVER_ID:
        raise ConfigError(f"server_id={text!r} in the source URL: a number 1..{_MAX_SERVER_ID}")
    return int(text)
