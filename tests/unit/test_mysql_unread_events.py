"""MySQL honestly, in the stream: a binlog event capture does not read stops it with an error
naming the type, where it ends and the fix, never in silence; harmless ones are passed over.
Constructed events through ``MySQLCapture._pump``."""

from __future__ import annotations

import pytest

from sluice.capture.mysql.binlog import constants as t
from sluice.capture.mysql.binlog.events import SKIP_BETWEEN, SKIP_INSIDE, event_name, unreadable
from sluice.capture.mysql.binlog.protocol import ConnectParams, RawLogEvent
from sluice.capture.mysql.capture import MySQLCapture
from sluice.capture.mysql.metadata import ServerInfo
from sluice.capture.mysql.scn import make_scn
from sluice.capture.source import CapturedWindow
from sluice.errors import SourceConnectionError, UnreadableEvent
from sluice.schemas import SchemaRegistry

FILE_NO = 3
LOG = "binlog.000003"


def _ev(kind: int, log_pos: int, body: bytes = b"", flags: int = 0) -> RawLogEvent:
    return RawLogEvent(1_700_000_000, kind, log_pos, flags, body)


def _query(text: bytes) -> bytes:
    """A QUERY event body: thread id, time, db length 0, error code, no status vars, db."""
    return b"\x00" * 8 + b"\x00" + b"\x00\x00" + b"\x00\x00" + b"\x00" + text


def _mariadb_gtid(standalone: bool = False) -> bytes:
    return (7).to_bytes(8, "little") + (0).to_bytes(4, "little") + bytes([int(standalone)])


class _Stream:
    """Hands out the events, then ends like a dropped connection."""

    def __init__(self, events: list[RawLogEvent]) -> None:
        self._events = iter(events)

    def read(self) -> RawLogEvent:
        for ev in self._events:
            return ev
        raise SourceConnectionError("end of the constructed stream")


def _pump(events: list[RawLogEvent]) -> tuple[MySQLCapture, list[CapturedWindow]]:
    """Run ``_pump`` over ``events``; returns when the stream ends (raises what it raises)."""
    windows: list[CapturedWindow] = []
    capture = MySQLCapture(
        ConnectParams("127.0.0.1", 1, "u", "p"), ("shop.t",), SchemaRegistry(), windows.append
    )
    capture._info = ServerInfo("binlog", 0, (LOG,), {})
    capture.stats.last_scn = make_scn(FILE_NO, 100)
    with pytest.raises(SourceConnectionError, match="end of the constructed stream"):
        capture._pump(_Stream(events), FILE_NO)  # type: ignore[arg-type]
    return capture, windows


def _pump_fails(events: list[RawLogEvent]) -> UnreadableEvent:
    capture = MySQLCapture(
        ConnectParams("127.0.0.1", 1, "u", "p"), ("shop.t",), SchemaRegistry(), lambda w: None
    )
    capture._info = ServerInfo("binlog", 0, (LOG,), {})
    capture.stats.last_scn = make_scn(FILE_NO, 100)
    with pytest.raises(UnreadableEvent) as err:
        capture._pump(_Stream(events), FILE_NO)  # type: ignore[arg-type]
    return err.value


MARIADB_FILE_START = [
    _ev(t.FORMAT_DESCRIPTION, 256),
    _ev(t.MARIADB_GTID_LIST, 285),
    _ev(t.MARIADB_BINLOG_CHECKPOINT, 328),
]
MYSQL_FILE_START = [_ev(t.FORMAT_DESCRIPTION, 126), _ev(t.PREVIOUS_GTIDS, 157)]


def test_harmless_events_between_and_inside_transactions_are_passed_over() -> None:
    mariadb = [
        *MARIADB_FILE_START,
        _ev(t.MARIADB_GTID, 370, _mariadb_gtid()),
        _ev(t.MARIADB_ANNOTATE_ROWS, 420, b"insert into t values (1)"),
        _ev(t.XID, 451, (9).to_bytes(8, "little")),
        _ev(t.MARIADB_START_ENCRYPTION, 480, flags=t.LOG_EVENT_IGNORABLE_F),
        _ev(t.STOP, 500),
    ]
    mysql = [
        *MYSQL_FILE_START,
        _ev(t.ANONYMOUS_GTID, 236),
        _ev(t.QUERY, 311, _query(b"BEGIN")),
        _ev(t.ROWS_QUERY, 360, b"\x18insert into t values (1)", flags=t.LOG_EVENT_IGNORABLE_F),
        _ev(t.XID, 391, (9).to_bytes(8, "little")),
        _ev(t.GTID, 470),
        _ev(t.GTID_TAGGED, 560),
        _ev(t.QUERY, 640, _query(b"BEGIN")),
        _ev(t.VIEW_CHANGE, 700),
        _ev(t.QUERY, 760, _query(b"COMMIT")),
    ]
    for events in (mariadb, mysql):
        capture, windows = _pump(events)
        assert windows == []  # no rows of shop.t: the commits only move the position
        commit = next(ev for ev in reversed(events) if ev.type in (t.XID, t.QUERY))
        assert capture.stats.last_scn == make_scn(FILE_NO, commit.log_pos)


