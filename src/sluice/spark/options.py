"""The ``sluice`` data source's options, parsed once on the driver (a picklable value)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sluice.core.names import check_relay_url, split_sources
from sluice.core.requests import DEBEZIUM_OPTIONS
from sluice.core.scn import parse_scn
from sluice.errors import ConfigError
from sluice.schemas.debezium import DebeziumOptions


@dataclass(frozen=True, slots=True)
class SourceOptions:
    relays: tuple[str, ...]
    sources: tuple[str, ...]
    starting: str  # "earliest", "latest", or an SCN as text
    ending: str | None  # batch reads: "latest" or an SCN
    bootstrap: str | None
    partitions: int
    max_events: int | None
    typed: bool
    include_raw: bool  # internal: seq, key_hash and payload for the bootstrap store
    arrow: bool = True  # False yields tuples (slower; kept for the benchmark)
    cold_read: bool = False  # ask relays for ranges older than their buffer (from the binlog)
    images: bool = True  # internal: False leaves before/after null (the bootstrap log)
    # internal (the bootstrap job): a range no relay or binlog holds any more becomes a gap
    # marker row (op "g") instead of failing the query
    mark_gaps: bool = False
    # format=debezium: Debezium's envelope as (key, value) JSON columns, with its options
    # given as ``debezium.<name>`` (decimal.handling.mode...)
    debezium: tuple[tuple[str, str], ...] | None = None
    # How a log range is cut into ``partitions``: "key" (each partition reads key partition
    # i/n of every window: a key's events stay in one partition, in order) or "scn" (whole
    # windows of consecutive SCN ranges, about equal in events: the relay sends its buffer's
    # bytes as they are, with no per-event filtering; the bootstrap log uses it)
    split: str = "key"


def _flag(options: Mapping[str, str], name: str) -> bool:
    value = options.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"option {name} must be true or false, got {value!r}")
    return value == "true"


def _positive(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {name} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise ConfigError(f"option {name} must be a positive integer, got {raw!r}")
    return value


def _scn_option(value: str, name: str, words: tuple[str, ...]) -> str:
    value = value.strip().lower()
    if value not in words:
        parse_scn(value)  # raises ConfigError naming the problem
    return value


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    options = {k.lower(): v for k, v in raw.items()}
    relays = tuple(u.strip() for u in options.get("relay", "").split(",") if u.strip())
    if not relays:
        raise ConfigError('the sluice source needs option("relay", "http://HOST:PORT")')
    for url in relays:
        check_relay_url(url)
    bootstrap = options.get("bootstrap")
    if bootstrap:
        check_relay_url(bootstrap)
    sources = tuple(split_sources(options.get("sources", "")))
    typed = _flag(options, "typed")
    if typed and len(sources) != 1:
        raise ConfigError("typed=true needs exactly one source in option sources")
    if _flag(options, "markgaps") and (typed or not _flag(options, "includeraw")):
        raise ConfigError("option markGaps needs includeRaw=true and typed=false")
    ending = options.get("endingscn")
    debezium = _debezium(options)
    if debezium is not None and (typed or _flag(options, "includeraw")):
        raise ConfigError("format=debezium gives key and value columns: leave typed unset")
    split = options.get("split", "key").strip().lower()
    if split not in ("key", "scn"):
        raise ConfigError(f"option split must be key or scn, got {split!r}")
    return SourceOptions(
        relays=relays,
        sources=sources,
        starting=_scn_option(
            options.get("startingscn", "earliest"), "startingScn", ("earliest", "latest")
        ),
        ending=_scn_option(ending, "endingScn", ("latest",)) if ending else None,
        bootstrap=bootstrap.rstrip("/") if bootstrap else None,
        partitions=_positive(options, "partitions") or 1,
        max_events=_positive(options, "maxeventspertrigger"),
        typed=typed,
        include_raw=_flag(options, "includeraw"),
        arrow=options.get("arrow", "true").strip().lower() != "false",
        cold_read=_flag(options, "coldread"),
        images=options.get("images", "true").strip().lower() != "false",
        mark_gaps=_flag(options, "markgaps"),
        debezium=debezium,
        split=split,
    )


def _debezium(options: Mapping[str, str]) -> tuple[tuple[str, str], ...] | None:
    fmt = options.get("format", "sluice").strip().lower()
    if fmt not in ("sluice", "debezium"):
        raise ConfigError(f"option format must be sluice or debezium, got {fmt!r}")
    if fmt != "debezium":
        return None
    chosen = tuple(
        sorted(
            (k.removeprefix("debezium."), v)
            for k, v in options.items()
            if k.startswith("debezium.")
        )
    )
    unknown = [k for k, _v in chosen if k not in DEBEZIUM_OPTIONS]
    if unknown:
        raise ConfigError(
            f"unknown option debezium.{unknown[0]}; known: "
            + ", ".join(f"debezium.{k}" for k in sorted(DEBEZIUM_OPTIONS))
        )
    DebeziumOptions.parse(dict(chosen))
    return chosen
