"""The seam every source kind plugs into: a ``CaptureSource`` reads its database's log in a
thread of its own and hands committed windows to a sink, in SCN order.

The relay (and anything else that captures) names no source kind: it calls
``open_capture(url, settings)``, which picks the implementation by the URL's scheme.
"""

from __future__ import annotations

import errno
import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from sluice.capture.seeding import Seeder
from sluice.core import wire
from sluice.errors import ConfigError, SluiceError, SourceError, first_line
from sluice.schemas import SchemaRegistry, TableSchema

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CapturedWindow:
    """One committed transaction's events (encoded wire events), at its SCN.

    A transaction bigger than ``CaptureSettings.part_bytes`` comes in parts, so that no one
    holds it whole: every part but the last has ``more`` set and ``scn`` 0 (a log source
    learns the SCN at the commit); the last part carries the SCN and the commit time. A
    capture that loses its connection after handing over parts hands over ``ABORTED``
    before it reads the transaction again: the receiver drops the parts it has.
    """

    scn: int
    ts_ms: int
    events: list[bytes]
    more: bool = False

    @property
    def aborts(self) -> bool:
        return self.scn < 0


ABORTED = CapturedWindow(-1, 0, [])


@dataclass(slots=True)
class CaptureStats:
    """Read by the relay's loop, written by the capture thread (plain ints: atomic enough)."""

    windows: int = 0
    events: int = 0
    last_scn: int = 0  # the last commit seen, with or without captured rows
    last_commit_ms: int = 0
    last_receive_ms: int = 0
    source_end_scn: int = 0
    reconnects: int = 0
    connected: bool = False
    # when the source last said anything (a commit, a heartbeat, a keepalive), epoch ms:
    # a stalled or frozen source shows as silence
    last_seen_ms: int = 0
    skipped_events: int = 0  # rows skipped (on_decode_error = "skip")
    # sources stopped by a row that cannot be decoded (on_decode_error = "stop_source")
    stopped_sources: dict[str, str] = field(default_factory=dict)
    # the last failure of this machine capture waited out (a full disk); it matters while
    # ``connected`` is false
    local_error: str | None = None
    # per captured table, what a source kind reports of it (PostgreSQL: its replica identity)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    # what a source kind reports of its own (PostgreSQL: its slot's positions)
    details: dict[str, Any] = field(default_factory=dict)


class SourceInfo(Protocol):
    """What ``check()`` found: at least the source's current end, as an SCN."""

    @property
    def end_scn(self) -> int: ...


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    """What a capturer gives any source kind."""

    tables: tuple[str, ...]
    registry: SchemaRegistry
    sink: Callable[[CapturedWindow], None]  # may block: that is backpressure
    on_fatal: Callable[[SluiceError], None] | None = None
    # hand an open transaction over in parts of about this many bytes (``CapturedWindow``)
    part_bytes: int | None = None
    on_decode_error: str = "stop_source"
    # A second, short-lived reader of a range the relay already captured (its cold reads): a
    # kind whose reader the server knows by an identity (MySQL's binlog dump server id) takes
    # one of its own, so the relay's reader keeps running.
    cold: bool = False
    # per-table settings (``[tables."DB.T"]``), for kinds that take them (query sources)
    table_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    state_dir: Path | None = None  # where a kind may keep its own state (the relay's data dir)
    # what the capturer calls itself to a source that asks (a chained relay's upstream lists
    # it among the followers on its console)
    name: str | None = None


class CaptureSource(Protocol):
    """One source database. ``check()``, then ``start(after)``; windows go to the sink."""

    stats: CaptureStats
    # Whether ``start`` accepts an SCN older than the newest one it delivered (the relay's
    # cold reads re-read a range that way); a replication slot cannot go back.
    rereadable: bool

    def check(self) -> SourceInfo:
        """Connect and check the server's settings; ``SourceSetupError`` names the fix."""
        ...

    def start(self, since_scn: int | None) -> int:
        """Capture the windows after ``since_scn`` (None: from the current end); returns the
        SCN it starts after. Runs in a thread of its own until ``stop()``."""
        ...

    def stop(self) -> None: ...

    def on_persisted(self, scn: int) -> None:
        """Every window up to ``scn`` is in the relay's buffer and its max SCN is saved: the
        source may now release its log up to there (a slot confirms it)."""
        ...


