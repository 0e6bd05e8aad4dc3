"""``NatsTarget``: NATS JetStream (``nats://``), exactly once within the duplicate window.

``nats://[USER:PASSWORD@]HOST[:PORT]/STREAM[?subject=TEMPLATE]``: each change is one message
on the subject its routing template renders (default ``sluice.{db}.{table}``): the event in
the sink's format, with the change's ``sluice-*`` headers, ``Content-Type``,
``Nats-Msg-Id`` = its stable id and ``Nats-Expected-Stream`` (a subject another stream takes
is refused, not stored there). A batch is delivered once JetStream acked every message.

Exactly once: JetStream drops a message whose ``Nats-Msg-Id`` it stored within the stream's
duplicate window, so a batch sent again (after a failure, a restart, a SIGKILL before the
checkpoint was saved) adds nothing. The sink saves its checkpoint after each batch the broker
took (``holding.py``), so a replay is at most the batch in flight; it repeats messages only if
it comes after the window has passed (a sink down longer than that, or a stream with a shorter
window). A bootstrap snapshot's rows have ids from the snapshot's SCN, their source and row
number (``shape.py``).

The stream is looked up at start; a missing one is made (file storage, a 2-minute
``duplicate_window``, JetStream's default) with subjects covering the template's routes: its
literal leading tokens + ``>`` (``sluice.{db}.{table}``: ``sluice.>``). An existing stream is
used as it is; a route it does not take stops the sink, saying what to change.

Publishing: a batch goes out on one connection in its order (JetStream stores a connection's
messages in the order sent), ``PIPELINE`` messages at a time, their acks matched on our own
inbox (nats-py's ``publish_async`` never settles a publish whose ack is an error): ~8x a loop
awaiting each ``js.publish``. A refused publish, a lost connection or a missing ack within
``timeout_s`` is ``TargetUnavailable``: the sink sends the batch again. The client never
reconnects by itself (the sink's retries do, visibly). One limit: should a publish fail while a
later one of the same flight is stored (a cluster changing stream leader), the retry stores
the earlier one after it; that is logged and counted (``reordered``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from sluice.errors import ConfigError
from sluice.sink.config import SinkConfig, redact, split_target_url
from sluice.sink.shape import CONTENT_TYPES
from sluice.sink.target import Batch, Change, CheckpointInAFile, Delivery, TargetUnavailable
from sluice.sink.targets import route_template

log = logging.getLogger(__name__)

PIPELINE = 1000  # messages in flight whose acks are awaited together
DUPLICATE_WINDOW_S = 120.0  # of a stream made here (JetStream's default)
OWN_OPTIONS = ("subject",)
_BAD_NAME = set(">*. /\\\t\r\n")  # in stream names
_BAD_TOKEN = set("*> \t\r\n")  # in the tokens of a subject we publish to


@dataclass(frozen=True, slots=True)
class NatsUrl:
    server: str  # nats://HOST:PORT, for the client
    user: str | None
    password: str | None
    stream: str
    display: str  # no password


def parse_nats_url(url: str) -> NatsUrl:
    """The target URL, or a one-line ``ConfigError``."""
    shown = redact(url)
    expected = "expected nats://[USER:PASSWORD@]HOST[:PORT]/STREAM[?subject=TEMPLATE]"
    parts, port, _ = split_target_url(url, 4222, expected, OWN_OPTIONS)
    assert parts.hostname is not None
    stream = unquote(parts.path.strip("/"))
    if not stream:
        raise ConfigError(f"--to {shown!r}: {expected}")
    if _BAD_NAME & set(stream):
        raise ConfigError(
            f"--to {shown!r}: stream name {stream!r} may not contain '.', '*', '>', '/', "
            "'\\' or spaces"
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    display = f"nats://{user + '@' if user else ''}{host}:{port}/{stream}"
    return NatsUrl(f"nats://{host}:{port}", user, password, stream, display)


def stream_subjects(template: str) -> list[str]:
    """The subjects a new stream takes so that it covers every route of ``template``."""
    tokens = template.split(".")
    literal = list(itertools.takewhile(lambda t: "{" not in t, tokens))
    if len(literal) == len(tokens):
        return [template]
    if not literal:
        raise ConfigError(
            f"subject template {template!r} starts with a placeholder, so Sluice cannot choose "
            "the subjects of a new stream: create the stream yourself, or start the template "
            "with a literal token (like sluice.{db}.{table})"
        )
    return [".".join([*literal, ">"])]


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, a final ``>`` one or more."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token not in ("*", have[i])):
            return False
    return len(want) == len(have)


class NatsTarget(CheckpointInAFile):
    kind = "nats"
    delivery: Delivery = "exactly-once"
    keeps_checkpoint = False
    wants_bodies = True
    holds_windows = True  # a batch may hold many windows: see holding.py
    wants_keys = False  # no field for the key text

    def __init__(self, config: SinkConfig) -> None:
        self.url = parse_nats_url(config.target_url)
        self.template = route_template(config)
        self.timeout_s = config.timeout_s
        self.content_type = CONTENT_TYPES[config.format]
        self._nc: Client | None = None
        self._inbox = ""
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._tokens = itertools.count()
        self._subjects: list[str] = []  # the stream's
        self._routes: set[str] = set()  # checked against them
        self._stopped = False
        self.published = 0
        self.duplicates = 0
        self.batches = 0
        self.connects = 0
        self.reordered = 0

    def describe(self) -> str:
        return self.url.display

    def stats(self) -> dict[str, Any]:
        connected = self._nc is not None and self._nc.is_connected
        return {"stream": self.url.stream, "subjects": list(self._subjects),
                "published": self.published, "duplicates": self.duplicates,
                "batches": self.batches, "connects": self.connects,
                "reordered": self.reordered, "connected": connected}  # fmt: skip

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._stopped:
            raise ConfigError(f"the NATS target {self.describe()} was stopped")
        await self._connection()

    async def stop(self) -> None:
        self._stopped = True
        await self._drop()

    async def rollback(self) -> None:
        if self._nc is not None and not self._nc.is_connected:
            await self._drop()  # the next deliver connects again

    # -- connecting --------------------------------------------------------------------------
    async def _connection(self) -> Client:
        if self._nc is not None and self._nc.is_connected:
            return self._nc
        await self._drop()
        nc = Client()
        pending: dict[str, asyncio.Future[dict[str, Any]]] = {}  # this connection's publishes
        self._pending = pending

        async def closed() -> None:  # nothing more comes on this connection
            for future in pending.values():
                if not future.done():
                    future.set_result({"error": {"code": 503, "description": "connection lost"}})

        connect = nc.connect(
            self.url.server,
            user=self.url.user,
            password=self.url.password,
            allow_reconnect=False,  # the sink retries, visibly
            max_reconnect_attempts=1,  # else a refused first connect is tried forever
            reconnect_time_wait=0,
            connect_timeout=max(1, int(min(self.timeout_s, 10))),
            error_cb=_quiet,
            closed_cb=closed,
        )
        try:
            await asyncio.wait_for(connect, self.timeout_s)
            self._inbox = nc.new_inbox()
            await nc.subscribe(self._inbox + ".*", cb=self._on_ack)
            await self._ensure_stream(nc)
        except Exception as exc:
            await _close(nc)
            raise _refusal(exc, f"NATS {self.describe()}") from None
        self._nc = nc
        self.connects += 1
        return nc

    async def _ensure_stream(self, nc: Client) -> None:
        js = nc.jetstream(timeout=self.timeout_s)
        stream = self.url.stream
        try:
            info = await js.stream_info(stream)
        except NotFoundError:
            subjects = stream_subjects(self.template)
            config = StreamConfig(
                name=stream, subjects=subjects, storage=StorageType.FILE,
                duplicate_window=DUPLICATE_WINDOW_S,
            )  # fmt: skip
            try:
                info = await js.add_stream(config)
                log.info("NATS: created stream %s for %s", stream, ", ".join(subjects))
            except APIError as exc:
                if exc.err_code != 10058:  # not "already in use" (made meanwhile)
                    raise ConfigError(f"NATS refused to create stream {stream}: {exc}") from None
                info = await js.stream_info(stream)
        self._subjects = list(info.config.subjects or [])
        self._routes.clear()
        window = info.config.duplicate_window or 0.0
        if window < DUPLICATE_WINDOW_S:
            log.warning(
                "NATS stream %s drops duplicates within %.0f s only: a replay after that repeats",
                stream, window,
            )  # fmt: skip

    async def _on_ack(self, msg: Msg) -> None:
        future = self._pending.pop(msg.subject.rsplit(".", 1)[-1], None)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get("Status") == "503":
            future.set_result({"error": {"code": 503, "description": "no stream answered"}})
            return
        try:
            future.set_result(json.loads(msg.data))
        except ValueError:
            future.set_result({"error": {"code": 500, "description": f"bad ack {msg.data!r}"}})

    async def _drop(self) -> None:
        nc, self._nc = self._nc, None
        if nc is not None:
            await _close(nc)

    # -- delivering --------------------------------------------------------------------------
    async def deliver(self, batch: Batch) -> None:
        nc = await self._connection()
        for change in batch.changes:
            if change.route not in self._routes:
                self._check_route(change.route)
        for start in range(0, len(batch.changes), PIPELINE):
            await self._publish(nc, batch.changes[start : start + PIPELINE])
        self.batches += 1

    def _check_route(self, subject: str) -> None:
        if any(not t or _BAD_TOKEN & set(t) for t in subject.split(".")):
            raise ConfigError(f"subject {subject!r} (from the route template) is not valid")
        if not any(subject_matches(p, subject) for p in self._subjects):
            raise ConfigError(
                f"subject {subject!r} is not one of stream {self.url.stream}'s subjects "
                f"({', '.join(self._subjects)}): add it to the stream, or change --route"
            )
        self._routes.add(subject)

    async def _publish(self, nc: Client, changes: tuple[Change, ...]) -> None:
        loop = asyncio.get_running_loop()
        tokens = [str(next(self._tokens)) for _ in changes]
        futures = [loop.create_future() for _ in changes]
        self._pending.update(zip(tokens, futures, strict=True))
        try:
            for change, token in zip(changes, tokens, strict=True):
                await nc.publish(
                    change.route, change.body, reply=f"{self._inbox}.{token}",
                    headers=self._headers(change),
                )  # fmt: skip
            acks = await asyncio.wait_for(asyncio.gather(*futures), self.timeout_s)
        except Exception as exc:
            raise _refusal(exc, f"NATS {self.describe()}") from None
        finally:
            for token, future in zip(tokens, futures, strict=True):
                self._pending.pop(token, None)
                future.cancel()  # no-op for the settled ones
        self._count(changes, acks)

    def _headers(self, change: Change) -> dict[str, str]:
        headers = change.headers()
        headers["Nats-Msg-Id"] = change.id  # unique, snapshot rows too (shape.py)
        headers["Nats-Expected-Stream"] = self.url.stream
        headers["Content-Type"] = self.content_type
        return headers

    def _count(self, changes: tuple[Change, ...], acks: list[dict[str, Any]]) -> None:
        failed: tuple[Change, dict[str, Any]] | None = None
        reordered = 0
        for change, ack in zip(changes, acks, strict=True):
            error = ack.get("error")
            if error is not None:
                failed = failed or (change, error)
            elif ack.get("duplicate"):
                self.duplicates += 1
            else:
                self.published += 1
                reordered += failed is not None
        duplicates = sum(1 for a in acks if a.get("duplicate"))
        if duplicates:
            log.warning(
                "NATS stream %s already had %d of %d messages (a batch sent again after a "
                "failure or a restart): it kept one of each",
                self.url.stream, duplicates, len(changes),
            )  # fmt: skip
        if failed is None:
            return
        change, error = failed
        if reordered:
            self.reordered += reordered
            log.error(
                "NATS stored %d messages after one it refused (SCN %d index %d): the retry "
                "stores that one after them", reordered, change.scn, change.index,
            )  # fmt: skip
        text = (
            f"NATS stream {self.url.stream} did not store a message on {change.route!r} "
            f"(SCN {change.scn}): {error.get('description', error)}"
        )
        if error.get("code") == 400:
            raise ConfigError(text)  # a bad request stays bad: wrong stream, too large...
        raise TargetUnavailable(text)


def _refusal(exc: Exception, what: str) -> Exception:
    if isinstance(exc, ConfigError | TargetUnavailable):
        return exc
    if isinstance(exc, nats.errors.MaxPayloadError):
        return ConfigError(f"{what}: a message is larger than the server's max_payload")
    if isinstance(exc, nats.errors.Error) and "Authorization Violation" in str(exc):
        return ConfigError(f"{what} refused the login: {exc}")
    if isinstance(exc, TimeoutError | nats.errors.TimeoutError):
        return TargetUnavailable(f"{what} did not answer in time")
    if isinstance(exc, nats.errors.NoServersError):
        return TargetUnavailable(f"{what} refuses connections")
    if isinstance(exc, nats.errors.NoRespondersError | ServiceUnavailableError):
        return TargetUnavailable(f"{what}: JetStream does not answer (nats-server -js?)")
    if isinstance(exc, OSError | nats.errors.Error | APIError):
        return TargetUnavailable(f"{what}: {exc or type(exc).__name__}")
    return exc


async def _close(nc: Client) -> None:
    try:
        if not nc.is_closed:
            await nc.close()
    except Exception as exc:  # a connection that never opened, or died: nothing to release
        log.debug("NATS close: %s", exc)


async def _quiet(exc: Exception) -> None:
    """nats-py's default logs each asynchronous error with a traceback; the sink reports."""
    log.debug("NATS: %s", exc)


def open_target(config: SinkConfig) -> NatsTarget:
    return NatsTarget(config)
