"""``sluice sink`` settings: flags, or a ``[[sinks]]`` entry of the relay's TOML file.

```toml
port = 7070                 # the relay's own settings ...
[[sinks]]
name = "orders-pg"
to = "postgresql://repl@db2:5432/shop"
relays = ["http://127.0.0.1:7070"]   # default: this file's relay (host, port)
exclude_columns = ["shop.orders.card"]
```
Environment overrides: ``SLUICE_SINK_<FIELD>``. Flags win over both.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import SplitResult, parse_qsl, urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sluice.core.names import canonical_source, redact
from sluice.errors import ConfigError
from sluice.settings import describe_errors

__all__ = ["redact"]  # where sinks have always found it


class SinkConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SLUICE_SINK_", extra="forbid", frozen=True)

    to: SecretStr = Field(description="the target URL")
    name: str = Field(default="sink", pattern=r"^[A-Za-z0-9_.-]+$")
    relays: list[str] = Field(min_length=1)
    bootstrap: str | None = None
    sources: list[str] = Field(default_factory=list)
    since_scn: int | None = Field(default=None, ge=0)
    checkpoint_dir: Path | None = None
    schema_registry: str | None = None  # Kafka's --format avro: where its schemas go
    format: Literal["json", "debezium", "avro"] = "json"
    debezium_options: dict[str, str] = Field(default_factory=dict)
    include_columns: list[str] = Field(default_factory=list)
    exclude_columns: list[str] = Field(default_factory=list)
    filter: str | None = None
    filters: dict[str, str] = Field(default_factory=dict)  # per source
    route: str | None = None  # default: the target kind's (or its URL's parameter)
    origin: str | None = None  # default: derived from the relay's source
    host: str = "127.0.0.1"
    port: int = Field(default=7071, ge=0, le=65535)
    retry_initial_s: float = Field(default=0.5, gt=0)
    retry_max_s: float = Field(default=30.0, gt=0)
    give_up_after_s: float | None = Field(default=None, gt=0)  # no relay: exit 1 after this
    batch_events: int = Field(default=1000, ge=1)  # webhooks: events per POST at most
    max_attempts: int = Field(default=8, ge=1)  # webhooks: then the dead-letter directory
    dead_letter_dir: Path | None = None
    timeout_s: float = Field(default=30.0, gt=0)  # one request to the target
    # Database and Kafka targets commit windows in groups: at most this long after the first
    # held window (Kafka: 0.02 s), or at this many rows (exactly once either way: the
    # checkpoint commits with them)
    commit_interval_s: float = Field(default=0.1, ge=0, le=60)
    commit_rows: int = Field(default=20_000, ge=1)
    # One key partition of the stream (``I/N``, the relay's ``partition=``): fixed by hand, or
    # set per partition by a group (``sink/group.py``), which shares N partitions among its
    # members through the coordinator.
    partition: str | None = Field(default=None, pattern=r"^\d+/\d+$")
    group: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$")
    coordinator: SecretStr | None = None  # zk://HOST:PORT[,...]/PATH
    partitions: int | None = Field(default=None, ge=1, le=4096)
    quorum: int = Field(default=1, ge=1)
    session_timeout_s: float = Field(default=10.0, ge=1, le=600)

    @model_validator(mode="after")
    def _group_complete(self) -> SinkConfig:
        grouped = (self.group, self.coordinator, self.partitions)
        if any(v is not None for v in grouped) and any(v is None for v in grouped):
            raise ValueError(
                "a group needs --group NAME, --coordinator zk://HOST:PORT/PATH and "
                "--partitions N together"
            )
        if self.group is not None and self.partition is not None:
            raise ValueError("--partition is fixed by hand; a --group deals its partitions itself")
        if self.partition is not None:
            index, count = (int(x) for x in self.partition.split("/"))
            if not 0 <= index < count:
                raise ValueError(f"partition must be I/N with 0 <= I < N, got {self.partition}")
        return self

    @model_validator(mode="before")
    @classmethod
    def _kafka_defaults(cls, values: Any) -> Any:
        """Kafka speaks Debezium's format unless told otherwise (its users' consumers do), and
        commits a transaction every 20 ms (benchmarks/kafka.py: p99 commit-to-consumer 31 ms
        at 1,000 commits/s, against 155 ms at 0.1 s; at 5 ms a transaction outlasts the
        interval and the sink falls behind)."""
        if not isinstance(values, dict):
            return values
        to = values.get("to")
        url = to.get_secret_value() if isinstance(to, SecretStr) else str(to or "")
        if not url.lower().startswith("kafka://"):
            return values
        defaults = {"format": "debezium", "commit_interval_s": 0.02}
        return {**values, **{k: v for k, v in defaults.items() if values.get(k) is None}}

    @field_validator("sources")
    @classmethod
    def _sources_named(cls, sources: list[str]) -> list[str]:
        try:
            return [canonical_source(s) for s in sources]
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("filters")
    @classmethod
    def _filters_named(cls, filters: dict[str, str]) -> dict[str, str]:
        try:
            return {canonical_source(s): text for s, text in filters.items()}
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @property
    def target_url(self) -> str:
        return self.to.get_secret_value()


def split_target_url(
    url: str, default_port: int, expected: str, options: tuple[str, ...]
) -> tuple[SplitResult, int, list[tuple[str, str]]]:
    """A target URL's parts, its port and its query parameters, or a one-line ``ConfigError``
    naming the expected form (a bad port, no host, a parameter not in ``options``)."""
    shown = redact(url)
    try:
        parts = urlsplit(url)
        port = parts.port or default_port
    except ValueError as exc:
        raise ConfigError(f"--to {shown!r} is not a valid URL: {exc}; {expected}") from None
    if not parts.hostname:
        raise ConfigError(f"--to {shown!r}: {expected}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    for key, _ in query:
        if key not in options:
            raise ConfigError(
                f"--to {shown!r}: unknown parameter {key!r}; use {', '.join(options)}"
            )
    return parts, port, query


def load_sink_config(config_file: Path | None, name: str | None, **flags: Any) -> SinkConfig:
    """Flags (None: not given) over ``SLUICE_SINK_*`` over the file's ``[[sinks]]`` entry."""
    values: dict[str, Any] = {}
    if config_file is not None:
        values = _from_file(config_file, name)
    if name is not None:
        values["name"] = name
    values.update({k: v for k, v in flags.items() if v not in (None, [], {})})
    try:
        return SinkConfig(**values)
    except ValidationError as exc:
        raise ConfigError(describe_errors(exc, "SLUICE_SINK_")) from None


def _from_file(path: Path, name: str | None) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    sinks = data.get("sinks", [])
    if not isinstance(sinks, list) or not all(isinstance(s, dict) for s in sinks):
        raise ConfigError(f"config file {path}: `sinks` must be [[sinks]] tables")
    named = [s for s in sinks if name is None or s.get("name") == name]
    if not named:
        known = ", ".join(repr(s.get("name")) for s in sinks) or "none"
        raise ConfigError(
            f"config file {path} has no [[sinks]] entry named {name!r} (entries: {known})"
        )
    if len(named) > 1:
        raise ConfigError(f"config file {path} has several [[sinks]]: pick one with --name")
    entry = dict(named[0])
    if "relays" not in entry and ("port" in data or "host" in data):
        host = str(data.get("host", "127.0.0.1"))
        entry["relays"] = [
            f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{data.get('port', 7070)}"
        ]
    return entry
