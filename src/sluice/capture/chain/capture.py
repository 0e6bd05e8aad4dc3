"""A relay that reads other relays (relay chaining, Databus's relay tiers).

Its capture thread reads the upstream's binary ``/stream`` and hands each window on as it
came: the same SCN, commit time, window boundaries and event bytes (key hash, op, schema
version, Avro payload), so a consumer of this relay sees what a consumer of the upstream sees.
The upstream's schemas are taken under their own version numbers (``SchemaRegistry.adopt``)
before any event that needs them. Windows bigger than ``part_bytes`` are read in pieces and
handed over in parts, as a log source hands over a big transaction.

Several upstreams (``sluice://a:7070,sluice://b:7070``) must capture the same database (the
same SCNs): a lost one is replaced by the next, from the last SCN handed over. An upstream
that no longer holds that SCN (HTTP 410) is asked with ``cold=true`` (it reads its own source
again where it can); when every upstream refuses, a ``bootstrap=`` server's log fills the range,
and without one capture stops with an error that says so.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from sluice.blocking_http import frames, get_json, open_get
from sluice.capture.chain.url import ChainUrl, parse_url
from sluice.capture.seeding import Seeder
from sluice.capture.source import (
    ABORTED,
    CapturedWindow,
    CaptureSettings,
    CaptureStats,
    run_supervised,
)
from sluice.core import wire
from sluice.core.names import schemas_path
from sluice.core.pieces import Piece, PieceParser
from sluice.core.requests import CLIENT_HEADER
from sluice.errors import (
    BootstrapRequired,
    CheckpointError,
    ConfigError,
    DecodeError,
    RelayUnavailable,
    SchemaError,
    SluiceError,
    SourceError,
    SourceSetupError,
    first_line,
)
from sluice.schemas import TableSchema

log = logging.getLogger(__name__)

TAKES_TABLE_OPTIONS = False
# An idle upstream answers a long poll after this long; stop() does not wait for it (it
# shuts the socket).
LONG_POLL_MS = 10_000
_TRUNCATE = ord("t")

__all__ = [
    "TAKES_TABLE_OPTIONS",
    "ChainCapture",
    "describe",
    "open_capture",
    "open_seeder",
    "parse_url",
    "seed_jars",
    "source_info",
]


@dataclass(frozen=True, slots=True)
class _Info:
    end_scn: int


def open_capture(url: str, settings: CaptureSettings) -> ChainCapture:
    return ChainCapture(parse_url(url), settings)


def source_info(url: str) -> dict[str, Any]:
    """The upstream's own: event formats name the database the first relay reads."""
    upstreams = parse_url(url).upstreams
    for base in upstreams:
        try:
            info = get_json(base, "/sources").get("source")
        except SluiceError:
            continue
        if isinstance(info, dict):
            return info
    log.warning(
        "no upstream relay (%s) said how it names its database: Debezium events of this "
        "relay are refused until it restarts with an upstream up",
        ", ".join(upstreams),
    )
    return {"connector": "sluice"}


def describe(url: str, source: str) -> TableSchema:
    """The upstream's newest schema of ``source``."""
    problems: list[str] = []
    for base in parse_url(url).upstreams:
        try:
            versions = _schemas(base, source)
        except SluiceError as exc:
            problems.append(str(exc))
            continue
        if versions:
            return versions[-1]
        problems.append(f"{base} has no schema of {source} yet")
    raise SourceError("; ".join(problems))


def open_seeder(url: str) -> Seeder:
    raise ConfigError(
        "a chained relay (sluice://) has no tables of its own to seed: seed from the "
        "database the first relay reads (bootstrap seed --source mysql://... or "
        "postgresql://...)"
    )


def seed_jars() -> tuple[str, ...]:
    return ()


def _schemas(base: str, source: str) -> list[TableSchema]:
    body = get_json(base, schemas_path(source))
    return [TableSchema.from_avro(s) for s in body.get("versions", [])]


def split_window(record: bytes) -> tuple[wire.WindowHeader, list[bytes], set[tuple[str, int]]]:
    """A window record's header, its event records as they are, and the (source, schema
    version) pairs of its row events."""
    header = wire.read_window_header(record)
    unpack, head = wire.EVENT_HEADER.unpack_from, wire.EVENT_HEADER_SIZE
    events: list[bytes] = []
    pairs: set[tuple[bytes, int]] = set()
    pos = wire.WINDOW_HEADER_SIZE
    for _ in range(header.n_events):
        size, _hash, op, src_len, version = unpack(record, pos)
        if size < head + src_len or pos + size > len(record):
            raise DecodeError(f"corrupt event record in window {header.scn}", scn=header.scn)
        events.append(record[pos : pos + size])
        if op != _TRUNCATE:
            pairs.add((record[pos + head : pos + head + src_len], version))
        pos += size
    return header, events, {(s.decode(), v) for s, v in pairs}