class SourceKind(Protocol):
    """What the module of a source kind provides (``_KINDS`` names it by URL scheme); mypy
    checks each kind module against it (``kind_check.py``)."""

    # Whether the kind takes per-table settings (``[tables."DB.T"]``; query sources do).
    TAKES_TABLE_OPTIONS: bool

    def open_capture(self, url: str, settings: CaptureSettings) -> CaptureSource:
        """The capture of the source ``url`` names (not started)."""
        ...

    def describe(self, url: str, source: str) -> TableSchema:
        """The schema a capture of ``source`` would register now."""
        ...

    def open_seeder(self, url: str) -> Seeder:
        """The seeding side of the source (connected); ``ConfigError`` where it has none."""
        ...

    def source_info(self, url: str) -> dict[str, Any]:
        """How event formats name the source, JSON-serialisable (it travels over HTTP and to
        Spark workers): ``connector`` (Debezium's connector whose form events take, when
        there is one) and ``debezium`` (its source block's constant ``fields`` and the
        ``position`` fields an SCN gives: see ``schemas/debezium.py``)."""
        ...

    def parse_url(self, url: str) -> object:
        """The parsed URL; ``ConfigError`` for one the kind cannot read."""
        ...

    def seed_jars(self) -> tuple[str, ...]:
        """JARs a Spark session seeding from this kind should load (``spark.jars``): the
        JDBC driver of the kind's fast path, where it has one and it is installed."""
        ...


# scheme -> the module of a source kind (a ``SourceKind``), imported on demand (a kind's
# driver is needed only when it is used).
_KINDS = {
    "mysql": "sluice.capture.mysql.capture",
    "mariadb": "sluice.capture.mysql.capture",
    "postgresql": "sluice.capture.postgres.capture",
    "postgres": "sluice.capture.postgres.capture",
    "query+sqlite": "sluice.capture.query.capture",
    "query+postgresql": "sluice.capture.query.capture",
    "query+postgres": "sluice.capture.query.capture",
    "query+mysql": "sluice.capture.query.capture",
    "query+mariadb": "sluice.capture.query.capture",
    "sluice": "sluice.capture.chain.capture",  # other relays (relay chaining)
}


def bad_url(hint: str) -> ConfigError:
    """An unparsable source URL, never in the parser's own words: they can quote part of the
    password."""
    return ConfigError(
        "bad source URL: its HOST:PORT part is not valid (a password holding / # ? @ or : "
        "must be percent-encoded, or given in SLUICE_SOURCE_PASSWORD); " + hint
    )


def known_schemes() -> tuple[str, ...]:
    return tuple(_KINDS)


def _kind(url: str) -> SourceKind:
    scheme = urlsplit(url).scheme.lower()
    module = _KINDS.get(scheme)
    if module is None:
        raise ConfigError(
            f"unknown source scheme {scheme or '(none)'!r}: Sluice captures "
            + ", ".join(f"{s}://" for s in _KINDS)
        )
    try:
        # a module is checked against ``SourceKind`` by mypy, not here (test_source_kinds)
        return cast(SourceKind, importlib.import_module(module))
    except ImportError as exc:
        raise ConfigError(
            f"{scheme}:// sources need a driver that is not installed ({exc.name}): "
            "pip install 'sluice[postgres]'"
        ) from None


def open_capture(url: str, settings: CaptureSettings) -> CaptureSource:
    """The capture of the source ``url`` names, by its scheme."""
    kind = _kind(url)
    if settings.table_options and not kind.TAKES_TABLE_OPTIONS:
        first = next(iter(settings.table_options))
        raise ConfigError(
            f'[tables."{first}"] settings apply to query sources (query+...://) only; '
            "remove them for this source"
        )
    return kind.open_capture(url, settings)


def describe(url: str, source: str) -> TableSchema:
    """The schema a capture of ``source`` would register now (``sluice schema generate``)."""
    return _kind(url).describe(url, source)


def source_info(url: str) -> dict[str, Any]:
    """How event formats name the source (``connector``, ``db``): Debezium's source block."""
    return dict(_kind(url).source_info(url))


def check_url(url: str) -> None:
    """Refuse a URL its kind cannot parse (``ConfigError``), before anything starts."""
    _kind(url).parse_url(url)


def seed_jars(url: str) -> tuple[str, ...]:
    """JARs a Spark session seeding from ``url`` should load (``spark.jars``): the JDBC
    driver of the kind's fast path, where it has one and it is installed."""
    return tuple(_kind(url).seed_jars())


