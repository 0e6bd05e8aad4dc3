"""``WebhookTarget``: HTTP(S) webhooks, at least once, with a dead-letter directory.

The whole ``--to`` URL is the endpoint. Each batch is POSTed in chunks of at most
``batch_events`` changes, cut by the changes' index within their window (``index //
batch_events``), so a window read again after a restart is cut the same way::

    POST /hook   Content-Type: application/json
    Idempotency-Key: <origin>-<scn>-<first index>..<last index>   (the same chunk, the same key)
    Sluice-Scn: <scn>
    {"events": [<each change's body: Sluice JSON or Debezium JSON>, ...]}

A 2xx answer delivers the chunk. Receivers dedupe by ``Idempotency-Key``: a chunk is sent
again when the sink restarts before its checkpoint moved (at least once).

Failures, and what happens:

- the receiver cannot be reached (connection refused, no such host, connect timeout): it is
  down, like a stopped database. ``TargetUnavailable``: the sink backs off and retries forever,
  visibly (``/stats`` target_up, ``/healthz``). Dead-lettering instead would empty the stream
  into the directory during any outage longer than the backoffs. Chunks of the window that
  were already delivered are not sent again (the target remembers them for the window).
- the receiver answers, but not 2xx (or times out, or drops the connection mid-request): the
  chunk is tried again with exponential backoff and full jitter (``retry_initial_s`` doubling
  up to ``retry_max_s``), ``max_attempts`` tries in all, inside ``deliver`` (``/stats``
  target_stats: retries, retrying, last_status, last_error). A 4xx other than 408, 409, 425
  and 429 usually means "never", but receivers misbehave transiently too (a deploy answering
  404 for a minute), so it gets the same tries; 3xx is not followed (a POST would become GET).
- after the last try the chunk goes to the dead-letter directory (``--dead-letter-dir``,
  default ``<checkpoint_dir>/dead-letters/<sink name>``) as ``<scn>-<first index>.json``:
  the request body, its key, the attempts and the last status or error, written atomically.
  The sink then moves past it: that is the contract. ``stats()["dead_letters"]`` counts them
  (``/metrics`` sluice_sink_dead_letters_total). A dead letter that cannot be written stops
  the sink (``SluiceError``): a chunk is never dropped in silence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from sluice.errors import ConfigError, SluiceError
from sluice.files import write_atomically
from sluice.sink.config import SinkConfig, redact
from sluice.sink.target import Batch, Change, CheckpointInAFile, Delivery, TargetUnavailable

log = logging.getLogger(__name__)

TRY_LATER_4XX = frozenset({408, 409, 425, 429})  # the other 4xx say "never" (tried anyway)
_DOWN = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One POST: its body and its stable key."""

    scn: int
    first_index: int
    last_index: int
    key: str
    body: bytes
    events: int


def chunks(batch: Batch, size: int) -> list[Chunk]:
    """The batch's changes in POSTs of at most ``size``, cut by index within the window."""
    changes = batch.changes
    if not changes:
        return []
    if changes[0].index // size == changes[-1].index // size:  # most windows: one POST
        return [_chunk(batch.scn, changes)]
    groups: list[list[Change]] = []
    for change in changes:
        if groups and groups[-1][0].index // size == change.index // size:
            groups[-1].append(change)
        else:
            groups.append([change])
    return [_chunk(batch.scn, group) for group in groups]


def _chunk(scn: int, changes: Sequence[Change]) -> Chunk:
    first, last = changes[0], changes[-1]
    body = b'{"events": [' + b", ".join(c.body or b"null" for c in changes) + b"]}"
    key = f"{first.id}..{last.index}"
    return Chunk(scn, first.index, last.index, key, body, len(changes))


def full_jitter(attempt: int, initial_s: float, max_s: float, rng: random.Random) -> float:
    """The wait after failed try ``attempt`` (1-based): uniform in [0, min(max, initial*2^n))."""
    return rng.uniform(0.0, min(max_s, initial_s * 2 ** min(attempt - 1, 30)))


