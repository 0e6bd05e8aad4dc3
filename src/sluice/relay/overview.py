"""What the console shows of a relay beyond its counters: the source it reads (no password),
the buffer's span in time, throughput over the last minutes, events per second by table,
and who follows it (sinks and jobs that say who they are, links the operator configured)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from sluice.core import wire
from sluice.core.buffer import EventBuffer
from sluice.core.names import redact
from sluice.core.rates import CounterHistory
from sluice.core.requests import CLIENT_HEADER, CONSOLE_HEADER
from sluice.errors import SluiceError

TABLE_RATE_S = 10  # per-table rates are over about the last this many seconds
TABLE_RATE_BYTES = 8 << 20  # ... and at most this much of the buffer's newest windows
_FOLLOWERS = 64  # names remembered; a crowd of anonymous clients is not listed


@dataclass(slots=True)
class Follower:
    name: str
    console: str | None
    address: str
    streams: int = 0  # open now
    last_seen_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "console": self.console,
            "address": self.address,
            "connected": self.streams > 0,
            "last_seen_ms": self.last_seen_ms,
        }


class Followers:
    """Clients that named themselves in their /stream requests."""

    def __init__(self) -> None:
        self._by_name: dict[str, Follower] = {}

    def enter(self, request: web.Request) -> Follower | None:
        name = request.headers.get(CLIENT_HEADER, "").strip()[:100]
        if not name:
            return None
        found = self._by_name.get(name)
        if found is None:
            if len(self._by_name) >= _FOLLOWERS:
                oldest = min(self._by_name.values(), key=lambda f: (f.streams, f.last_seen_ms))
                del self._by_name[oldest.name]
            found = self._by_name[name] = Follower(name, None, request.remote or "")
        found.console = _console_url(request) or found.console
        found.address = request.remote or found.address
        found.streams += 1
        found.last_seen_ms = int(time.time() * 1000)
        return found

    @staticmethod
    def leave(follower: Follower | None) -> None:
        if follower is not None:
            follower.streams -= 1
            follower.last_seen_ms = int(time.time() * 1000)

    def to_json(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in sorted(self._by_name.values(), key=lambda f: f.name)]


def _console_url(request: web.Request) -> str | None:
    """The console URL a client reports; a wildcard host becomes the address it came from."""
    url = request.headers.get(CONSOLE_HEADER, "").strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.hostname in ("0.0.0.0", "::"):
        if not request.remote:
            return None
        host = f"[{request.remote}]" if ":" in request.remote else request.remote
        return parts._replace(netloc=f"{host}:{parts.port or 80}").geturl()
    return url


def source_summary(url: str) -> dict[str, str]:
    """The source's kind (its URL's scheme) and where it is (the rest of the URL, without
    the password): no URL that could be pasted with credentials, even masked ones."""
    kind, sep, rest = redact(url).partition("://")
    if not sep:
        return {"kind": "", "address": kind}
    # No host (a file: query+sqlite:////data/app.db): the address is the path
    return {"kind": kind, "address": rest[1:] if rest.startswith("/") else rest}


def buffer_span(buffer: EventBuffer) -> dict[str, Any]:
    times = buffer.span_times()
    return {
        "oldest_scn": buffer.start_scn,
        "newest_scn": buffer.max_scn,
        "oldest_ts_ms": times[0] if times else None,
        "newest_ts_ms": times[1] if times else None,
        "fill": round(buffer.bytes_held / buffer.capacity, 4) if buffer.capacity else 0.0,
    }


def table_rates(buffer: EventBuffer, history: CounterHistory, now: float) -> dict[str, float]:
    """Events per second by table over about the last ``TABLE_RATE_S`` seconds: the events
    captured since, shared out as the event headers of the buffer's windows since then (at
    most ``TABLE_RATE_BYTES`` of them) share them. Read only when asked."""
    found = history.since(now, TABLE_RATE_S)
    if found is None:
        return {}
    since, total, seconds = found
    counts: dict[bytes, int] = {}
    try:
        spans, _cursor = buffer.spans(max(since, buffer.start_scn), TABLE_RATE_BYTES)
    except SluiceError:
        return {}
    for span in spans:
        if span.external:  # a window held in a file: not read for this
            continue
        window = buffer.copy(span.start, span.end)
        for _start, _end, _hash, source, _op in wire.iter_event_spans(window):
            counts[source] = counts.get(source, 0) + 1
    counted = sum(counts.values())
    per_s = total / max(seconds, 1.0)
    return {
        source.decode("utf-8", "replace"): round(per_s * n / counted, 1)
        for source, n in sorted(counts.items())
    }


def links(configured: dict[str, str], sinks: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Consoles the operator named: ``links`` (``--link NAME=URL``) and the ``[[sinks]]`` of
    the relay's settings file (their host and port)."""
    out = [{"name": name, "console": url} for name, url in sorted(configured.items())]
    for sink in sinks:
        name = str(sink.get("name", "sink"))
        host = str(sink.get("host", "127.0.0.1"))
        port = sink.get("port", 7071)
        if isinstance(port, int) and port > 0:
            out.append({"name": name, "console": f"http://{host}:{port}/ui"})
    return out