def open_seeder(url: str) -> Seeder:
    """The seeding side of the source ``url`` names, by its scheme (connected)."""
    return _kind(url).open_seeder(url)


def end_scn(url: str) -> int:
    """The source's current end as an SCN (its last commit is at or before it), by its kind:
    for tools that wait for a workload to be captured (the demo, tests)."""
    seeder = open_seeder(url)
    try:
        return seeder.end_scn()
    finally:
        seeder.close()


# Failures on this machine, not the source's, that pass once the disk or descriptors free up.
LOCAL_TRANSIENT = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE})


def run_supervised(
    stream_once: Callable[[], None],
    stop: Any,
    stats: CaptureStats,
    transient: tuple[type[BaseException], ...],
    on_fatal: Callable[[SluiceError], None] | None,
    what: str,
) -> None:
    """A capture thread's body for any source kind: ``stream_once`` until ``stop`` is set;
    a ``transient`` failure (the server went away) reconnects with backoff from the last
    commit; any other failure stops capture and is reported to ``on_fatal``."""
    delay = 0.1
    while not stop.is_set():
        try:
            stream_once()
            delay = 0.1
        except transient as exc:
            if stop.is_set():
                break
            stats.connected = False
            stats.reconnects += 1
            text = first_line(exc)
            log.warning("%s lost (%s); reconnecting in %.1f s", what, text, delay)
            stop.wait(delay)
            delay = min(delay * 2, 5.0)
        except OSError as exc:
            if exc.errno not in LOCAL_TRANSIENT or stop.is_set():
                _crash(stop, stats, on_fatal, exc)
                return
            # A full disk or no descriptors here (a schema file could not be written): read
            # again from the last commit once there is room.
            stats.connected = False
            stats.local_error = f"{exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}"
            log.error("capture paused: %s; retrying in %.1f s", stats.local_error, delay)
            stop.wait(delay)
            delay = min(delay * 2, 5.0)
        except SluiceError as exc:
            _fail(stop, stats, on_fatal, exc)
            return
        except Exception as exc:
            _crash(stop, stats, on_fatal, exc)
            return


def _crash(
    stop: Any, stats: CaptureStats, on_fatal: Callable[[SluiceError], None] | None, exc: Exception
) -> None:
    """An unforeseen failure: its traceback to the log, one sentence to the owner."""
    log.exception("capture failed")
    _fail(stop, stats, on_fatal, SourceError(f"capture failed: {exc!r}"))


def _fail(
    stop: Any, stats: CaptureStats, on_fatal: Callable[[SluiceError], None] | None, exc: SluiceError
) -> None:
    if stop.is_set():
        return
    stats.connected = False
    log.error("capture stopped: %s", exc)
    if on_fatal is not None:
        on_fatal(exc)


def report_transcoder(stats: CaptureStats, said: set[str], source: str, why: str) -> None:
    """Which transcoder a table takes, in ``stats`` (per table, and the count of tables on the
    Python path for ``/metrics``); ``why`` ('' for the compiled one) is a WARNING once per
    reason (``said`` holds those said)."""
    stats.tables.setdefault(source, {}).update(
        transcoder="python" if why else "compiled", transcoder_why=why or None
    )
    stats.details["python_transcoder_tables"] = sum(
        1 for info in stats.tables.values() if info.get("transcoder") == "python"
    )
    if why and why not in said:
        said.add(why)
        log.warning(
            "%s is decoded by the Python transcoder (several times slower than the compiled "
            "one): %s",
            source,
            why,
        )


def undecodable(
    stats: CaptureStats,
    policy: str,
    source: str,
    message: str,
    events: list[bytes],
    fix: str = "restart the relay with --since-scn before it",
) -> None:
    """A row capture cannot decode, by ``on_decode_error``: ``skip`` drops that change and
    counts it; ``stop_source`` stops that source, dropping its events of the open transaction
    so it stops at a transaction boundary. Either way the other sources go on. ``fix`` says
    how that source's capture comes back once the row is fixed."""
    if policy == "skip":
        stats.skipped_events += 1
        log.error("skipped a change: %s", message)
        return
    stats.stopped_sources[source] = message
    name = source.encode()
    events[:] = [e for e in events if wire.event_source(e) != name]
    log.error(
        "capture of %s stopped: %s; the other tables go on. Fix the row, then %s, or set "
        'on_decode_error = "skip"',
        source,
        message,
        fix,
    )