def test_an_unknown_type_inside_a_transaction_stops_capture_naming_type_and_position() -> None:
    err = _pump_fails(
        [
            *MARIADB_FILE_START,
            _ev(t.MARIADB_GTID, 370, _mariadb_gtid()),
            _ev(t.MARIADB_ANNOTATE_ROWS, 420, b"insert into t values (1)"),
            _ev(99, 480),
        ]
    )
    assert err.event_type == 99
    assert err.position == f"{LOG}:480"
    assert err.scn == make_scn(FILE_NO, 100)
    text = str(err)
    assert f"type 99 ending at {LOG}:480, inside a transaction, stops capture" in text
    assert "skipping it could lose row changes" in text
    assert f"resumes after SCN {make_scn(FILE_NO, 100)}" in text
    assert "--since-scn at a later commit" in text and "re-seed" in text


def test_a_type_harmless_only_between_transactions_stops_capture_inside_one() -> None:
    # a MySQL GTID event is fine between transactions, never inside one
    err = _pump_fails([_ev(t.QUERY, 311, _query(b"BEGIN")), _ev(t.GTID, 380)])
    assert "type 33 (GTID) ending at binlog.000003:380, inside a transaction" in str(err)
    # a statement logged in STATEMENT format by a session: named, with the fix
    err = _pump_fails([_ev(t.MARIADB_GTID, 370, _mariadb_gtid()), _ev(t.INTVAR, 402)])
    assert "5 (INTVAR)" in str(err) and "binlog_format=ROW for every session" in str(err)


def test_an_unknown_type_between_transactions_stops_capture_unless_flagged_ignorable() -> None:
    err = _pump_fails([*MYSQL_FILE_START, _ev(77, 200)])
    assert f"type 77 ending at {LOG}:200, between transactions" in str(err)
    capture, _ = _pump([*MYSQL_FILE_START, _ev(77, 200, flags=t.LOG_EVENT_IGNORABLE_F)])
    assert capture.stats.last_scn == make_scn(FILE_NO, 100)
    # the flag counts inside a transaction too: the server promises it holds no change
    _pump([_ev(t.QUERY, 311, _query(b"BEGIN")), _ev(77, 380, flags=t.LOG_EVENT_IGNORABLE_F)])


def test_a_transaction_payload_stops_capture_with_the_compression_fix() -> None:
    # MySQL 8.0.20+ with binlog_transaction_compression=ON: GTID, then one payload event
    # holding BEGIN .. XID compressed; it is not decoded
    err = _pump_fails([*MYSQL_FILE_START, _ev(t.GTID, 236), _ev(t.TRANSACTION_PAYLOAD, 612)])
    text = str(err)
    assert err.event_type == 40 and err.position == f"{LOG}:612"
    assert "40 (TRANSACTION_PAYLOAD)" in text and "between transactions" in text
    assert "SET GLOBAL binlog_transaction_compression=OFF" in text
    assert "binlog_transaction_compression=OFF in my.cnf" in text
    assert f"--since-scn {make_scn(FILE_NO, 612)} skips just this transaction" in text


def test_a_payload_flagged_ignorable_still_stops_capture() -> None:
    err = _pump_fails([_ev(t.TRANSACTION_PAYLOAD, 612, flags=t.LOG_EVENT_IGNORABLE_F)])
    assert err.event_type == t.TRANSACTION_PAYLOAD


def test_a_partial_update_rows_event_stops_capture_with_the_partial_json_fix() -> None:
    err = _pump_fails(
        [
            _ev(t.GTID, 236),
            _ev(t.QUERY, 311, _query(b"BEGIN")),
            _ev(t.TABLE_MAP, 370, _table_map("other", "t")),
            _ev(t.PARTIAL_UPDATE_ROWS, 455),
        ]
    )
    text = str(err)
    assert err.event_type == 39
    assert f"39 (PARTIAL_UPDATE_ROWS) ending at {LOG}:455, inside a transaction" in text
    assert "SET GLOBAL binlog_row_value_options=''" in text
    assert "--since-scn at a later commit" in text