class ChainCapture:
    """``CaptureSource`` over upstream relays (see the module's docstring)."""

    rereadable = True  # an upstream serves any SCN it holds, and reads its source cold

    def __init__(self, url: ChainUrl, settings: CaptureSettings) -> None:
        self.url = url
        self.settings = settings
        self.stats = CaptureStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._current = 0  # the upstream in use, an index of url.upstreams
        self._after = 0  # the last SCN handed over or heartbeat seen
        self._known: set[tuple[str, int]] = set()
        self._parts = False  # parts of a window handed over, its end not yet
        self._conn: http.client.HTTPConnection | None = None
        self._refused: dict[str, int] = {}  # upstream -> its oldest SCN, when it said 410
        self._unseen: set[str] = set()  # upstreams that said 409: never saw our SCN
        self._schemas_from: str | None = None  # the upstream whose schemas are all taken
        self.failovers = 0
        self.bootstrap_reads = 0
        self._publish()

    @property
    def upstream(self) -> str:
        return self.url.upstreams[self._current]

    def _publish(self) -> None:
        self.stats.details = {
            "upstream": self.upstream,
            "upstreams": list(self.url.upstreams),
            "failovers": self.failovers,
            **(
                {"bootstrap": self.url.bootstrap, "bootstrap_reads": self.bootstrap_reads}
                if self.url.bootstrap
                else {}
            ),
        }

    # -- CaptureSource -----------------------------------------------------------------------
    def check(self) -> _Info:
        """The first upstream that answers, which must capture every table of this relay."""
        problems: list[str] = []
        for index, base in enumerate(self.url.upstreams):
            try:
                sources = get_json(base, "/sources")
                end = int(get_json(base, "/stats")["max_scn"])
            except (SluiceError, KeyError, TypeError, ValueError) as exc:
                problems.append(str(exc) if isinstance(exc, SluiceError) else f"{base}: {exc!r}")
                continue
            held = {str(s.get("source")) for s in sources.get("sources", [])}
            missing = [t for t in self.settings.tables if t not in held]
            if missing:
                raise SourceSetupError(
                    f"upstream relay {base} does not capture {missing[0]} (it captures "
                    f"{', '.join(sorted(held)) or 'nothing'}): add --table {missing[0]} to "
                    "that relay, or drop it from this one"
                )
            self._current = index
            self.stats.source_end_scn = max(self.stats.source_end_scn, end)
            self._publish()
            return _Info(end)
        raise SourceError("no upstream relay answers: " + "; ".join(problems))

    def start(self, since_scn: int | None) -> int:
        if self._thread is not None:
            raise SluiceError("chained capture already started")
        self._after = self.check().end_scn if since_scn is None else since_scn
        self._thread = threading.Thread(
            target=run_supervised,
            args=(
                self._stream_once,
                self._stop,
                self.stats,
                (RelayUnavailable, DecodeError),
                self.settings.on_fatal,
                f"upstream relay {self.url.describe()}",
            ),
            name="sluice-chain",
            daemon=True,
        )
        self._thread.start()
        return self._after

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):  # wakes the thread out of a long poll
                conn.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=30)

    def on_persisted(self, scn: int) -> None:
        """Nothing to release: an upstream relay keeps no state for its readers."""

    # -- the capture thread ------------------------------------------------------------------
    def _stream_once(self) -> None:
        """Responses of the upstream in use, one after another, until it fails or stop."""
        base = self.upstream
        try:
            if self._schemas_from != base:  # then only versions a window brings, as they come
                self._take_schemas(base, self.settings.tables)
                self._schemas_from = base
            while not self._stop.is_set():
                self._stream(base)
        except RelayUnavailable:
            self._next_upstream()
            raise
        except BootstrapRequired as exc:
            self._behind(base, exc)
        except CheckpointError as exc:
            self._ahead(base, exc)

    def _stream(self, base: str) -> None:
        params = {
            "since_scn": str(self._after),
            "sources": ",".join(self.settings.tables),
            "timeout_ms": str(LONG_POLL_MS),
            "cold": "true",
        }
        # the upstream's console lists this relay among its followers, by its name
        name = {CLIENT_HEADER: self.settings.name} if self.settings.name else {}
        conn, resp = open_get(base, "/stream", params, name)
        self._conn = conn
        self._refused.pop(base, None)
        self._unseen.discard(base)
        try:
            self._note_end(resp.getheader("X-Sluice-Max-Scn"))
            self.stats.connected = True
            parser = PieceParser(self.settings.part_bytes or (1 << 20))
            while not self._stop.is_set():
                chunk = resp.read1(1 << 20)
                if not chunk:
                    break
                for frame in parser.feed(chunk):
                    self._take(base, frame)
            if parser.pending and not self._stop.is_set():
                raise RelayUnavailable(f"{base}: stream cut in the middle of a window")
        except (OSError, http.client.HTTPException) as exc:  # reset, or cut mid-chunk
            if self._stop.is_set():
                return
            raise RelayUnavailable(f"{base}: {first_line(exc)}") from None
        finally:
            self._conn = None
            conn.close()
            if self._parts:  # the relay drops the parts it holds; they come again
                self._parts = False
                self.settings.sink(ABORTED)

    def _take(self, base: str, frame: bytes | wire.Heartbeat | Piece) -> None:
        now = int(time.time() * 1000)
        self.stats.last_seen_ms = now
        if isinstance(frame, wire.Heartbeat):
            self._advance(frame.scn)
            return
        last = not isinstance(frame, Piece) or frame.last
        header, events, pairs = split_window(frame if isinstance(frame, bytes) else frame.record)
        unknown = pairs - self._known
        if unknown:
            self._take_schemas(base, tuple(sorted({s for s, _v in unknown})))
            missing = pairs - self._known
            if missing:
                source, version = min(missing)
                raise SchemaError(
                    f"{base} sent events of {source} schema version {version}, which it does "
                    "not serve at /schemas",
                    source=source,
                )
        if not last:
            self._parts = True
            self.settings.sink(CapturedWindow(0, 0, events, more=True))
            return
        self._parts = False
        self.settings.sink(CapturedWindow(header.scn, header.ts_ms, events))
        self.stats.windows += 1
        self.stats.events += header.n_events
        self.stats.last_commit_ms = header.ts_ms
        self.stats.last_receive_ms = now
        self._advance(header.scn)

    def _advance(self, scn: int) -> None:
        self._after = max(self._after, scn)
        self.stats.last_scn = max(self.stats.last_scn, scn)
        self.stats.source_end_scn = max(self.stats.source_end_scn, scn)

    def _note_end(self, value: str | None) -> None:
        if value and value.isdigit():
            self.stats.source_end_scn = max(self.stats.source_end_scn, int(value))

    def _take_schemas(self, base: str, sources: tuple[str, ...]) -> None:
        """Every schema version the upstream has of ``sources``, under its own number."""
        registry = self.settings.registry
        for source in sources:
            for schema in _schemas(base, source):
                registry.adopt(schema)
                self._known.add((source, schema.version))

    # -- failover, and an upstream that cannot serve the SCN ---------------------------------
    def _next_upstream(self) -> None:
        if len(self.url.upstreams) < 2:
            return
        lost = self.upstream
        self._current = (self._current + 1) % len(self.url.upstreams)
        self.failovers += 1
        self._publish()
        log.warning(
            "upstream %s lost: going on from %s after SCN %d", lost, self.upstream, self._after
        )

    def _behind(self, base: str, exc: BootstrapRequired) -> None:
        """``base`` no longer holds the SCN after which this relay reads (410): another
        upstream may; then a bootstrap server's log; else capture stops and says why."""
        self._refused[base] = int(exc.oldest_scn or 0)
        waiting = [u for u in self.url.upstreams if u not in self._refused]
        if waiting:
            log.warning(
                "upstream %s no longer holds SCN %d: trying %s", base, self._after, waiting[0]
            )
            self._current = self.url.upstreams.index(waiting[0])
            self.failovers += 1
            self._publish()
            return
        oldest = min(self._refused.values())
        if self.url.bootstrap is not None and self._from_bootstrap(oldest):
            self._refused.clear()
            return
        raise SourceError(
            f"this relay fell out of its upstreams' buffers: it needs the windows after SCN "
            f"{self._after}, and the oldest they hold is {oldest}"
            + (
                f" (the bootstrap server {self.url.bootstrap}'s log does not reach it either)"
                if self.url.bootstrap
                else ""
            )
            + ". Name a bootstrap server whose log covers the range (sluice://HOST:PORT"
            "?bootstrap=http://HOST:PORT), or restart this relay with --since-scn "
            f"{oldest} (its consumers behind that SCN then bootstrap)",
            scn=self._after,
        )

    def _from_bootstrap(self, until: int) -> bool:
        """The windows after ``_after`` from the bootstrap server's log, up to ``until`` (the
        upstreams' oldest) or the log's end; True when it got past ``_after``."""
        assert self.url.bootstrap is not None
        start = self._after
        log.warning(
            "upstreams no longer hold SCN %d: reading SCNs up to %d from the bootstrap log at %s",
            start,
            until,
            self.url.bootstrap,
        )
        params = {"since_scn": str(start), "sources": ",".join(self.settings.tables)}
        moved = True
        while moved and self._after < until and not self._stop.is_set():
            before = self._after
            params["since_scn"] = str(before)
            for frame in frames(self.url.bootstrap, "/stream", params):
                self._take(self.url.bootstrap, frame)
            moved = self._after > before
        self.bootstrap_reads += 1
        self._publish()
        return self._after > start and self._after >= until

    def _ahead(self, base: str, exc: CheckpointError) -> None:
        """``base`` has never seen this relay's SCN (409): a different source, or one behind."""
        self._unseen.add(base)
        if len(self._unseen) < len(self.url.upstreams):
            self._next_upstream()
            return
        raise SourceError(
            f"{exc}: this relay holds SCNs its upstream has never seen. Point it at relays "
            "of the same database, or start it with a new --data-dir",
            scn=self._after,
        )
