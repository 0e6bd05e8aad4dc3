"""``RedisTarget``: Redis Streams (``redis://``), exactly once.

``redis://[USER:PASSWORD@]HOST[:PORT]/DB[?stream=TEMPLATE&maxlen=N]``: each change is one entry
(``XADD``) of the stream its routing template renders (default ``sluice:{source}``), trimmed to
about ``maxlen`` entries when given (``MAXLEN ~ N``). An entry's fields: ``value`` (the event
in the sink's format), ``key`` (the canonical key text, "" for none), ``op``, ``source``,
``scn`` and ``schema_version``.

Why exactly once: an entry's ID is ``SCN-INDEX`` (the SCN as the milliseconds part, the
change's position in its window as the sequence), so IDs rise with the stream, and Redis
refuses an ``XADD`` whose ID is not above the stream's top ("equal or smaller"): a batch
written again after a failure, a restart or a SIGKILL adds nothing (each refusal is counted as
a duplicate). Redis remembers the top even when trimming or ``XDEL`` removed the entry. So a
stream must be fed by one sink (one origin): another writer's IDs would hide ours. A bootstrap
snapshot's rows all carry its SCN; their sequence rises with their row number within a
source (``shape.py``), so a stream that mixes several sources (a template without
``{source}`` or ``{table}``) cannot take a snapshot: a later source's rows would be refused
as replays.

Order: a later entry of a stream must never be written after an earlier one failed, or the
earlier one could never be written (its ID would be below the top). So a batch's entries of
one stream are written by one Lua script call that adds them in order, skips the refused
replays, and stops at any other failure; the calls for the batch's streams go out in one
pipeline (streams are independent). Connection errors, timeouts, ``BUSY``, ``LOADING``,
``OOM``, ``READONLY`` and the like are ``TargetUnavailable`` (the sink writes the batch again);
``WRONGTYPE`` (the key holds something else), a refused login and any other refusal stop the
sink with the server's words.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import redis.asyncio
import redis.exceptions as errors
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from sluice.errors import ConfigError
from sluice.sink.config import SinkConfig, redact, split_target_url
from sluice.sink.target import Batch, Change, CheckpointInAFile, Delivery, TargetUnavailable

log = logging.getLogger(__name__)

OWN_OPTIONS = ("stream", "maxlen")
# Snapshot rows: the bootstrap's row cursor keeps its row number in its low 48 bits (its
# GENERATION_SHIFT); windows hold up to 500 rows (12 bits leave room)
SNAPSHOT_ROW_MASK = (1 << 48) - 1
SNAPSHOT_INDEX_BITS = 12
# Errors that pass (the server is busy, loading, full, failing over): the batch is retried.
PASSING = ("BUSY", "LOADING", "OOM", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
           "NOREPLICAS", "NOSCRIPT", "max number of clients")  # fmt: skip

# KEYS[1]: the stream; ARGV[1]: MAXLEN ('' for none); then two arguments per entry: its body,
# and "ID OP SCHEMA_VERSION N SOURCE" (SOURCE is N bytes) followed by its key. Two arguments an
# entry rather than one per field: packing arguments is most of the client's work per entry.
XADD_IN_ORDER = """
local stream, maxlen = KEYS[1], ARGV[1]
local match, sub, pcall = string.match, string.sub, redis.pcall
local added, skipped = 0, 0
for i = 2, #ARGV, 2 do
  local tail = ARGV[i + 1]
  local id, op, version, size, at = match(tail, '^(%S+) (%S) (%d+) (%d+) ()')
  local last = at + tonumber(size) - 1
  local source, key, scn = sub(tail, at, last), sub(tail, last + 1), match(id, '^(%d+)')
  local r
  if maxlen == '' then
    r = pcall('XADD', stream, id, 'value', ARGV[i], 'key', key, 'op', op, 'source', source,
      'scn', scn, 'schema_version', version)
  else
    r = pcall('XADD', stream, 'MAXLEN', '~', maxlen, id, 'value', ARGV[i], 'key', key,
      'op', op, 'source', source, 'scn', scn, 'schema_version', version)
  end
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'equal or smaller', 1, true) then
      return redis.error_reply(r.err .. ' (entry ' .. id .. ', after ' .. added ..
        ' added)')
    end
    skipped = skipped + 1
  else
    added = added + 1
  end
