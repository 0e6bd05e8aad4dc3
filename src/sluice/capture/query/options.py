"""Per-table settings of a query source (``[tables."main.orders"]`` in the relay's TOML)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.errors import ConfigError

MODES = ("incrementing", "timestamp", "timestamp+incrementing", "bulk")
_KEYS = frozenset(
    {
        "mode",
        "timestamp_column",
        "incrementing_column",
        "soft_delete_column",
        "poll_interval",
        "delay",
        "page_rows",
    }
)
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@dataclass(frozen=True, slots=True)
class TableOptions:
    mode: str = "incrementing"
    timestamp_columns: tuple[str, ...] = ()
    incrementing_column: str | None = None
    soft_delete_column: str | None = None
    poll_interval_s: float = 1.0
    delay_s: float = 0.0
    page_rows: int = 5000

    @property
    def uses_timestamp(self) -> bool:
        return self.mode in ("timestamp", "timestamp+incrementing")

    @property
    def uses_incrementing(self) -> bool:
        return self.mode in ("incrementing", "timestamp+incrementing")


def duration(value: Any, what: str) -> float:
    """``"1s"``, ``"500ms"``, ``"2m"`` or a number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(f'{what} must be a duration like "1s" or "500ms", got {value!r}')
    return float(match.group(1)) * _UNIT[match.group(2)]


def parse_options(source: str, raw: Mapping[str, Any] | None) -> TableOptions:
    """A table's options, checked for shape (columns are checked against the table later)."""
    where = f'[tables."{source}"]'
    if not raw or "mode" not in raw:
        raise ConfigError(
            f"{where}: a query source needs each table's mode in the settings file: {where} "
            'mode = "timestamp+incrementing" (or "incrementing", "timestamp", "bulk"), with '
            "its columns"
        )
    raw = dict(raw)
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(_KEYS))}"
        )
    mode = raw.get("mode", "incrementing")
    if mode not in MODES:
        raise ConfigError(f"{where}: mode must be one of {', '.join(MODES)}, got {mode!r}")
    stamps = raw.get("timestamp_column", ())
    stamps = (stamps,) if isinstance(stamps, str) else tuple(stamps)
    if not all(isinstance(s, str) and s for s in stamps):
        raise ConfigError(f"{where}: timestamp_column must be a column name or a list of them")
    inc = raw.get("incrementing_column")
    soft = raw.get("soft_delete_column")
    for name, value in (("incrementing_column", inc), ("soft_delete_column", soft)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"{where}: {name} must be a column name, got {value!r}")
    options = TableOptions(
        mode=mode,
        timestamp_columns=stamps,
        incrementing_column=inc,
        soft_delete_column=soft,
        poll_interval_s=max(
            0.01, duration(raw.get("poll_interval", 1.0), f"{where} poll_interval")
        ),
        delay_s=duration(raw.get("delay", 0.0), f"{where} delay"),
        page_rows=_page_rows(raw.get("page_rows", 5000), where),
    )
    if options.uses_timestamp and not stamps:
        raise ConfigError(f'{where}: mode {mode!r} needs timestamp_column = "COLUMN"')
    if options.uses_incrementing and inc is None:
        raise ConfigError(f'{where}: mode {mode!r} needs incrementing_column = "COLUMN"')
    if not options.uses_timestamp and stamps:
        raise ConfigError(f"{where}: timestamp_column is set but mode {mode!r} does not use it")
    if not options.uses_incrementing and inc is not None and mode != "timestamp":
        raise ConfigError(f"{where}: incrementing_column is set but mode {mode!r} does not use it")
    return options


def _page_rows(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: page_rows must be a positive integer, got {value!r}")
    return value
