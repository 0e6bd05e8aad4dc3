"""The ``kafka://`` target URL and how Kafka's errors read to the sink.

``kafka://HOST:PORT[,HOST:PORT...][?topic=TEMPLATE&partitions=N&replication_factor=N
&transactions=true|false&checkpoint_topic=NAME&transactional_id=ID&kafka.SETTING=VALUE]``

``kafka.SETTING`` passes a librdkafka setting through to the producer, the consumer that reads
the checkpoint and the admin client alike (``kafka.security.protocol=SASL_SSL``,
``kafka.sasl.username=...``): what the sink itself must hold (idempotence, acks, the
partitioner, the transactional id) cannot be overridden.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from confluent_kafka import KafkaError, KafkaException

from sluice.errors import ConfigError, SluiceError
from sluice.sink.config import redact
from sluice.sink.target import TargetUnavailable

EXPECTED = (
    "expected kafka://HOST:PORT[,HOST:PORT...][?topic=TEMPLATE&partitions=N"
    "&replication_factor=N&transactions=true|false&checkpoint_topic=NAME]"
)
OWN_OPTIONS = (
    "topic", "partitions", "replication_factor", "transactions", "checkpoint_topic",
    "transactional_id",
)  # fmt: skip
CHECKPOINT_TOPIC = "sluice-checkpoints"
# What the sink's guarantees rest on: not to be overridden by kafka.* settings
HELD_SETTINGS = frozenset(
    ("bootstrap.servers", "enable.idempotence", "acks", "partitioner", "transactional.id",
     "isolation.level", "enable.auto.commit")
)  # fmt: skip
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


@dataclass(frozen=True, slots=True)
class KafkaUrl:
    servers: str  # bootstrap.servers
    partitions: int  # of topics made here
    replication_factor: int  # of topics made here (-1: the broker's default)
    transactions: bool
    checkpoint_topic: str
    transactional_id: str | None  # None: from the sink's name
    settings: tuple[tuple[str, str], ...]  # kafka.* pass-through
    display: str


def parse_kafka_url(url: str) -> KafkaUrl:
    """The target URL, or a one-line ``ConfigError`` saying what is wrong."""
    shown = redact(url)
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"--to {shown!r} is not a valid URL: {exc}; {EXPECTED}") from None
    servers = []
    for server in unquote(parts.netloc.rpartition("@")[2]).split(","):
        match = _HOST_PORT.match(server.strip())
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise ConfigError(f"--to {shown!r}: {server.strip() or '(none)'!r} is not HOST:PORT; "
                              f"{EXPECTED}")  # fmt: skip
        servers.append(server.strip())
    if parts.path.strip("/"):
        raise ConfigError(f"--to {shown!r}: a Kafka URL has no path (the topic is ?topic=)")
    options: dict[str, str] = {}
    settings: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key.startswith("kafka."):
            name = key[len("kafka.") :]
            if name in HELD_SETTINGS:
                raise ConfigError(f"--to {shown!r}: {key} is the sink's own to set")
            settings.append((name, value))
        elif key in OWN_OPTIONS:
            options[key] = value
        else:
            raise ConfigError(
                f"--to {shown!r}: unknown parameter {key!r}; use {', '.join(OWN_OPTIONS)} "
                "or kafka.SETTING (a librdkafka setting)"
            )
    checkpoint_topic = options.get("checkpoint_topic", CHECKPOINT_TOPIC)
    check_topic(checkpoint_topic, "checkpoint_topic")
    return KafkaUrl(
        servers=",".join(servers),
        partitions=_number(options, "partitions", 1, 1, shown),
        replication_factor=_number(options, "replication_factor", -1, -1, shown),
        transactions=_flag(options.get("transactions", "true"), shown),
        checkpoint_topic=checkpoint_topic,
        transactional_id=options.get("transactional_id") or None,
        settings=tuple(settings),
        display=f"kafka://{','.join(servers)}",
    )


def check_topic(topic: str, what: str = "topic") -> str:
    if not _TOPIC.match(topic) or topic in (".", ".."):
        raise ConfigError(
            f"{what} {topic!r} is not a valid Kafka topic name (1-249 of A-Z a-z 0-9 . _ -): "
            "change the topic template (--route or ?topic=)"
        )
    return topic


def _number(options: dict[str, str], key: str, default: int, low: int, shown: str) -> int:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low or value == 0:
        raise ConfigError(f"--to {shown!r}: {key} must be a positive whole number, got {text!r}")
    return value


def _flag(text: str, shown: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ConfigError(f"--to {shown!r}: transactions must be true or false, got {text!r}")
    return text.lower() == "true"


def refusal(exc: BaseException, where: str) -> SluiceError:
    """A Kafka error as the sink reads it: ``ConfigError`` for what waiting cannot fix (it
    stops the sink with this line), ``TargetUnavailable`` for the rest (retried)."""
    if isinstance(exc, SluiceError):
        return exc
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(error, KafkaError):
        return TargetUnavailable(f"{where}: {exc or type(exc).__name__}")
    code, text = error.code(), error.str()
    if code == KafkaError.MSG_SIZE_TOO_LARGE:
        return ConfigError(
            f"{where}: a message is larger than the topic's max.message.bytes or the "
            f"producer's message.max.bytes ({text}): raise the topic's max.message.bytes "
            "(kafka-configs --alter) and the producer's with ?kafka.message.max.bytes=N"
        )
    if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED):  # fmt: skip
        return ConfigError(
            f"{where}: not authorized ({text}): grant the sink's principal Write and Describe "
            "on its topics (and Create to make them), Write on its transactional id"
        )
    if code in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED):
        return ConfigError(
            f"{where}: another producer took this sink's transactional id over ({text}): "
            "two sinks of the same name write to this cluster; stop one, or rename it"
        )
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return ConfigError(f"{where} refused the login: {text}")
    if code in (KafkaError.INVALID_CONFIG, KafkaError._INVALID_ARG, KafkaError.POLICY_VIOLATION,
                KafkaError.TOPIC_EXCEPTION, KafkaError.INVALID_REPLICATION_FACTOR,
                KafkaError.INVALID_PARTITIONS, KafkaError.INVALID_TRANSACTION_TIMEOUT):  # fmt: skip
        return ConfigError(f"{where}: {text}")
    return TargetUnavailable(f"{where}: {text}")