def describe_url(url: str) -> str:
    """The endpoint for logs: no password, no query (it may hold a token)."""
    parts = urlsplit(redact(url))
    return f"{parts.scheme}://{parts.netloc}{parts.path}{'?…' if parts.query else ''}"


class WebhookTarget(CheckpointInAFile):
    kind = "http"
    delivery: Delivery = "at-least-once"
    keeps_checkpoint = False
    wants_bodies = True
    wants_keys = False  # no field for the key text

    def __init__(self, config: SinkConfig) -> None:
        self._interrupted = asyncio.Event()
        self.url = config.target_url
        shown = redact(self.url)
        try:
            parts = urlsplit(self.url)
            parts.port  # noqa: B018  (raises ValueError for a bad port)
        except ValueError as exc:
            raise ConfigError(f"--to {shown!r} is not a valid URL: {exc}") from None
        if not parts.hostname:
            raise ConfigError(f"--to {shown!r}: expected {parts.scheme}://HOST[:PORT]/PATH")
        if config.format == "avro":
            raise ConfigError(
                "webhooks take --format json or debezium (their bodies are JSON), not avro"
            )
        self.batch_events = config.batch_events
        self.max_attempts = config.max_attempts
        self.initial_s, self.max_s = config.retry_initial_s, config.retry_max_s
        self.timeout_s = config.timeout_s
        self.dead_letter_dir: Path | None = config.dead_letter_dir
        if self.dead_letter_dir is None and config.checkpoint_dir is not None:
            self.dead_letter_dir = config.checkpoint_dir / "dead-letters" / config.name
        self._session: aiohttp.ClientSession | None = None
        self._rng = random.Random()
        self._window = -1  # the SCN of the window whose delivered chunks ``_done`` holds
        self._done: set[str] = set()
        self.posts = self.retries = self.dead_letters = 0
        self.last_status: int | None = None
        self.last_error: str | None = None
        self.retrying: dict[str, Any] | None = None

    def describe(self) -> str:
        return describe_url(self.url)

    def stats(self) -> dict[str, Any]:
        return {
            "posts": self.posts,
            "retries": self.retries,
            "dead_letters": self.dead_letters,
            "dead_letter_dir": str(self.dead_letter_dir),
            "last_status": self.last_status,
            "last_error": self.last_error,
            "retrying": self.retrying,
        }

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self.dead_letter_dir is None:
            raise ConfigError("a webhook target needs --dead-letter-dir (or --checkpoint-dir)")
        await asyncio.to_thread(_check_writable, self.dead_letter_dir)
        await self._reachable()
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout)

    async def _reachable(self) -> None:
        """A TCP connect to the receiver: ``TargetUnavailable`` while it is down (the sink
        waits on ``start`` before it reads a big window again)."""
        parts = urlsplit(self.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            async with asyncio.timeout(self.timeout_s):
                _, writer = await asyncio.open_connection(parts.hostname, port)
            writer.close()
        except (OSError, TimeoutError) as exc:
            self.last_error = f"cannot connect: {exc or 'timed out'}"
            raise TargetUnavailable(f"webhook {self.describe()}: {self.last_error}") from None

    async def stop(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def rollback(self) -> None:
        return None  # delivered chunks stay delivered; ``_done`` skips them on the retry

    # -- delivering ----------------------------------------------------------------------------
    def interrupt(self) -> None:
        """The sink is stopping: give up waiting between tries."""
        self._interrupted.set()

    async def deliver(self, batch: Batch) -> None:
        if batch.scn != self._window:
            self._window, self._done = batch.scn, set()
        for chunk in chunks(batch, self.batch_events):
            if chunk.key not in self._done:
                await self._send(chunk)
                self._done.add(chunk.key)

    async def _send(self, chunk: Chunk) -> None:
        """Up to ``max_attempts`` tries, then the dead-letter directory."""
        attempt = 0
        while True:
            attempt += 1
            failure = await self._post(chunk)
            if failure is None:
                self.retrying, self.last_error = None, None
                return
            self.last_error = failure
            if attempt >= self.max_attempts:
                break
            self.retries += 1
            self.retrying = {"key": chunk.key, "attempt": attempt}
            delay = full_jitter(attempt, self.initial_s, self.max_s, self._rng)
            log.warning(
                "webhook %s: chunk %s failed (%s); try %d of %d in %.1f s",
                self.describe(), chunk.key, failure, attempt + 1, self.max_attempts, delay,
            )  # fmt: skip
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._interrupted.wait(), delay)
            if self._interrupted.is_set():  # the sink is stopping: the window is not done
                raise TargetUnavailable(f"stopped while retrying chunk {chunk.key}")
        self.retrying = None
        await self._dead_letter(chunk, attempt, failure)

    async def _post(self, chunk: Chunk) -> str | None:
        """None when the receiver took the chunk, else what went wrong; ``TargetUnavailable``
        when it cannot be reached at all."""
        if self._session is None:
            await self.start()
        assert self._session is not None
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": chunk.key,
            "Sluice-Scn": str(chunk.scn),
        }
        self.posts += 1
        try:
            async with self._session.post(
                self.url, data=chunk.body, headers=headers, allow_redirects=False
            ) as response:
                self.last_status = response.status
                if 200 <= response.status < 300:
                    await response.read()  # so the connection can be reused
                    return None
                text = (await response.content.read(200)).decode(errors="replace").strip()
                failure = f"HTTP {response.status} {response.reason or ''}".strip()
                if 400 <= response.status < 500 and response.status not in TRY_LATER_4XX:
                    failure += " (a refusal, tried again all the same)"
                return failure + (f": {text}" if text else "")
        except _DOWN as exc:
            self.last_status, self.last_error = None, f"cannot connect: {exc}"
            self.retrying = None  # the sink retries the batch: the target is down
            raise TargetUnavailable(f"webhook {self.describe()}: {self.last_error}") from None
        except TimeoutError:
            self.last_status = None
            return f"no answer within {self.timeout_s:g} s"
        except aiohttp.ClientError as exc:
            self.last_status = None
            return f"{type(exc).__name__}: {exc}"

    async def _dead_letter(self, chunk: Chunk, attempts: int, failure: str) -> None:
        assert self.dead_letter_dir is not None
        path = self.dead_letter_dir / f"{chunk.scn}-{chunk.first_index}.json"
        record = {
            "url": self.describe(),
            "idempotency_key": chunk.key,
            "scn": chunk.scn,
            "first_index": chunk.first_index,
            "last_index": chunk.last_index,
            "events": chunk.events,
            "attempts": attempts,
            "last_status": self.last_status,
            "last_error": failure,
            "body": json.loads(chunk.body),
        }
        text = json.dumps(record, ensure_ascii=False, indent=1) + "\n"
        try:
            await asyncio.to_thread(write_atomically, path, text)
        except OSError as exc:
            raise SluiceError(
                f"webhook {self.describe()} refused chunk {chunk.key} and its dead letter "
                f"{path} cannot be written ({exc}): stopping rather than dropping it"
            ) from None
        self.dead_letters += 1
        log.warning(
            "webhook %s: chunk %s (%d events) failed %d times (%s); dead letter written to %s",
            self.describe(), chunk.key, chunk.events, attempts, failure, path,
        )  # fmt: skip


def _check_writable(directory: Path) -> None:
    probe = directory / ".sluice-probe"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(probe, "")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"the dead-letter directory {directory} is not writable: {exc}") from None


def open_target(config: SinkConfig) -> WebhookTarget:
    return WebhookTarget(config)
