"""``AmqpTarget``: RabbitMQ (``amqp://`` / ``amqps://``), at least once.

``amqp://USER:PASSWORD@HOST:PORT/VHOST?exchange=NAME&routing_key=TEMPLATE``: each change is
one persistent message (``delivery_mode`` 2) published to the exchange (default ``sluice``)
with the rendered routing key, and the batch counts as delivered once the broker confirmed
every message (publisher confirms). A message the broker nacks or returns (no queue bound for
its routing key: ``mandatory``), a lost connection or a confirm that does not come within
``timeout_s`` makes the batch fail with ``TargetUnavailable``: the sink backs off and publishes
it again, so nothing is dropped.

Why at least once: RabbitMQ has no broker-side dedupe, so a batch published again (after a
failure, a restart or a SIGKILL before the checkpoint was saved) reaches the queues twice.
Every message carries a stable ``message_id`` (the change's id, derived from origin, SCN and
index) for consumers to drop the repeats. The exchange is checked passively first; a missing
one is declared durable ``topic``; one that exists is used as it is (any type).

Publishing: the messages of a batch go out on one channel in the batch's order (RabbitMQ keeps
a channel's order), in runs of ``PIPELINE`` whose confirms are awaited together, the next run
going out while they come:
against a local broker ~6,200 msg/s, vs ~1,300 msg/s awaiting each confirm in turn (10 in
flight: ~3,800; 100: ~5,800; more than 1,000 gains nothing). Each message is published through
aio-pika's own AMQP layer (aiormq's ``basic_publish``, what ``Exchange.publish`` calls) with
the properties ``aio_pika.Message`` would build (``message_properties``), without waiting for
each frame to reach the socket: the confirm says more, and is awaited all the same (issue 40:
``aio_pika.Message`` and the per-message drain cost about as much CPU as the broker's work).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any, NoReturn, cast
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import aio_pika
import aiormq
import aiormq.exceptions as amqp_errors
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange
from aiormq import spec

from sluice.errors import ConfigError, SluiceError
from sluice.sink.config import SinkConfig, redact
from sluice.sink.shape import CONTENT_TYPES
from sluice.sink.target import Batch, Change, CheckpointInAFile, Delivery, TargetUnavailable

log = logging.getLogger(__name__)

PIPELINE = 1000  # messages whose confirms are awaited together
DEFAULT_EXCHANGE = "sluice"
OWN_OPTIONS = ("exchange", "routing_key")
# what aio-pika itself reads from the URL's query
CLIENT_OPTIONS = ("heartbeat", "name", "auth", "cafile", "capath", "cadata", "keyfile",
                  "certfile", "no_verify_ssl")  # fmt: skip


@dataclass(frozen=True, slots=True)
class AmqpUrl:
    connect_url: str  # for aio-pika: the URL without Sluice's own parameters
    exchange: str
    user: str
    vhost: str
    display: str  # no password, no query


def parse_amqp_url(url: str) -> AmqpUrl:
    """The target URL, or a one-line ``ConfigError``."""
    shown = redact(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a bad port)
    except ValueError as exc:
        raise ConfigError(f"--to {shown!r} is not a valid URL: {exc}") from None
    if not parts.hostname:
        raise ConfigError(
            f"--to {shown!r}: expected {parts.scheme}://USER:PASSWORD@HOST[:PORT]/[VHOST]"
            "[?exchange=NAME&routing_key=TEMPLATE]"
        )
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = dict(query)
    for key, value in query:
        if key not in OWN_OPTIONS and key not in CLIENT_OPTIONS:
            raise ConfigError(
                f"--to {shown!r}: unknown parameter {key!r}; use "
                + ", ".join(OWN_OPTIONS + CLIENT_OPTIONS)
            )
        if not value and key in OWN_OPTIONS:
            raise ConfigError(f"--to {shown!r}: {key}= is empty; name one or leave it out")
    exchange = options.get("exchange", DEFAULT_EXCHANGE)
    if len(exchange.encode()) > 255:
        raise ConfigError(f"--to {shown!r}: the exchange name is longer than 255 bytes")
    passed = urlencode([(k, v) for k, v in query if k in CLIENT_OPTIONS])
    vhost = unquote(parts.path[1:]) if len(parts.path) > 1 else "/"
    port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
    return AmqpUrl(
        connect_url=urlunsplit(parts._replace(query=passed, fragment="")),
        exchange=exchange,
        user=unquote(parts.username or "guest"),
        vhost=vhost,
        display=f"{parts.scheme}://{parts.username + '@' if parts.username else ''}"
        f"{parts.hostname}:{port}/{parts.path[1:]} exchange={exchange}",
    )


def message_properties(change: Change, content_type: str) -> spec.Basic.Properties:
    """The properties ``aio_pika.Message(change.body, message_id=change.id, delivery_mode=
    PERSISTENT, headers=change.headers(), content_type=..., timestamp=change.ts_ms // 1000,
    app_id="sluice").properties`` holds, field for field (its priority 0 included), built
    directly (``tests/unit/test_sink_amqp_properties.py`` compares their frames)."""
    return spec.Basic.Properties(
        app_id="sluice",
        content_type=content_type,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        headers=change.headers(),  # type: ignore[arg-type]
        message_id=change.id,
        priority=0,
        timestamp=dt.datetime.fromtimestamp(change.ts_ms // 1000, tz=dt.UTC),
    )


def _reported_here(record: logging.LogRecord) -> bool:
    """Drops aiormq's own records of a refused or lost connection (a traceback each time):
    the sink logs the same failure, as one line, with each retry. Other reader failures (a
    malformed frame) keep their traceback."""
    if record.msg == "error when creating transport: %r":
        return False
    if record.msg == "Cancelling cause reader exited abnormally" and record.exc_info:
        return not isinstance(record.exc_info[1], OSError)
    return True


class AmqpTarget(CheckpointInAFile):
    kind = "amqp"
    delivery: Delivery = "at-least-once"
    keeps_checkpoint = False
    wants_bodies = True
    holds_windows = True  # a batch may hold many windows: see holding.py
    wants_keys = False  # no field for the key text

    def __init__(self, config: SinkConfig) -> None:
        self.url = parse_amqp_url(config.target_url)
        aiormq_log = logging.getLogger("aiormq.connection")
        if _reported_here not in aiormq_log.filters:
            aiormq_log.addFilter(_reported_here)
        self.timeout_s = config.timeout_s
        self.content_type = CONTENT_TYPES[config.format]
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._raw: aiormq.Channel | None = None  # the channel's AMQP layer
        self.published = self.confirms = self.returned = self.nacked = self.connects = 0
        self.last_error: str | None = None

    def describe(self) -> str:
        return self.url.display

    def stats(self) -> dict[str, Any]:
        return {
            "exchange": self.url.exchange,
            "published": self.published,
            "confirms": self.confirms,
            "returned": self.returned,
            "nacked": self.nacked,
            "connects": self.connects,
            "last_error": self.last_error,
        }

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self._connect()

    async def stop(self) -> None:
        await self._drop()

    async def rollback(self) -> None:
        return None  # nothing to undo: what was confirmed stays, the batch comes again

    # -- delivering ----------------------------------------------------------------------------
    async def deliver(self, batch: Batch) -> None:
        if not batch.changes:
            return
        for change in batch.changes:
            if len(change.route.encode()) > 255:
                raise ConfigError(
                    f"routing key {change.route[:60]!r}... of {change.source} is longer than "
                    "RabbitMQ's 255 bytes: shorten the routing_key template"
                )
        await self._connect()
        assert self._raw is not None
        await self._publish_all(self._raw, batch.changes)
        self.last_error = None

    async def _publish_all(self, channel: aiormq.Channel, changes: tuple[Change, ...]) -> None:
        """``PIPELINE`` publishes at a time, their confirms awaited together, and the next
        ``PIPELINE`` already going out meanwhile (awaiting each run before starting the next
        left the channel idle while a run's last confirms came). The publishes start in order
        and queue on the channel's lock in that order, so the broker gets them in the batch's
        order. After a failure no new run starts; the runs in flight are counted, then the
        batch fails (it is published again)."""
        results: list[Any] = []
        inflight: list[asyncio.Future[list[Any]]] = []
        try:
            for start in range(0, len(changes), PIPELINE):
                run = [self._publish(channel, c) for c in changes[start : start + PIPELINE]]
                inflight.append(asyncio.gather(*run, return_exceptions=True))
                if len(inflight) > 1:
                    results += await self._confirmed(inflight.pop(0))
                    if any(isinstance(r, BaseException) for r in results):
                        break
            while inflight:
                results += await self._confirmed(inflight.pop(0))
        except TimeoutError:
            await self._failed(f"no confirm within {self.timeout_s:g} s", drop=True)
        finally:
            for run_ in inflight:  # a timeout, or the sink stopping: none goes on publishing
                run_.cancel()
        failures = [r for r in results if isinstance(r, BaseException)]
        self.confirms += len(results) - len(failures)
        if not failures:
            return
        first = failures[0]
        if isinstance(first, amqp_errors.PublishError):  # returned: no queue took it
            self.returned += sum(isinstance(f, amqp_errors.PublishError) for f in failures)
            await self._failed(
                f"no queue is bound for routing key {first.args[1]!r} on exchange "
                f"{self.url.exchange!r} ({first.args[0]}): publishing it again until one is"
            )
        if isinstance(first, amqp_errors.DeliveryError):
            self.nacked += sum(isinstance(f, amqp_errors.DeliveryError) for f in failures)
            await self._failed(f"the broker refused a message ({first})")
        await self._failed(_reason(first), drop=True)

    async def _confirmed(self, run: asyncio.Future[list[Any]]) -> list[Any]:
        """A run's outcomes (None or its error, per message); ``TimeoutError`` when its
        confirms do not all come within ``timeout_s``."""
        async with asyncio.timeout(self.timeout_s):
            return await run

    async def _publish(self, channel: aiormq.Channel, change: Change) -> None:
        """One message, its confirm awaited (a nack raises ``DeliveryError``, a return
        ``PublishError``: the channel raises on returns, as ``Exchange.publish`` would)."""
        properties = message_properties(change, self.content_type)
        self.published += 1
        await channel.basic_publish(
            change.body, exchange=self.url.exchange, routing_key=change.route,
            properties=properties, mandatory=True, wait=False,
        )  # fmt: skip

    async def _failed(self, reason: str, *, drop: bool = False) -> NoReturn:
        self.last_error = reason
        if drop:
            await self._drop()
        raise TargetUnavailable(f"RabbitMQ {self.describe()}: {reason}")

    # -- connecting ----------------------------------------------------------------------------
    async def _connect(self) -> AbstractExchange:
        channel, exchange = self._channel, self._exchange
        if exchange is not None and channel is not None and not channel.is_closed:
            return exchange
        await self._drop()
        try:
            self._connection = await aio_pika.connect(self.url.connect_url, timeout=self.timeout_s)
            self._channel, self._exchange = await self._open_exchange(self._connection)
            # aiormq's own channel: its basic_publish takes wait=False (not in the ABC)
            self._raw = cast(aiormq.Channel, await self._channel.get_underlay_channel())
        except SluiceError:
            await self._drop()
            raise
        except (amqp_errors.AMQPError, OSError, TimeoutError, RuntimeError) as exc:
            await self._drop()
            refused = self._refusal(exc)
            if refused is not None:
                raise refused from None
            self.last_error = _reason(exc)
            raise TargetUnavailable(f"RabbitMQ {self.describe()}: {self.last_error}") from None
        self.connects += 1
        log.info("connected to RabbitMQ %s", self.describe())
        return self._exchange

    async def _open_exchange(
        self, connection: AbstractConnection
    ) -> tuple[AbstractChannel, AbstractExchange]:
        """The exchange as it is, or a durable topic exchange when there is none."""
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        try:
            return channel, await channel.get_exchange(self.url.exchange, ensure=True)
        except amqp_errors.ChannelNotFoundEntity:
            pass  # the broker closed that channel
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        exchange = await channel.declare_exchange(
            self.url.exchange, aio_pika.ExchangeType.TOPIC, durable=True
        )
        log.info("declared the durable topic exchange %r", self.url.exchange)
        return channel, exchange

    def _refusal(self, exc: BaseException) -> ConfigError | None:
        """A refusal that retrying will not fix (credentials, vhost, permissions)."""
        text = str(exc)
        where = f"RabbitMQ {self.describe()}"
        if "ACCESS_REFUSED" in text and isinstance(exc, amqp_errors.AMQPConnectionError):
            return ConfigError(f"{where} refused the login of user {self.url.user!r}: wrong "
                               "user or password (ACCESS_REFUSED)")  # fmt: skip
        if isinstance(exc, amqp_errors.AuthenticationError):
            return ConfigError(f"{where}: no common authentication mechanism ({text})")
        if isinstance(exc, amqp_errors.InvalidFrameError) and "Connection.Close" in text:
            return ConfigError(f"{where} closed the connection opening virtual host "
                               f"{self.url.vhost!r}: it does not exist or user "
                               f"{self.url.user!r} may not use it")  # fmt: skip
        if isinstance(exc, amqp_errors.ChannelAccessRefused):
            return ConfigError(f"{where}: user {self.url.user!r} may not use exchange "
                               f"{self.url.exchange!r} ({_reason(exc)})")  # fmt: skip
        return None

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        self._channel = self._exchange = None
        self._raw = None
        if connection is not None:
            try:
                await asyncio.wait_for(connection.close(), self.timeout_s)
            except Exception as exc:  # already broken: nothing more to release
                log.debug("closing the RabbitMQ connection: %r", exc)


def _reason(exc: BaseException) -> str:
    """An AMQP error in a few words (aiormq's own texts are templates or frame reprs)."""
    if isinstance(exc, amqp_errors.ChannelClosed | amqp_errors.ConnectionClosed) and exc.args:
        return str(exc.args[-1]) if len(exc.args) > 1 else str(exc.args[0])
    text = str(exc) or repr(exc)
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, OSError) else text


def open_target(config: SinkConfig) -> AmqpTarget:
    return AmqpTarget(config)
