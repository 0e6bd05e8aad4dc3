"""The client's settings: where to read (``ClientConfig``) and how to retry (``RetryPolicy``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sluice.client.transport import check_relay_url
from sluice.errors import ConfigError
from sluice.schemas.debezium import DebeziumOptions


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff for a failing consumer window and for unreachable relays."""

    initial_s: float = 0.1
    max_s: float = 5.0
    max_window_attempts: int = 10  # then ConsumerFailed; the checkpoint stays put
    give_up_after_s: float | None = None  # no relay answering this long: RelayUnavailable
    # An outage's retry lines are INFO until it has lasted this long, WARNING after: a relay
    # restart, or a give-up sooner than this, shows only its outcome (the give-up's error).
    warn_after_s: float = 10.0

    def outage_level(self, lasted_s: float) -> int:
        """The log level of a retry when no relay has answered for ``lasted_s``."""
        return logging.WARNING if lasted_s >= self.warn_after_s else logging.INFO

    def delay(self, attempt: int) -> float:
        # the exponent is capped: 2 ** 1100 no longer converts to a float (a client retrying
        # an unreachable relay for hours got there)
        return float(min(self.max_s, self.initial_s * (2 ** min(max(attempt - 1, 0), 60))))


@dataclass(frozen=True, slots=True)
class ClientConfig:
    relays: tuple[str, ...]
    sources: tuple[str, ...] = ()
    partition: str | None = None
    since_scn: int | None = None  # without a checkpoint; None: the oldest SCN the relay holds
    bootstrap: str | None = None  # a bootstrap server: snapshot + catch-up when behind
    poll_timeout_ms: int = 10_000
    checkpoint_interval_s: float = 0.1  # saves are batched; replays stay at-least-once
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # A JsonConsumer gets Debezium envelopes instead of Sluice's JSON: Debezium's options
    # (``decimal.handling.mode``...), possibly none
    debezium: tuple[tuple[str, str], ...] | None = None
    # Who this client is, told to relays (their console lists it and links to ``console``)
    name: str | None = None
    console: str | None = None

    def __post_init__(self) -> None:
        if not self.relays:
            raise ConfigError("give at least one relay URL")
        if self.debezium is not None:
            DebeziumOptions.parse(dict(self.debezium))
        for url in (*self.relays, *([self.bootstrap] if self.bootstrap else [])):
            check_relay_url(url)
