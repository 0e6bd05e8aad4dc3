"""``sluice://HOST:PORT[,sluice://HOST:PORT...][?bootstrap=http://HOST:PORT]``: the upstream
relays a chained relay reads, in the order it tries them, and a bootstrap server whose log
fills a range the upstreams no longer hold."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from sluice.errors import ConfigError

SCHEME = "sluice"


@dataclass(frozen=True, slots=True)
class ChainUrl:
    upstreams: tuple[str, ...]  # http://HOST:PORT of each upstream relay
    bootstrap: str | None = None  # http://HOST:PORT of a bootstrap server

    def describe(self) -> str:
        return ",".join(self.upstreams)


def parse_url(url: str) -> ChainUrl:
    """The upstreams of ``url`` (``ConfigError`` naming the expected form when it is not)."""
    upstreams: list[str] = []
    bootstrap: str | None = None
    for part in (p.strip() for p in url.split(",")):
        parts = urlsplit(part)
        if parts.scheme.lower() != SCHEME or not parts.hostname:
            raise ConfigError(
                f"bad upstream {part!r}: a chained relay's source is "
                "sluice://HOST:PORT[,sluice://HOST:PORT...] (other relays)"
            )
        try:
            port = parts.port or 7070
        except ValueError:
            raise ConfigError(f"bad upstream {part!r}: its port is not a number") from None
        if parts.path not in ("", "/") or parts.username or parts.password:
            raise ConfigError(f"bad upstream {part!r}: expected sluice://HOST:PORT, nothing more")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = sorted(set(query) - {"bootstrap"})
        if unknown:
            raise ConfigError(f"unknown option {unknown[0]!r} in {part!r}; known: bootstrap")
        if "bootstrap" in query:
            bootstrap = _bootstrap_url(query["bootstrap"][-1])
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        upstreams.append(f"http://{host}:{port}")
    return ChainUrl(tuple(dict.fromkeys(upstreams)), bootstrap)


def _bootstrap_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"bad bootstrap={value!r}: expected http://HOST:PORT of `bootstrap serve`"
        )
    return value.rstrip("/")
