"""The relay's configuration model."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from sluice.core.names import canonical_source
from sluice.errors import ConfigError
from sluice.settings import SluiceSettings

log = logging.getLogger(__name__)


class RelayConfig(SluiceSettings):
    """``sluice relay`` settings: TOML file keys are these field names."""

    source: SecretStr = Field(description="mysql://USER[:PASSWORD]@HOST:PORT[?server_id=N]")
    tables: list[str] = Field(min_length=1, description="captured tables, DB.TABLE")
    # Per-table settings of sources that take them (query sources): ``[tables."DB.T"]`` in
    # the TOML file, which then also names the tables.
    table_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    data_dir: Path
    # ``[[sinks]]`` of the same file are ``sluice sink``'s (sink/config.py); the relay only
    # lists their names
    sinks: list[dict[str, Any]] = Field(default_factory=list)
    # What the console calls this relay, and consoles it links to (a bootstrap server...)
    name: str = Field(default="relay", pattern=r"^[A-Za-z0-9_.-]+$")
    links: dict[str, str] = Field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = Field(default=7070, ge=0, le=65535)
    since_scn: int | None = Field(default=None, ge=0)
    buffer_size: int = Field(default=64 * 1024 * 1024, ge=64 * 1024)
    # Disk for windows too big for the buffer, each in a file beside it (relay/windows.py);
    # None: 17 times buffer_size (a transaction of 16 buffers fits). Older windows are
    # evicted to make room; a single transaction bigger than this stops capture with an
    # error naming the setting.
    window_files_bytes: int | None = Field(default=None, ge=64 * 1024)
    max_response_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    long_poll_ms: int = Field(default=10_000, ge=0, le=300_000)
    capture_queue: int = Field(default=256, ge=1)
    # At most one flush of the buffer and its state file per this many ms: a crash makes the
    # relay read at most this much again from the source, never lose it (single-row
    # transactions would otherwise flush once per handful of windows).
    persist_interval_ms: int = Field(default=100, ge=0, le=60_000)
    # Streams served at once; more get a fast 503 with Retry-After (/healthz, /stats exempt).
    max_clients: int = Field(default=1000, ge=1)
    # A connection without a complete request after this long is closed (slowloris, idle
    # keep-alive connections); a stream in progress is not affected.
    header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    # A row capture cannot decode: stop capturing its table (the others go on), or skip it.
    on_decode_error: Literal["stop_source", "skip"] = "stop_source"

    @model_validator(mode="before")
    @classmethod
    def _server_id_moved(cls, data: Any) -> Any:
        """``server_id`` was a relay setting; it is the MySQL source URL's now
        (``mysql://USER@HOST:PORT?server_id=N``). An older file's key is moved there."""
        if not isinstance(data, dict) or "server_id" not in data:
            return data
        data = dict(data)
        server_id, source = data.pop("server_id"), data.get("source")
        if server_id is None or source is None:
            return data
        url = source.get_secret_value() if isinstance(source, SecretStr) else str(source)
        query = urlsplit(url).query
        if "server_id" not in parse_qs(query):
            data["source"] = f"{url}{'&' if query else '?'}server_id={int(server_id)}"
        log.warning(
            "the relay setting server_id is deprecated: give it in the source URL "
            "(mysql://USER@HOST:PORT?server_id=%s)",
            server_id,
        )
        return data

    @model_validator(mode="before")
    @classmethod
    def _tables_with_options(cls, data: Any) -> Any:
        """``[tables."DB.T"]`` sections: the table names, and their settings."""
        if isinstance(data, dict) and isinstance(data.get("tables"), dict):
            sections = data["tables"]
            data = {**data, "tables": list(sections)}
            data["table_options"] = {**sections, **data.get("table_options", {})}
        return data

    @property
    def window_files_limit(self) -> int:
        return self.window_files_bytes or 17 * self.buffer_size

    @field_validator("links")
    @classmethod
    def _links_are_urls(cls, links: dict[str, str]) -> dict[str, str]:
        for name, url in links.items():
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"link {name}={url!r}: expected NAME=http://HOST:PORT/ui")
        return links

    @field_validator("table_options")
    @classmethod
    def _options_named(cls, options: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        try:
            return {canonical_source(table): dict(v) for table, v in options.items()}
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("tables")
    @classmethod
    def _tables_named(cls, tables: list[str]) -> list[str]:
        try:
            return [canonical_source(table) for table in tables]
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
