"""MySQL/MariaDB capture: a thread reads the binlog and hands whole windows to a sink."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql

from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.binlog.events import (
    SKIP_BETWEEN,
    SKIP_INSIDE,
    statement_change,
    unreadable,
)
from sluice.capture.mysql.binlog.protocol import BinlogStream, ConnectParams, LogPositionError
from sluice.capture.mysql.binlog.tablemap import parse_table_map
from sluice.capture.mysql.describe import describe_table
from sluice.capture.mysql.metadata import (
    ServerInfo,
    binlog_status,
    check_server,
    column_info,
    end_scn,
)
from sluice.capture.mysql.scn import (
    debezium_position,
    log_name,
    make_scn,
    scn_file_no,
    scn_position,
    split_log_name,
)
from sluice.capture.mysql.tables import TableDecoder
from sluice.capture.mysql.url import parse_source_url
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
from sluice.core import wire
from sluice.core.names import source_name, truncated_table
from sluice.errors import (
    DecodeError,
    SluiceError,
    SourceConnectionError,
    SourceError,
)
from sluice.schemas import SchemaRegistry, TableSchema

log = logging.getLogger(__name__)
TAKES_TABLE_OPTIONS = False  # no [tables."..."] settings (a ``SourceKind``)

_FL_STANDALONE = 1


@dataclass(slots=True)
class _Transaction:
    events: list[bytes] = field(default_factory=list)
    open: bool = False
    size: int = 0  # bytes of ``events``
    handed: int = 0  # events already handed over in parts (a big transaction)


def describe(url: str, source: str) -> TableSchema:
    conn = parse_source_url(url).params().connect()
    try:
        return describe_table(conn, source)
    finally:
        conn.close()


parse_url = parse_source_url


def open_seeder(url: str) -> Seeder:
    """The ``Seeder`` of a MariaDB server (chunks in ``START TRANSACTION WITH CONSISTENT
    SNAPSHOT``, stamped with ``binlog_snapshot_*``)."""
    from sluice.capture.mysql.seed import MySQLSeeder  # noqa: PLC0415 - only seeding needs it

    return MySQLSeeder(parse_source_url(url).params())


def seed_jars() -> tuple[str, ...]:
    """The JDBC driver Spark's own JDBC source reads seed chunks with, where installed."""
    from sluice.capture.mysql.bulk import jdbc_jars  # noqa: PLC0415 - only seeding needs it

    return jdbc_jars()


def source_info(url: str) -> dict[str, Any]:
    """What event formats name the source by (Debezium's ``source`` block): its server id and
    binlog base name, asked once (without them the block says 0 and ``binlog``)."""
    server_id: int | None = None
    log_base: str | None = None
    try:
        conn = parse_source_url(url).params().connect()
    except (pymysql.err.MySQLError, SluiceError, OSError):
        return described_source(server_id, log_base)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id")
            server_id = int(cur.fetchone()[0])
        row = binlog_status(conn)  # SHOW BINARY LOG STATUS where MySQL 8.4 dropped MASTER
        if row:
            log_base = split_log_name(str(row[0]))[0]
    except (pymysql.err.MySQLError, SluiceError):
        pass
    finally:
        conn.close()
    return described_source(server_id, log_base)


def described_source(server_id: int | None, log_base: str | None) -> dict[str, Any]:
    """``source_info`` of a server with this id and binlog base name (None: unknown): events
    take Debezium's MySQL connector's form, the block's ``server_id`` and binlog position
    declared under ``debezium`` (``schemas/debezium.py`` follows it)."""
    info: dict[str, Any] = {"connector": "mysql"}
    if server_id is not None:
        info["server_id"] = server_id
    if log_base is not None:
        info["log_base"] = log_base
    info["debezium"] = {
        "fields": {"server_id": server_id or 0, "row": 0},
        "position": debezium_position(log_base or "binlog"),
    }
    return info


