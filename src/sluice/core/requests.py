"""Parsing ``/stream`` query strings (relay and bootstrap server) into a validated request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sluice.core.names import split_sources
from sluice.core.wire import Filter
from sluice.errors import ConfigError

# SCNs are 63-bit: the bootstrap store keeps them as int64 (Parquet, Spark), and no source
# kind makes a larger one. Both servers refuse a bigger since_scn here, alike.
MAX_SCN = 2**63 - 1


class HttpProblem(Exception):
    """An HTTP error answer: status and a JSON body."""

    def __init__(
        self, status: int, message: str, headers: dict[str, str] | None = None, **extra: object
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
        self.body: dict[str, object] = {"error": message, **extra}


# Debezium's option names ``format=debezium`` takes (checked in schemas/debezium.py).
DEBEZIUM_OPTIONS = frozenset(
    {
        "decimal.handling.mode",
        "time.precision.mode",
        "binary.handling.mode",
        "schemas.enable",
        "topic.prefix",
        "bigint.unsigned.handling.mode",
        "provide.transaction.metadata",
        "keys",
        "unavailable.value.placeholder",
        "skipped.operations",
        "tombstones.on.delete",
    }
)


@dataclass(frozen=True, slots=True)
class StreamRequest:
    since_scn: int
    sources: tuple[str, ...]
    filter: Filter
    json: bool
    max_bytes: int
    timeout_ms: int
    # format=debezium: Debezium's option names and values given (JSON lines of its envelope)
    debezium: tuple[tuple[str, str], ...] | None = None


def _int(query: Mapping[str, str], name: str, default: int | None, lo: int, hi: int) -> int:
    raw = query.get(name)
    if raw is None:
        if default is None:
            raise HttpProblem(400, f"missing query parameter {name}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpProblem(400, f"{name} must be an integer, got {raw[:40]!r}") from None
    if not lo <= value <= hi:
        raise HttpProblem(400, f"{name} must be in {lo}..{hi}, got {value}")
    return value


def parse_partition(raw: str | None) -> tuple[int, int] | None:
    if raw is None:
        return None
    index, slash, count = raw.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        raise HttpProblem(400, f"partition must be i/n, got {raw[:40]!r}") from None
    if not slash or n < 1 or not 0 <= i < n:
        raise HttpProblem(400, f"partition must be i/n with 0 <= i < n, got {raw[:40]!r}")
    return (i, n) if n > 1 else None


def parse_stream(
    query: Mapping[str, str], known: frozenset[str], max_bytes: int, long_poll_ms: int
) -> StreamRequest:
    since = _int(query, "since_scn", None, 0, MAX_SCN)
    try:
        sources = tuple(split_sources(query.get("sources", "")))
    except ConfigError as exc:
        raise HttpProblem(400, str(exc)) from None
    unknown = [s for s in sources if s not in known]
    if unknown:
        raise HttpProblem(
            404,
            f"unknown source {unknown[0]!r}; this relay captures: " + ", ".join(sorted(known)),
            sources=sorted(known),
        )
    fmt = query.get("format", "binary")
    if fmt not in ("binary", "json", "debezium"):
        raise HttpProblem(400, f"format must be binary, json or debezium, got {fmt[:20]!r}")
    debezium = None
    if fmt == "debezium":
        debezium = tuple(sorted((k, v) for k, v in query.items() if k in DEBEZIUM_OPTIONS))
    flt = Filter(
        frozenset(s.encode() for s in sources) if sources and set(sources) != known else None,
        parse_partition(query.get("partition")),
    )
    return StreamRequest(
        since_scn=since,
        sources=sources,
        filter=flt,
        json=fmt != "binary",
        debezium=debezium,
        max_bytes=_int(query, "max_bytes", max_bytes, 1, 256 * 1024 * 1024),
        timeout_ms=_int(query, "timeout_ms", long_poll_ms, 0, 300_000),
    )


@dataclass(frozen=True, slots=True)
class OffsetsRequest:
    since_scn: int
    filter: Filter
    max_events: int


def parse_offsets(query: Mapping[str, str], known: frozenset[str]) -> OffsetsRequest:
    """``/offsets?since_scn=N&max_events=M[&sources=a,b]``: where M events after N end."""
    stream = parse_stream(query, known, 1, 0)
    max_events = _int(query, "max_events", 2**62, 1, 2**62)
    return OffsetsRequest(stream.since_scn, Filter(stream.filter.sources, None), max_events)


# Headers a client sends with /stream to say who it is: its name and its console's URL (the
# relay's console lists and links them)
CLIENT_HEADER = "X-Sluice-Client"
CONSOLE_HEADER = "X-Sluice-Console"