end
return {added, skipped}
"""


@dataclass(frozen=True, slots=True)
class RedisUrl:
    host: str
    port: int
    db: int
    user: str | None
    password: str | None
    maxlen: int | None
    display: str  # no password


def parse_redis_url(url: str) -> RedisUrl:
    """The target URL, or a one-line ``ConfigError``."""
    shown = redact(url)
    expected = "expected redis://[USER:PASSWORD@]HOST[:PORT]/DB[?stream=TEMPLATE&maxlen=N]"
    parts, port, query = split_target_url(url, 6379, expected, OWN_OPTIONS)
    db_text = parts.path.strip("/") or "0"
    if not db_text.isdigit():
        raise ConfigError(f"--to {shown!r}: {expected}")
    maxlen = None
    for key, value in query:
        if key == "maxlen":
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(
                    f"--to {shown!r}: maxlen must be a positive integer, not {value!r}"
                )
            maxlen = int(value)
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    host = parts.hostname
    assert host is not None
    shown_host = f"[{host}]" if ":" in host else host
    display = f"redis://{user + '@' if user else ''}{shown_host}:{port}/{int(db_text)}"
    return RedisUrl(host, port, int(db_text), user, password, maxlen, display)


_metas: dict[tuple[str, str, int], bytes] = {}


def entry_args(changes: Sequence[Change]) -> list[bytes]:
    """The script's arguments for one stream's entries, in order; an entry's ID is
    ``SCN-INDEX`` (a snapshot row's index rises with its row number: ``shape.py``)."""
    args: list[bytes] = []
    for c in changes:
        meta = _metas.get((c.op, c.source, c.schema_version))
        if meta is None:
            if len(_metas) > 4096:
                _metas.clear()
            source = c.source.encode()
            meta = _metas[(c.op, c.source, c.schema_version)] = b"%s %d %d %s" % (
                c.op.encode(),
                c.schema_version,
                len(source),
                source,
            )
        key = c.key.encode() if c.key else b""
        args += [c.body, b"%d-%d %s%s" % (c.scn, c.index, meta, key)]
    return args


class RedisTarget(CheckpointInAFile):
    kind = "redis"
    delivery: Delivery = "exactly-once"
    keeps_checkpoint = False
    wants_bodies = True
    holds_windows = True  # a batch may hold many windows: see holding.py
    single_writer = True  # a stream's rising IDs: one writer per stream (a group: {partition})

    def __init__(self, config: SinkConfig) -> None:
        self.url = parse_redis_url(config.target_url)
        self.timeout_s = config.timeout_s
        self._client: redis.asyncio.Redis | None = None
        self._script: Any = None  # redis-py's AsyncScript (loaded again after a restart)
        self._stopped = False
        self.added = 0
        self.duplicates = 0
        self.batches = 0
        self.streams: set[str] = set()

    def describe(self) -> str:
        return self.url.display

    def stats(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "duplicates": self.duplicates,
            "batches": self.batches,
            "streams": len(self.streams),
            "maxlen": self.url.maxlen,
        }

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._stopped:
            raise ConfigError(f"the Redis target {self.describe()} was stopped")
        client = self._connection()
        try:
            await client.ping()
        except Exception as exc:
            raise _refusal(exc, f"Redis {self.describe()}") from None

    async def stop(self) -> None:
        self._stopped = True
        client, self._client = self._client, None
        if client is not None:
            try:
                await client.aclose()
            except Exception as exc:  # a connection already gone: nothing left to release
                log.debug("Redis close: %s", exc)

    async def rollback(self) -> None:
        return None  # nothing is pending between batches

    def _connection(self) -> redis.asyncio.Redis:
        if self._client is None:
            u = self.url
            self._client = redis.asyncio.Redis(
                host=u.host,
                port=u.port,
                db=u.db,
                username=u.user,
                password=u.password,
                socket_timeout=self.timeout_s,
                socket_connect_timeout=min(self.timeout_s, 10.0),
                retry=Retry(NoBackoff(), 0),  # the sink retries, visibly
            )
            self._script = self._client.register_script(XADD_IN_ORDER)
        return self._client

    # -- delivering --------------------------------------------------------------------------
    async def deliver(self, batch: Batch) -> None:
        if not batch.changes:
            return
        by_stream: dict[str, list[Change]] = {}
        for change in batch.changes:  # streams in order of first appearance
            by_stream.setdefault(change.route, []).append(change)
        maxlen = str(self.url.maxlen or "")
        what = f"Redis {self.describe()}"
        # the pipeline is released however the batch ends (a timed-out one was left for the
        # garbage collector, which logged "Unclosed Pipeline client" as an ERROR)
        async with self._connection().pipeline(transaction=False) as pipe:
            for stream, changes in by_stream.items():
                args = [maxlen, *entry_args(changes)]
                await self._script(keys=[stream], args=args, client=pipe)
            try:
                results = await asyncio.wait_for(
                    pipe.execute(raise_on_error=False), self.timeout_s
                )
            except Exception as exc:
                raise _refusal(exc, what) from None
        failure: Exception | None = None
        for stream, result in zip(by_stream, results, strict=True):
            if isinstance(result, Exception):
                failure = failure or _refusal(result, f"{what} stream {stream!r}")
                continue
            added, skipped = int(result[0]), int(result[1])
            self.added += added
            self.duplicates += skipped
            self.streams.add(stream)
            if skipped:
                log.warning(
                    "Redis stream %s already had %d entries of this batch (sent again after a "
                    "failure or a restart): not written twice", stream, skipped,
                )  # fmt: skip
        if failure is not None:
            raise failure
        self.batches += 1


def _refusal(exc: Exception, what: str) -> Exception:
    """``TargetUnavailable`` for what passes, else a one-line ``ConfigError``."""
    text = " ".join(str(exc).split())
    code = getattr(exc, "status_code", None)
    full = f"{code} {text}" if code and code != "ERR" else text
    if isinstance(exc, errors.AuthenticationError | errors.NoPermissionError):
        return ConfigError(f"{what} refused the login or command: {full}")
    if isinstance(exc, errors.ConnectionError | errors.TimeoutError | TimeoutError | OSError):
        return TargetUnavailable(f"{what}: {full or type(exc).__name__}")
    if isinstance(exc, errors.ResponseError) and any(p in full for p in PASSING):
        return TargetUnavailable(f"{what}: {full}")
    if "WRONGTYPE" in full:
        return ConfigError(f"{what} holds a key that is not a stream: {full}")
    if isinstance(exc, errors.RedisError):
        return ConfigError(f"{what} refused the entries: {full}")
    return exc


def open_target(config: SinkConfig) -> RedisTarget:
    return RedisTarget(config)
