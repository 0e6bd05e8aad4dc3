"""The query source: tables polled with SQL (Kafka Connect JDBC style) as a ``CaptureSource``.

SCN: synthetic, strictly increasing, about the poll's time in microseconds since the epoch
(``max(previous + 1, now)``), so it also orders against the SCNs of a restarted relay. Each
page of a poll is one window; the page's positions go to the journal (``journal.py``) before
the window goes to the relay, which is what makes "resume after SCN s" exact.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.capture.query.dialect import Dialect
from sluice.capture.query.journal import JOURNAL, Journal
from sluice.capture.query.options import TableOptions, parse_options
from sluice.capture.query.poll import Page, TablePoller, check_columns
from sluice.capture.query.seed import QuerySeeder
from sluice.capture.query.url import dialect_of, parse_query_url
from sluice.capture.seeding import Seeder
from sluice.capture.source import (
    CapturedWindow,
    CaptureSettings,
    CaptureSource,
    CaptureStats,
    run_supervised,
    undecodable,
)
from sluice.errors import (
    ConfigError,
    DecodeError,
    SluiceError,
    SourceError,
    SourceSetupError,
    first_line,
)
from sluice.schemas import TableSchema, arrow_frames

log = logging.getLogger(__name__)
TAKES_TABLE_OPTIONS = True  # [tables."..."] settings (source.open_capture checks)
_SKIPS_REMEMBERED = 1000  # per table: skipped rows whose ERROR line is not repeated
_PING_S = 1.0  # the longest the poll thread sleeps: health needs a word from the database


parse_url = parse_query_url


def describe(url: str, source: str) -> TableSchema:
    dialect = dialect_of(parse_url(url))
    dialect.connect()
    try:
        return dialect.describe(source)
    finally:
        dialect.close()


def open_seeder(url: str) -> Seeder:
    """Chunks stamped with the time their read began (``seed.py``)."""
    return QuerySeeder(url, dialect_of(parse_url(url)))


def seed_jars() -> tuple[str, ...]:
    """None: seeding reads chunks through the dialect's DB-API driver (no JDBC path)."""
    return ()


def source_info(url: str) -> dict[str, Any]:
    """What event formats name the source by."""
    return {"connector": f"query+{parse_url(url).kind}"}


def open_capture(url: str, settings: CaptureSettings) -> CaptureSource:
    return QueryCapture(dialect_of(parse_url(url)), settings)


@dataclass(frozen=True, slots=True)
class _Info:
    end_scn: int


