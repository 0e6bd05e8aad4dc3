"""PostgreSQL capture: logical replication with the built-in ``pgoutput`` plugin, in a thread.

SCN = the end LSN of a transaction's commit record, as a 64-bit integer. A slot started at
LSN X skips every transaction whose commit record starts before X; the next transaction's
commit starts at or after the previous one's end, so resuming after SCN s delivers exactly the
transactions after s. The slot is confirmed only up to what the relay reports persisted
(``on_persisted``), never ahead; with nothing pending it follows the server's sent position,
so an idle set of tables on a busy database does not keep WAL forever.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from typing import Any

import psycopg2
import psycopg2.extras

from sluice.capture.postgres import pgoutput
from sluice.capture.postgres.pending import (
    MAX_RUN,
    MAX_WINDOWS,
    Pending,
    bulk_events,
)
from sluice.capture.postgres.setup import (
    PgUrl,
    check_server,
    connect,
    parse_pg_url,
    primary_key,
)
from sluice.capture.postgres.tables import (
    CHANGE_TAGS,
    CatalogFacts,
    PgTable,
    catalog_facts,
    table_columns,
)
from sluice.capture.seeding import Seeder
from sluice.capture.source import (
    ABORTED,
    CapturedWindow,
    CaptureSettings,
    CaptureSource,
    CaptureStats,
    report_transcoder,
    run_supervised,
    undecodable,
)
from sluice.core.names import source_name, split_source
from sluice.errors import (
    DecodeError,
    SluiceError,
    SourceConnectionError,
    SourceError,
    SourceSetupError,
    first_line,
)
from sluice.schemas import TableSchema

log = logging.getLogger(__name__)
TAKES_TABLE_OPTIONS = False  # no [tables."..."] settings (a ``SourceKind``)
# The walsender sends each message with its own send() while its client keeps up, and about
# twice as fast when they pile up (benchmarks/pg_capture.py): after reading a burst this big,
# read on only this long after the burst's reading began. Only a busy stream waits, at most
# this long (20 ms read the walsender's output faster than 10 ms, and as fast as 30 ms, in
# rounds of the same WAL: each wake-up of a waiting reader costs the walsender too).
BUSY_BURST = 256
BUSY_PAUSE = 0.02
PREFETCH_TABLES = 8  # more tables: each is described when its first change comes


class _PgInfo:
    def __init__(self, end_scn: int) -> None:
        self.end_scn = end_scn


parse_url = parse_pg_url


def open_seeder(url: str) -> Seeder:
    """The ``Seeder`` of a PostgreSQL database (one exported snapshot for every chunk)."""
    from sluice.capture.postgres.seed import PgSeeder  # noqa: PLC0415 - only seeding needs it

    return PgSeeder(parse_pg_url(url))


def seed_jars() -> tuple[str, ...]:
    """None: seeding reads chunks through psycopg2 (no JDBC path)."""
    return ()


def open_capture(url: str, settings: CaptureSettings) -> CaptureSource:
    return PostgresCapture(parse_pg_url(url), settings)


def source_info(url: str) -> dict[str, Any]:
    """What event formats name the source by (Debezium's ``source`` block)."""
    return described_source(parse_pg_url(url).dbname)


def described_source(dbname: str) -> dict[str, Any]:
    """``source_info`` of database ``dbname``: events take Debezium's PostgreSQL connector's
    form, the block's ``db`` and ``lsn`` (the SCN is the commit's LSN) declared under
    ``debezium`` (``schemas/debezium.py`` follows it)."""
    return {
        "connector": "postgresql",
        "db": dbname,
        "debezium": {"fields": {"db": dbname}, "position": {"lsn": {}}},
    }


def describe(url: str, source: str) -> TableSchema:
    """The schema capture registers for ``source`` (as from its Relation message)."""
    parsed = parse_pg_url(url)
    conn = connect(parsed)
    conn.autocommit = True
    try:
        namespace, table = split_source(source)
        columns = table_columns(conn, namespace, table)
        if not columns:
            raise SourceSetupError(f"unknown table {source!r} in database {parsed.dbname}")
        return TableSchema(source, 1, tuple(columns), primary_key(conn, namespace, table))
    finally:
        conn.close()


class PostgresCapture:
    """A ``CaptureSource`` over a logical replication slot (which cannot go back: not
    ``rereadable``)."""

    rereadable = False

    def __init__(self, url: PgUrl, settings: CaptureSettings) -> None:
        self.url = url
        self.settings = settings
        self.stats = CaptureStats()
        self._tables = frozenset(settings.tables)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._persisted = 0  # written by the relay's loop, read by the thread
        self._delivered = 0  # the newest window handed to the sink
        self._parts_open = False  # parts of an unfinished transaction were handed over
        self._details_at = 0.0
        self._asked_at = 0.0
        self._fed_at = 0.0
        self._relations: dict[int, PgTable | None] = {}
        self._said_python: set[str] = set()  # why relations keep the Python paths, said once
        self._said_refused: set[str] = set()  # tables whose runs the compiled path refused
        self._meta: Any = None
        self._spare: tuple[Any, float] | None = None  # the checks' connection, and when made
        self._catalog: dict[str, CatalogFacts] = {}  # read ahead by _prefetch

    # -- CaptureSource -----------------------------------------------------------------------
    def check(self) -> _PgInfo:
        conn = connect(self.url)
        conn.autocommit = True
        try:
            info = _PgInfo(check_server(conn, self.url, tuple(sorted(self._tables))))
        except psycopg2.Error as exc:  # a refusal the checks did not foresee: say it, no trace
            conn.close()
            text = first_line(exc)
            raise SourceSetupError(f"PostgreSQL refused a set-up query: {text}") from None
        except BaseException:
            conn.close()
            raise
        self._keep_spare(conn)
        return info

    def _keep_spare(self, conn: Any) -> None:
        """Keep the checks' connection for the stream about to start (a connection costs a
        few ms of the start); an older one goes."""
        old, self._spare = self._spare, (conn, time.monotonic())
        if old is not None:
            old[0].close()

    def start(self, since_scn: int | None) -> int:
        if self._thread is not None:
            raise SluiceError("capture already started")
        start = self.check().end_scn if since_scn is None else since_scn
        self.stats.last_scn = start
        self._persisted = start
        self._thread = threading.Thread(target=self._run, name="sluice-pg-capture", daemon=True)
        self._thread.start()
        return start

    def on_persisted(self, scn: int) -> None:
        self._persisted = max(self._persisted, scn)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None
        spare, self._spare = self._spare, None
        if spare is not None:
            spare[0].close()

    # -- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        # A shutdown ends the COPY stream with "no COPY in progress" (a DatabaseError): like
        # any lost connection, reconnect from the last commit.
        run_supervised(
            self._stream_once,
            self._stop,
            self.stats,
            (SourceConnectionError, psycopg2.DatabaseError, psycopg2.InterfaceError),
            self.settings.on_fatal,
            "replication connection",
        )

    def _stream_once(self) -> None:
        if self._parts_open:  # read again from the last commit: its parts come again
            self.settings.sink(ABORTED)
            self._parts_open = False
        conn = connect(self.url, connection_factory=psycopg2.extras.LogicalReplicationConnection)
        spare, self._spare = self._spare, None
        if spare is not None and time.monotonic() - spare[1] < 10:
            self._meta = spare[0]  # the checks' connection, made just before
        else:
            if spare is not None:
                spare[0].close()
            self._meta = connect(self.url)
            self._meta.autocommit = True
        self._relations.clear()
        try:
            cur = conn.cursor()
            try:
                cur.start_replication(
                    slot_name=self.url.slot,
                    decode=False,
                    start_lsn=self.stats.last_scn,
                    options={"proto_version": "1", "publication_names": self.url.publication},
                )
            except psycopg2.Error as exc:
                text = str(exc).strip().splitlines()[0]
                if "is active" in text:
                    raise SourceError(
                        f"replication slot {self.url.slot} is used by another process (another "
                        "relay?): give this relay its own slot (?slot=NAME in the source URL)"
                    ) from None
                raise
            self.stats.connected = True
            log.info("streaming slot %s from LSN %s", self.url.slot, _lsn(self.stats.last_scn))
            self._catalog = self._prefetch()
            self._pump(cur)
        finally:
            conn.close()
            self._meta.close()

    def _pump(self, cur: Any) -> None:
        pending = Pending()
        confirmed = 0
        read, stopping, commit_end = cur.read_message, self._stop.is_set, pgoutput.commit_end
        burst = 0  # messages read since the last time all that arrived was read
        began = time.monotonic()  # when this burst's reading began
        while not stopping():
            message = read()
            if message is None:  # all that arrived is read: deliver what it made
                self._deliver(pending)
                idle = not pending.events and not pending.run  # no transaction open
                confirmed = self._feedback(cur, confirmed, idle)
                self._slot_details(confirmed)
                if burst >= BUSY_BURST:  # a busy stream: let the server's sends pile up
                    burst = 0
                    wait = BUSY_PAUSE - (time.monotonic() - began)
                    if wait > 0:  # (none when reading took that long: the server waited)
                        time.sleep(wait)
                    began = time.monotonic()
                    continue
                burst = 0
                ready, _, _ = select.select([cur], [], [], 0.5)
                began = time.monotonic()
                if ready:  # the server said something (at least the keepalive asked for
                    # each idle second): a frozen server says nothing, and /healthz sees it
                    self.stats.last_seen_ms = int(time.time() * 1000)
                continue
            payload = message.payload
            tag = payload[0]
            burst += 1
            if tag in CHANGE_TAGS:
                if payload[1:5] != pending.relid or len(pending.run) >= MAX_RUN:
                    self._changes(pending)
                    self._check_size(pending)
                    pending.relid = payload[1:5]
                pending.run.append(message)
                continue
            if tag == 66:  # Begin: nothing capture needs (the Commit has the positions)
                continue
            if tag == 67:  # Commit (delivering its window records the positions)
                pending.commit(*commit_end(payload))
                if len(pending.windows) >= MAX_WINDOWS:
                    self._deliver(pending)
                continue
            self.stats.source_end_scn = max(self.stats.source_end_scn, message.wal_end)
            self._changes(pending)  # a Relation may change the run's table: transcode first
            parsed = pgoutput.parse(payload)
            if isinstance(parsed, pgoutput.Relation):
                self._relations[parsed.relid] = self._describe(parsed)
            elif isinstance(parsed, pgoutput.Truncate):
                stopped = self.stats.stopped_sources  # survives reconnects
                for relid in parsed.relids:  # every row of the table is gone: one t event
                    table = self._relations.get(relid)
                    if table is not None and table.source not in stopped:
                        pending.events.append(table.truncate_event())

    def _check_size(self, pending: Pending) -> None:
        """Hand the open transaction over in parts once its events outgrow a part (after the
        windows committed before it): memory stays bounded, whatever the transaction's size."""
        limit = self.settings.part_bytes
        if limit is not None and pending.open_bytes() > limit:
            self._deliver(pending)  # the transactions before it come first
            self.settings.sink(CapturedWindow(0, 0, pending.events, more=True))
            self._parts_open = True
            self.stats.events += len(pending.events)
            pending.hand_over()

    def _deliver(self, pending: Pending) -> None:
        """Hand the committed windows read so far to the sink, in commit order."""
        if not pending.windows:
            return
        self._changes(pending, committed=True)
        stats, sink = self.stats, self.settings.sink
        windows = events_count = 0
        for end_lsn, ts_micros, events in pending.windows:
            if events or end_lsn in pending.parted:
                sink(CapturedWindow(end_lsn, ts_micros // 1000, events))
                self._parts_open = False
                self._delivered = end_lsn
                windows += 1
                events_count += len(events)
                stats.last_commit_ms = ts_micros // 1000
            stats.last_scn = end_lsn  # where a reconnect resumes: after what was delivered
        pending.windows = []
        pending.parted.clear()
        now_ms = int(time.time() * 1000)
        stats.windows += windows
        stats.events += events_count
        if windows:
            stats.last_receive_ms = now_ms
        stats.last_seen_ms = now_ms
        stats.source_end_scn = max(stats.source_end_scn, stats.last_scn)

    def _changes(self, pending: Pending, committed: bool = False) -> None:
        """The events of the pending run of one relation's change messages (``committed``:
        only its committed windows' part), into the windows they belong to."""
        run, parts = pending.take_run(committed)
        if not run:
            return
        self.stats.source_end_scn = max(self.stats.source_end_scn, run[-1].wal_end)
        table = self._relations.get(int.from_bytes(run[0].payload[1:5], "big"))
        if table is None or table.source in self.stats.stopped_sources:
            return
        out = bulk_events(table, run) if len(parts) > 1 else None
        if out is not None:  # one event per message
            if table.compiled_refused:  # the numpy run path took what the compiled one did not
                self._compiled_refused(table, len(run))
            lo = 0
            for hi, events in parts:
                events.extend(out[lo:hi])
                lo = hi
            return
        lo = 0  # window by window (a run the bulk path refused: only the window it was in)
        for hi, events in parts:
            if not self._transcode(table, run[lo:hi], events):
                return
            lo = hi

    def _transcode(self, table: PgTable, run: list[Any], events: list[bytes]) -> bool:
        """One window's part of a run into its events: at once when the run is long and the
        relation's columns allow it (``runs.py``), else row by row. False: the table's
        capture stopped (``on_decode_error``)."""
        out = bulk_events(table, run)
        if table.compiled_refused:  # (whichever Python path then takes it)
            self._compiled_refused(table, len(run))
        if out is not None:
            events.extend(out)
            return True
        for message in run:
            try:
                events.extend(table.row_events(message.payload))
            except DecodeError as exc:
                self._undecodable(exc, table, events, message.data_start)
                if table.source in self.stats.stopped_sources:
                    return False
        return True

    def _feedback(self, cur: Any, confirmed: int, idle: bool) -> int:
        """Confirm the slot up to what the relay persisted. Between transactions, ask the
        server where its decoding stands (a keepalive's position: every commit before it was
        sent): that is how far this source has been considered, and when every window
        delivered is persisted the slot may follow it, so an idle set of tables on a busy
        database does not keep WAL forever."""
        if idle and cur.wal_end:
            self.stats.last_scn = max(self.stats.last_scn, cur.wal_end)
        target = self._persisted
        if idle and self._persisted >= self._delivered:
            target = max(target, self.stats.last_scn)
        # Ask for a keepalive at most once a second (its answer wakes this loop again), and
        # confirm at most twice a second: each reply costs the server work.
        now = time.monotonic()
        ask = idle and now - self._asked_at >= 1.0
        if ask or (target > confirmed and now - self._fed_at >= 0.5):
            cur.send_feedback(flush_lsn=max(target, confirmed), reply=ask)
            self._fed_at = now
            if ask:
                self._asked_at = now
            return max(target, confirmed)
        return confirmed

    def _slot_details(self, confirmed: int) -> None:
        """The slot's positions for /stats, read at most every few seconds."""
        now = time.monotonic()
        if now - self._details_at < 5:
            return
        self._details_at = now
        with self._meta.cursor() as cur:
            cur.execute(
                "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn, "
                "confirmed_flush_lsn - '0/0'::pg_lsn, pg_current_wal_insert_lsn() - restart_lsn "
                "FROM pg_replication_slots WHERE slot_name = %s",
                (self.url.slot,),
            )
            row = cur.fetchone()
        if row is not None:
            server, slot_confirmed, retained = (int(v or 0) for v in row)
            self.stats.details.update(
                slot=self.url.slot,
                server_lsn=_lsn(server),
                confirmed_lsn=_lsn(slot_confirmed),
                sent_confirmed_lsn=_lsn(confirmed),
                retained_wal_bytes=retained,
                server_scn=server,  # the same positions as numbers, for /metrics
                confirmed_scn=slot_confirmed,
            )

    def _describe(self, relation: pgoutput.Relation) -> PgTable | None:
        source = source_name(relation.namespace, relation.name)
        if source not in self._tables:
            return None
        wanted = tuple((c.name, c.type_oid, c.typmod) for c in relation.columns)
        facts = self._catalog.pop(source, None)
        if facts is None or facts.columns != wanted:  # not read ahead, or the table changed
            facts = catalog_facts(self._meta, relation.namespace, relation.name, wanted)
        columns, converters = facts.described()
        kinds = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX", "f": "FULL"}
        identity = kinds.get(relation.replica_identity, relation.replica_identity)
        # kept, not replaced: the server sends a table's Relation again after any change of
        # its catalog entry (an ANALYZE, autovacuum), and its counts must survive that
        info = self.stats.tables.setdefault(source, {})
        if info.get("replica_identity") != identity:
            log.info(
                "%s has REPLICA IDENTITY %s%s",
                source,
                identity,
                "" if identity == "FULL" else ": before images hold the key only",
            )
        info["replica_identity"] = identity
        registry = self.settings.registry
        schema = registry.register(source, tuple(columns), facts.key)
        table = PgTable(source, registry.codec(source, schema.version), converters)
        report_transcoder(self.stats, self._said_python, table.source, table.python_why)
        return table

    def _prefetch(self) -> dict[str, CatalogFacts]:
        """The catalog facts of the captured tables, read while the server starts decoding
        (its first message comes several ms after the stream starts): a table's first
        Relation message with the columns the catalog has then needs no query."""
        if len(self._tables) > PREFETCH_TABLES:
            return {}
        return {s: catalog_facts(self._meta, *split_source(s)) for s in sorted(self._tables)}

    def _compiled_refused(self, table: PgTable, messages: int) -> None:
        """A run the compiled transcoder handed back went through the Python paths
        (same events, slower): counted per table and in ``/metrics``, said once per table."""
        info = self.stats.tables.setdefault(table.source, {})
        info["compiled_refused_messages"] = info.get("compiled_refused_messages", 0) + messages
        details = self.stats.details
        details["compiled_refused_messages"] = (
            details.get("compiled_refused_messages", 0) + messages
        )
        if table.source not in self._said_refused:
            self._said_refused.add(table.source)
            log.warning(
                "%s: a run of %d change messages took the Python paths (same events, slower): "
                "a value the compiled transcoder does not read exactly (an unchanged TOASTed "
                "value, infinity, a BC date, another time zone, a key change)",
                table.source,
                messages,
            )

    def _undecodable(self, exc: DecodeError, table: PgTable, events: list[bytes], at: int) -> None:
        message = f"{exc} (WAL position {_lsn(at)})"
        undecodable(self.stats, self.settings.on_decode_error, table.source, message, events)
        if self._parts_open and table.source in self.stats.stopped_sources:
            # Parts handed over already hold that table's earlier rows of this transaction:
            # read it again from its start (the relay drops the parts), now without them.
            raise SourceConnectionError(
                f"reading the transaction at {_lsn(at)} again without {table.source}, whose "
                "capture stopped inside it"
            )


def _lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
