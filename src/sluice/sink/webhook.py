"""``WebhookTarget``: HTTP(S) webhooks, at least once, with a dead-letter directory.

The whole ``--to`` URL is the endpoint. Windows that come close together are held
(``holding.py``) and their changes POSTed in chunks of at most ``batch_events``::

    POST /hook   Content-Type: application/json
    Idempotency-Key: <first event's id>..<last event's scn>-<its index>
    Sluice-Scn: <first event's scn>
    {"events": [<each change's body: Sluice JSON or Debezium JSON>, ...]}

A 2xx answer delivers the chunk. Receivers dedupe by ``Idempotency-Key``: a chunk is sent
again when the sink restarts before its checkpoint moved (at least once), and it must then
hold the same events. Where a group is cut depends on when windows came, so the cuts are
written down first: before a group's first POST, its chunks (first and last event id, key)
go to ``<checkpoint_dir>/<name>.webhook-chunks.json`` (atomically, fsynced). Read again after
a restart or a lost group, those events are cut exactly there again, under the same keys
(``Holding`` keeps holding while a recorded chunk is incomplete, up to the SCN of its last
event), and chunks already delivered in this process are not sent again.

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

    scn: int  # the first event's
    first_index: int
    last_index: int
    first_id: str
    last_id: str
    last_scn: int
    key: str
    body: bytes
    events: int


Recorded = dict[str, tuple[str, str]]  # a recorded chunk's first event id -> (last id, key)


def chunks(changes: Sequence[Change], size: int, recorded: Recorded | None = None) -> list[Chunk]:
    """The changes in POSTs of at most ``size``, in order. Changes read again start where a
    recorded group started (a group is read again from its first event): its chunks are cut
    again as recorded, as long as their last events are there."""
    recorded = recorded or {}
    out: list[Chunk] = []
    i, n = 0, len(changes)
    while i < n and changes[i].id in recorded:
        last_id, key = recorded[changes[i].id]
        end = next((j for j in range(i, n) if changes[j].id == last_id), -1)
        if end < 0:  # its last event is not here: new keys from here (``deliver`` says so)
            break
        out.append(_chunk(changes[i : end + 1], key))
        i = end + 1
    out += [_chunk(changes[k : k + size]) for k in range(i, n, size)]
    return out


def _chunk(changes: Sequence[Change], key: str | None = None) -> Chunk:
    first, last = changes[0], changes[-1]
    body = b'{"events": [' + b", ".join(c.body or b"null" for c in changes) + b"]}"
    key = key or f"{first.id}..{last.scn}-{last.index}"
    return Chunk(
        first.scn, first.index, last.index, first.id, last.id, last.scn, key, body, len(changes)
    )


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
    holds_windows = True  # windows that come close together share POSTs: see holding.py

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
        self._done: set[str] = set()  # keys of the recorded chunks delivered since
        self._recorded: Recorded = {}
        self._recorded_end: tuple[str, int] | None = None  # the last recorded event: id, scn
        self._chunks_path: Path | None = None
        if config.checkpoint_dir is not None:
            self._chunks_path = config.checkpoint_dir / f"{config.name}.webhook-chunks.json"
        self.posts = self.retries = self.dead_letters = 0
        self.rekeyed = 0  # recorded chunks read again without their last event: new keys
        self.chunks_file_error: str | None = None
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
            "rekeyed_chunks": self.rekeyed,
            "chunks_file_error": self.chunks_file_error,
            "dead_letter_dir": str(self.dead_letter_dir),
            "last_status": self.last_status,
            "last_error": self.last_error,
            "retrying": self.retrying,
        }

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if not self._recorded:
            self._load_recorded()
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
        cut = chunks(batch.changes, self.batch_events, self._recorded)
        if not cut:
            return
        again = self._recorded.get(batch.changes[0].id)
        if again is not None and again[1] not in {c.key for c in cut}:
            self.rekeyed += 1
            log.warning(
                "webhook %s: chunk %s is read again without its last event %s (a snapshot's "
                "windows, or a relay that lost them): its events go under new keys, so a "
                "receiver may see them twice", self.describe(), again[1], again[0],
            )  # fmt: skip
        known = {key for _, key in self._recorded.values()}
        if any(chunk.key not in known for chunk in cut):
            await self._record(cut)
        for chunk in cut:
            if chunk.key not in self._done:
                await self._send(chunk)
                self._done.add(chunk.key)

    def incomplete(self, changes: Sequence[Change]) -> bool:
        """Held changes that start a recorded group but end in a window before its last
        event's: ``Holding`` holds on until that window comes (once it has come, the group
        is complete, or the event is gone for good)."""
        if not changes or self._recorded_end is None or changes[0].id not in self._recorded:
            return False
        return changes[-1].scn < self._recorded_end[1]

    async def _record(self, cut: list[Chunk]) -> None:
        """Write the group's cuts down before its first POST (see the module's docstring)."""
        self._recorded = {c.first_id: (c.last_id, c.key) for c in cut}
        self._recorded_end = (cut[-1].last_id, cut[-1].last_scn)
        self._done &= {c.key for c in cut}
        if self._chunks_path is None:
            return
        text = json.dumps(
            [{"first": c.first_id, "last": c.last_id, "key": c.key, "last_scn": c.last_scn}
             for c in cut]
        )  # fmt: skip
        try:
            await asyncio.to_thread(write_atomically, self._chunks_path, text)
        except OSError as exc:
            raise SluiceError(
                f"webhook {self.describe()}: cannot write {self._chunks_path} ({exc}); without "
                "it a restart could send events under new keys"
            ) from None

    def _load_recorded(self) -> None:
        path = self._chunks_path
        if path is None or not path.exists():
            return
        try:
            cut = json.loads(path.read_text())
            self._recorded = {c["first"]: (c["last"], c["key"]) for c in cut}
            if cut:
                self._recorded_end = (cut[-1]["last"], int(cut[-1]["last_scn"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.chunks_file_error = f"{path}: {exc}"
            log.warning(
                "webhook %s: %s is unreadable (%s): chunks read again may get new keys",
                self.describe(), path, exc,
            )  # fmt: skip

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