class QueryCapture:
    """Polls its tables in one thread; not ``rereadable`` (a poll cannot go back in time)."""

    rereadable = False

    def __init__(self, dialect: Dialect, settings: CaptureSettings) -> None:
        self.settings = settings
        self.stats = CaptureStats()
        self.dialect = dialect
        self.options = _table_options(settings.tables, settings.table_options)
        self.journal = Journal(settings.state_dir)
        self.pollers: dict[str, TablePoller] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._persisted = 0
        self._scn = 0
        self._skips_said: dict[str, set[str]] = {}  # per table: skipped rows logged already

    # -- CaptureSource -----------------------------------------------------------------------
    def check(self) -> _Info:
        """Every table readable and its options fitting its columns, before anything starts."""
        self.dialect.connect()
        try:
            for source, options in self.options.items():
                check_columns(self.dialect.describe(source), options)
        except self.dialect.errors as exc:
            raise SourceSetupError(
                f"the {self.dialect.name} database refused: {first_line(exc)}"
            ) from None
        return _Info(self.journal.last_scn)

    def start(self, since_scn: int | None) -> int:
        if self._thread is not None:
            raise SluiceError("capture already started")
        since = self.journal.last_scn if since_scn is None else since_scn
        positions = self.journal.positions_at(since)
        if positions is None:
            raise SourceSetupError(
                f"no poll positions are recorded at SCN {since} in {JOURNAL}: this query "
                "source can resume only where it stopped; start with --since-scn 0 (every row "
                "again) or an empty --data-dir"
            )
        self._scn = max(since, self.journal.last_scn)
        self._persisted = since
        self.pollers = {
            source: TablePoller(
                source, options, self.dialect, self.settings.registry, positions.get(source)
            )
            for source, options in self.options.items()
        }
        self.stats.last_scn = self.stats.source_end_scn = since
        self._report_framer()
        self._thread = threading.Thread(target=self._run, name="sluice-query-poll", daemon=True)
        self._thread.start()
        return since

    def _report_framer(self) -> None:
        """Which framer writes the page path's events (``/stats``); the slower says why."""
        why = arrow_frames.unavailable()
        self.stats.details["event_framer"] = "numpy" if why else "compiled"
        if why:
            log.warning("pages are framed by the numpy path (slower): %s", why)

    def on_persisted(self, scn: int) -> None:
        self._persisted = scn

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.dialect.close()
        self.journal.close()

    # -- the poll thread ---------------------------------------------------------------------
    def _run(self) -> None:
        run_supervised(
            self._poll_forever,
            self._stop,
            self.stats,
            self.dialect.transient,
            self.settings.on_fatal,
            f"the {self.dialect.name} database",
        )

    def _poll_forever(self) -> None:
        self.dialect.close()
        self.dialect.connect()
        self.stats.connected = True
        self.stats.local_error = None
        due = dict.fromkeys(self.pollers, 0.0)
        while not self._stop.is_set():
            polled = False
            for source in sorted(due, key=due.__getitem__):
                if due[source] > time.monotonic() or source in self.stats.stopped_sources:
                    continue
                self._poll(source)
                polled = True
                due[source] = time.monotonic() + self.options[source].poll_interval_s
            if not polled:  # between long poll intervals: still say whether it is there
                self.dialect.ping()
            self.stats.last_seen_ms = int(time.time() * 1000)
            self.journal.compact(self._persisted)
            wake = min(due.values(), default=time.monotonic() + 1.0)
            self._stop.wait(max(0.0, min(wake - time.monotonic(), _PING_S)))

    def _poll(self, source: str) -> None:
        poller = self.pollers[source]
        try:
            for page in poller.poll():
                if page.skipped and not self._skip(source, page):
                    break  # stopped before the page: the poll resumes before it
                if page.events:  # every row of it skipped: its position moves on all the same
                    self._deliver(source, page.events, page.position)
        except self.dialect.transient:
            raise  # the supervisor reconnects and polls again from the positions
        except self.dialect.errors as exc:
            raise SourceError(
                f"polling {source} failed: {first_line(exc)}", source=source
            ) from None
        except DecodeError as exc:
            self.stats.stopped_sources[source] = str(exc)
            log.error(
                "capture of %s stopped: %s; the other tables go on. Fix the row, then "
                "restart the relay",
                source,
                exc,
            )
        finally:
            self.journal.sync()
        self.stats.tables[source] = {
            "mode": self.options[source].mode,
            **poller.position,
            "page_path_pages": poller.page_path_pages,
            "row_path_pages": poller.row_path_pages,
            "row_path_why": poller.row_path_why,
        }
        # the fallback in /metrics too (capture_source_row_path_pages)
        self.stats.details["row_path_pages"] = sum(p.row_path_pages for p in self.pollers.values())
        self.stats.details.update(self.dialect.report())

    def _skip(self, source: str, page: Page) -> bool:
        """Rows of a page that did not convert, by ``on_decode_error`` (``undecodable``, as
        log sources do): ``skip`` counts each and logs why (the page goes on without them; a
        row skipped again, as a bulk poll does every pass, is counted, not logged again);
        ``stop_source`` stops the table before the page. Whether the page goes on."""
        said = self._skips_said.setdefault(source, set())
        for message in page.skipped:
            if message in said and self.settings.on_decode_error == "skip":
                self.stats.skipped_events += 1  # bulk reads it again every poll: said once
                continue
            if len(said) < _SKIPS_REMEMBERED:
                said.add(message)
            undecodable(
                self.stats,
                self.settings.on_decode_error,
                source,
                message,
                page.events,
                fix="restart the relay (its poll resumes before the row)",
            )
            if source in self.stats.stopped_sources:
                return False
        return True

    def _deliver(self, source: str, events: list[bytes], position: dict[str, Any]) -> None:
        now_us = int(time.time() * 1_000_000)
        self._scn = scn = max(self._scn + 1, now_us)
        positions = {s: p.position for s, p in self.pollers.items()}
        positions[source] = position
        self.journal.append(scn, positions)  # before the window leaves: resume is exact
        self.settings.sink(CapturedWindow(scn, now_us // 1000, events))
        stats = self.stats
        stats.windows += 1
        stats.events += len(events)
        stats.last_scn = stats.source_end_scn = scn
        stats.last_commit_ms = stats.last_receive_ms = stats.last_seen_ms = now_us // 1000


def _table_options(
    tables: tuple[str, ...], raw: Mapping[str, Mapping[str, Any]]
) -> dict[str, TableOptions]:
    stray = sorted(set(raw) - set(tables))
    if stray:
        raise ConfigError(
            f'[tables."{stray[0]}"] names a table this relay does not capture ({", ".join(tables)})'
        )
    return {t: parse_options(t, raw.get(t)) for t in tables}