def open_capture(url: str, settings: CaptureSettings) -> CaptureSource:
    """The ``CaptureSource`` of a ``mysql://`` or ``mariadb://`` URL; a cold read's binlog
    dump takes a random server id (the relay's own, the URL's ``server_id``, keeps running)."""
    parsed = parse_source_url(url)
    return MySQLCapture(
        parsed.params(),
        settings.tables,
        settings.registry,
        settings.sink,
        server_id=None if settings.cold else parsed.server_id,
        on_fatal=settings.on_fatal,
        part_bytes=settings.part_bytes,
        on_decode_error=settings.on_decode_error,
    )


class MySQLCapture:
    """One capture thread per physical source (a ``CaptureSource``): the binlog, read from
    any held position (``rereadable``). ``sink`` may block: that is backpressure."""

    rereadable = True

    def __init__(
        self,
        params: ConnectParams,
        tables: tuple[str, ...],
        registry: SchemaRegistry,
        sink: Callable[[CapturedWindow], None],
        *,
        server_id: int | None = None,
        on_fatal: Callable[[SluiceError], None] | None = None,
        part_bytes: int | None = None,
        on_decode_error: str = "stop_source",
    ) -> None:
        self._params = params
        self._on_decode_error = on_decode_error
        self._tables = frozenset(tables)
        self._registry = registry
        self._sink = sink
        self._server_id = server_id or random.randint(10_000, 2**31 - 1)
        self._on_fatal = on_fatal
        # Memory stays bounded: a big transaction is handed over in parts as it grows
        # (``CapturedWindow.more``), never held whole.
        self._part_bytes = part_bytes
        self._parts_open = False  # parts of an unfinished transaction were handed over
        self.stats = CaptureStats()
        self._stop = threading.Event()
        self._stopping = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stream: BinlogStream | None = None
        self._info: ServerInfo | None = None
        self._meta: pymysql.Connection[Any] | None = None
        self._decoders: dict[int, TableDecoder | None] = {}
        self._by_signature: dict[tuple[str, bytes], TableDecoder] = {}
        self._said_python: set[str] = set()

    # -- lifecycle ---------------------------------------------------------------------------
    def check(self) -> ServerInfo:
        """Connect and check the server; raises ``SourceSetupError`` with the fix."""
        conn = self._params.connect()
        try:
            self._info = check_server(conn, tuple(sorted(self._tables)))
        finally:
            conn.close()
        return self._info

    def start(self, since_scn: int | None) -> int:
        """Start capturing after ``since_scn`` (None: the binlog's end); returns that SCN."""
        if self._thread is not None:
            raise SluiceError("capture already started")
        info = self._info or self.check()
        start = info.end_scn if since_scn is None else since_scn
        wanted = log_name(info.log_base, scn_file_no(start))
        if start and wanted not in info.logs:
            raise SourceError(
                f"cannot capture after SCN {start}: binlog file {wanted} is not on the server "
                f"(it holds {info.logs[0]} .. {info.logs[-1]}); it was purged, or the SCN is "
                "from another server. Give --since-scn 0 (oldest held) or leave it out (the end)",
                scn=start,
            )
        self.stats.last_scn = start
        self.stats.source_end_scn = info.end_scn
        self._thread = threading.Thread(target=self._run, name="sluice-capture", daemon=True)
        self._thread.start()
        return start

    def on_persisted(self, scn: int) -> None:
        """The binlog is the server's to keep or purge: nothing to confirm."""

    def stop(self) -> None:
        """Safe to call twice, and from two threads at once (the relay stops capture when a
        window is refused while it is itself stopping)."""
        self._stop.set()
        with self._stopping:
            stream = self._stream
            if stream is not None:
                stream.close()
            thread, self._thread = self._thread, None
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=10)
            meta, self._meta = self._meta, None
            if meta is not None:
                with contextlib.suppress(pymysql.err.Error):
                    meta.close()

    # -- the thread --------------------------------------------------------------------------
    def _run(self) -> None:
        run_supervised(
            self._stream_once,
            self._stop,
            self.stats,
            (SourceConnectionError, pymysql.err.OperationalError, pymysql.err.InterfaceError),
            self._on_fatal,
            "binlog connection",
        )

    def _start_position(self) -> tuple[str, int]:
        assert self._info is not None
        scn = self.stats.last_scn
        if scn == 0:
            return self._info.logs[0], 4
        return log_name(self._info.log_base, scn_file_no(scn)), max(scn_position(scn), 4)

    def _stream_once(self) -> None:
        if self._parts_open:  # read again from the last commit: its parts come again
            self._sink(ABORTED)
            self._parts_open = False
        file_name, position = self._start_position()
        stream = BinlogStream(self._params, self._server_id)
        self._stream = stream
        try:
            stream.open(file_name, position)
            self._refresh_end()
            log.info("streaming the binlog from %s:%d", file_name, position)
            self.stats.connected = True
            self.stats.last_seen_ms = int(time.time() * 1000)
            self._pump(stream, split_log_name(file_name)[1])
        except LogPositionError as exc:
            raise SourceError(
                f"cannot resume capture at {file_name}:{position}: {exc}. The binlog was purged "
                "or the SCN is not a transaction boundary; restart the relay with --since-scn "
                "at a held position (clients behind it will need a bootstrap)",
                scn=self.stats.last_scn,
            ) from None
        finally:
            self._stream = None
            stream.close()

    def _pump(self, stream: BinlogStream, file_no: int) -> None:
        txn = _Transaction()
        while not self._stop.is_set():
            ev = stream.read()
            kind = ev.type
            if kind in t.ROWS:
                try:
                    self._rows(txn, kind, ev.body)
                except DecodeError as exc:
                    self._undecodable(txn, exc, f"{self._log_name(file_no)}:{ev.log_pos}")
            elif kind == t.TABLE_MAP:  # once per statement: the source is talking
                self.stats.last_seen_ms = int(time.time() * 1000)
                self._table_map(ev.body)
            elif kind == t.XID:
                self._commit(txn, make_scn(file_no, ev.log_pos), ev.timestamp)
            elif kind == t.MARIADB_GTID:
                txn = _Transaction(open=not ev.body[12] & _FL_STANDALONE)
            elif kind == t.QUERY:
                txn = self._query(txn, make_scn(file_no, ev.log_pos), ev.timestamp, ev.body)
            elif kind == t.ROTATE:
                file_no = split_log_name(ev.body[8:].decode())[1]
            elif kind == t.HEARTBEAT:  # every second while the binlog is idle
                self.stats.last_seen_ms = int(time.time() * 1000)
                self.stats.source_end_scn = max(
                    self.stats.source_end_scn, make_scn(file_no, ev.log_pos)
                )
            elif kind not in (SKIP_INSIDE if txn.open else SKIP_BETWEEN):
                error = unreadable(  # never skip what might hold rows (``binlog.events``)
                    kind,
                    ev.flags,
                    where=f"{self._log_name(file_no)}:{ev.log_pos}",
                    end_scn=make_scn(file_no, ev.log_pos),
                    in_transaction=txn.open,
                    last_scn=self.stats.last_scn,
                )
                if error is not None:  # None: the server flagged it ignorable
                    raise error

    def _query(self, txn: _Transaction, scn: int, timestamp: int, body: bytes) -> _Transaction:
        status_len = int.from_bytes(body[11:13], "little")
        db_len = body[8]
        text = body[13 + status_len + db_len + 1 :].strip()
        query = text.upper()
        where = f"{self._log_name(scn_file_no(scn))}:{scn_position(scn)}"
        error = statement_change(text, where=where, last_scn=self.stats.last_scn)
        if error is not None:  # never skip rows changed by a statement-format event
            raise error
        if query == b"BEGIN":
            return _Transaction(open=True)
        if query == b"COMMIT":
            self._commit(txn, scn, timestamp)
            return _Transaction()
        if query == b"ROLLBACK":
            if txn.handed:
                self._sink(ABORTED)
                self._parts_open = False
            return _Transaction()
        if not txn.open:  # a standalone statement (DDL): a transaction boundary without rows
            truncated = truncated_table(text, body[13 + status_len : 13 + status_len + db_len])
            if truncated is not None and truncated in self._tables:
                self._truncate(truncated, scn, timestamp)
            self._advance(scn)
        return txn

    def _truncate(self, source: str, scn: int, timestamp: int) -> None:
        """``TRUNCATE TABLE``: one ``t`` event (no key, no images) in a window of its own."""
        versions = self._registry.versions(source) if source in self._registry.sources() else []
        version = versions[-1].version if versions else 0
        event = wire.encode_event(wire.RawEvent(source, "t", version, 0, b""))
        self._sink(CapturedWindow(scn, timestamp * 1000, [event]))
        self.stats.windows += 1
        self.stats.events += 1

    def _table_map(self, body: bytes) -> None:
        table_id = int.from_bytes(body[:6], "little")
        schema_len = body[8]
        schema = body[9 : 9 + schema_len].decode()
        table_len = body[10 + schema_len]
        table = body[11 + schema_len : 11 + schema_len + table_len].decode()
        source = source_name(schema, table)
        if source not in self._tables or source in self.stats.stopped_sources:
            self._decoders[table_id] = None
            return
        key = (source, body[6:])
        decoder = self._by_signature.get(key)
        if decoder is None:
            table_map = parse_table_map(body)
            decoder = TableDecoder(
                table_map, self._registry, self._collations(), column_info(self._metadata(), source)
            )
            self._by_signature[key] = decoder
            report_transcoder(self.stats, self._said_python, source, decoder.python_why)
        self._decoders[table_id] = decoder

    def _log_name(self, file_no: int) -> str:
        assert self._info is not None
        return log_name(self._info.log_base, file_no)

    def _undecodable(self, txn: _Transaction, exc: DecodeError, where: str) -> None:
        """A row capture cannot decode never stops the other tables (``undecodable``)."""
        if exc.source is None:
            raise exc
        message = f"{exc} (the rows event ending at binlog {where})"
        undecodable(self.stats, self._on_decode_error, exc.source, message, txn.events)
        if txn.handed and exc.source in self.stats.stopped_sources:
            # Parts handed over already hold that table's earlier rows of this transaction:
            # read it again from its start (the relay drops the parts), now without them.
            raise SourceConnectionError(
                f"reading the transaction at {where} again without {exc.source}, whose capture "
                "stopped inside it"
            )

    def _rows(self, txn: _Transaction, kind: int, body: bytes) -> None:
        decoder = self._decoders.get(int.from_bytes(body[:6], "little"))
        if decoder is None:
            return
        before = len(txn.events)
        txn.events.extend(decoder.events(kind, body))
        if self._part_bytes is not None:
            txn.size += sum(map(len, txn.events[before:]))
            if txn.size > self._part_bytes:
                self._hand_part(txn)

    def _hand_part(self, txn: _Transaction) -> None:
        """A part of a big transaction to the sink (its SCN comes with the last part)."""
        self._sink(CapturedWindow(0, 0, txn.events, more=True))
        self._parts_open = True
        txn.handed += len(txn.events)
        txn.events = []
        txn.size = 0

    def _commit(self, txn: _Transaction, scn: int, timestamp: int) -> None:
        if txn.events or txn.handed:
            now_ms = int(time.time() * 1000)
            self._sink(CapturedWindow(scn, timestamp * 1000, txn.events))
            self._parts_open = False
            self.stats.windows += 1
            self.stats.events += len(txn.events) + txn.handed
            self.stats.last_commit_ms = timestamp * 1000
            self.stats.last_receive_ms = now_ms
            self.stats.last_seen_ms = now_ms
        self._advance(scn)
        txn.events = []
        txn.handed = txn.size = 0
        txn.open = False

    def _advance(self, scn: int) -> None:
        self.stats.last_scn = scn
        self.stats.source_end_scn = max(self.stats.source_end_scn, scn)

    # -- metadata connection ----------------------------------------------------------------
    def _metadata(self) -> pymysql.Connection[Any]:
        if self._meta is None or not self._meta.open:
            self._meta = self._params.connect()
        return self._meta

    def _collations(self) -> dict[int, str | None]:
        assert self._info is not None
        return self._info.collations

    def _refresh_end(self) -> None:
        try:
            self.stats.source_end_scn = max(self.stats.source_end_scn, end_scn(self._metadata()))
        except pymysql.err.MySQLError:
            self._meta = None