@pytest.mark.parametrize("kind", sorted(t.COMPRESSED))
def test_mariadb_compressed_events_stop_capture_with_the_log_bin_compress_fix(kind: int) -> None:
    err = _pump_fails([_ev(t.MARIADB_GTID, 370, _mariadb_gtid()), _ev(kind, 420)])
    assert "COMPRESSED" in str(err) and "SET GLOBAL log_bin_compress=OFF" in str(err)


def test_xa_prepare_and_incidents_stop_capture_with_their_reason() -> None:
    err = _pump_fails([_ev(t.MARIADB_GTID, 370, _mariadb_gtid()), _ev(t.XA_PREPARE, 520)])
    assert "38 (XA_PREPARE)" in str(err) and "XA transaction" in str(err)
    err = _pump_fails([_ev(t.INCIDENT, 300)])
    assert "26 (INCIDENT)" in str(err) and "may lack changes" in str(err)


def _table_map(schema: str, table: str) -> bytes:
    return (
        (5).to_bytes(6, "little")
        + b"\x00\x00"
        + bytes([len(schema)])
        + schema.encode()
        + b"\x00"
        + bytes([len(table)])
        + table.encode()
        + b"\x00"
    )


def test_the_skip_sets() -> None:
    read_by_pump = {
        *t.ROWS,
        t.TABLE_MAP,
        t.XID,
        t.MARIADB_GTID,
        t.QUERY,
        t.ROTATE,
        t.HEARTBEAT,
    }
    assert SKIP_INSIDE <= SKIP_BETWEEN
    assert not SKIP_BETWEEN & read_by_pump
    never_skipped = {
        t.TRANSACTION_PAYLOAD,
        t.PARTIAL_UPDATE_ROWS,
        t.XA_PREPARE,
        t.INCIDENT,
        t.INTVAR,
        t.RAND,
        t.USER_VAR,
        t.MARIADB_PARTIAL_ROW_DATA,
        *t.COMPRESSED,
    }
    assert not SKIP_BETWEEN & never_skipped
    # only annotations inside a transaction, never a GTID or file bookkeeping
    assert {t.MARIADB_ANNOTATE_ROWS, t.ROWS_QUERY} <= SKIP_INSIDE
    assert not {t.GTID, t.ANONYMOUS_GTID, t.FORMAT_DESCRIPTION, t.STOP} & SKIP_INSIDE
    assert event_name(40) == "40 (TRANSACTION_PAYLOAD)" and event_name(250) == "250"


def test_unreadable_returns_none_only_for_an_unknown_ignorable_event() -> None:
    def check(kind: int, flags: int) -> UnreadableEvent | None:
        return unreadable(
            kind, flags, where=f"{LOG}:9", end_scn=9, in_transaction=False, last_scn=1
        )

    assert check(200, t.LOG_EVENT_IGNORABLE_F) is None
    assert isinstance(check(200, 0), UnreadableEvent)
    for kind in (t.TRANSACTION_PAYLOAD, t.PARTIAL_UPDATE_ROWS, t.XA_PREPARE, 169):
        assert isinstance(check(kind, t.LOG_EVENT_IGNORABLE_F), UnreadableEvent)


@pytest.mark.parametrize(
    "text",
    [b"INSERT INTO t VALUES (1)", b"/* app */ update t set v = 2", b"  DELETE FROM t"],
)
def test_a_row_change_logged_as_a_statement_stops_capture(text: bytes) -> None:
    error = _pump_fails([_ev(t.QUERY, 400, _query(b"BEGIN")), _ev(t.QUERY, 500, _query(text))])
    assert error.event_type == t.QUERY and error.position == f"{LOG}:500"
    assert "binlog_format=ROW" in str(error) and "STATEMENT" in str(error)


def test_other_statements_in_a_transaction_are_not_changes() -> None:
    capture, windows = _pump(
        [
            _ev(t.QUERY, 400, _query(b"BEGIN")),
            _ev(t.QUERY, 450, _query(b"SAVEPOINT s1")),
            _ev(t.QUERY, 500, _query(b"COMMIT")),
        ]
    )
    assert windows == [] and capture.stats.last_scn == make_scn(FILE_NO, 500)
