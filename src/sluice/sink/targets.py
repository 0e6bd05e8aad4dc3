"""Targets by URL scheme (each kind's module is imported on demand: its client library is an
optional dependency)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from sluice.errors import ConfigError
from sluice.sink.config import SinkConfig, redact
from sluice.sink.target import Target


@dataclass(frozen=True, slots=True)
class TargetKind:
    module: str
    route_param: str  # the URL query parameter that may hold the routing template
    default_route: str
    bodies: bool  # formatted bodies (brokers, webhooks) or images (tables)
    package: str  # what to pip install when the module's client library is missing
    extra: str = "sinks"  # the extra of sluice's that brings it


_SQL = TargetKind("sluice.sink.sql", "table", "{table}", False, "psycopg2-binary / PyMySQL")
KINDS: dict[str, TargetKind] = {
    "postgresql": _SQL,
    "postgres": _SQL,
    "mariadb": _SQL,
    "mysql": _SQL,
    "sqlite": _SQL,
    "nats": TargetKind("sluice.sink.nats", "subject", "sluice.{db}.{table}", True, "nats-py"),
    "redis": TargetKind("sluice.sink.redis", "stream", "sluice:{source}", True, "redis"),
    "amqp": TargetKind("sluice.sink.amqp", "routing_key", "{source}", True, "aio-pika"),
    "amqps": TargetKind("sluice.sink.amqp", "routing_key", "{source}", True, "aio-pika"),
    "kafka": TargetKind(
        "sluice.sink.kafka", "topic", "{prefix}.{db}.{table}", True, "confluent-kafka", "kafka"
    ),
    "http": TargetKind("sluice.sink.webhook", "", "{source}", True, "aiohttp"),
    "https": TargetKind("sluice.sink.webhook", "", "{source}", True, "aiohttp"),
}


def target_kind(url: str) -> TargetKind:
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:
        raise ConfigError(f"--to {redact(url)!r} is not a URL: {exc}") from None
    kind = KINDS.get(scheme)
    if kind is None:
        raise ConfigError(
            f"--to {redact(url)!r}: unknown target scheme {scheme + '://' if scheme else '(none)'}"
            f"; use one of {', '.join(s + '://' for s in sorted(KINDS))}"
        )
    return kind


def route_template(config: SinkConfig) -> str:
    """``--route``, else the URL's parameter (``?stream=``, ``?subject=``...), else the
    kind's default."""
    kind = target_kind(config.target_url)
    if config.route:
        return config.route
    if kind.route_param:
        query = dict(parse_qsl(urlsplit(config.target_url).query))
        if kind.route_param in query:
            return query[kind.route_param]
    return kind.default_route


def open_target(config: SinkConfig) -> Target:
    kind = target_kind(config.target_url)
    try:
        module = importlib.import_module(kind.module)
    except ImportError as exc:
        if (exc.name or "").startswith("sluice"):
            raise  # our own code, not a missing client library
        raise ConfigError(
            f"the {urlsplit(config.target_url).scheme}:// target needs {kind.package}: "
            f"pip install 'sluice[{kind.extra}]' ({exc})"
        ) from None
    target: Target = module.open_target(config)
    return target
