"""Binlog events capture does not read: which it passes over, and the error for the rest.

``MySQLCapture._pump`` reads rows events, table maps, commits (Xid, ``COMMIT``), MariaDB
GTIDs, queries, rotations and heartbeats. Every other type falls through to one frozenset
lookup here, so the rows path pays nothing. Capture never skips what could carry a row change:

- **between transactions** it passes over ``SKIP_BETWEEN``: file bookkeeping (format
  description, stop, MariaDB binlog checkpoints and GTID lists, encryption start: the server
  decrypts before sending), MySQL's GTID events (its transactions open with a ``BEGIN``
  query, which capture reads) and the statement annotations below;
- **inside a transaction** it passes over only ``SKIP_INSIDE``: the statement's text (MariaDB
  ``ANNOTATE_ROWS``, MySQL ``ROWS_QUERY``), MySQL's generic ignorable event and Group
  Replication's view change, none of which holds a row;
- anything else stops capture with ``UnreadableEvent`` naming the type, where it ends and the
  fix, unless the server flagged the event ``LOG_EVENT_IGNORABLE_F`` (the protocol's promise
  that a replica which does not know the type may skip it). Types known to hold changes
  Sluice cannot read (``_WHY``: compressed, partial, XA, statement-format) stop capture
  wherever they appear: MySQL's ``TRANSACTION_PAYLOAD`` wraps a whole transaction and so
  arrives between transactions as far as capture can tell.
"""

from __future__ import annotations

import re

from sluice.capture.mysql.binlog import constants as t
from sluice.errors import UnreadableEvent

NAMES: dict[int, str] = {
    0: "UNKNOWN",
    1: "START_V3",
    2: "QUERY",
    3: "STOP",
    4: "ROTATE",
    5: "INTVAR",
    6: "LOAD",
    7: "SLAVE",
    8: "CREATE_FILE",
    9: "APPEND_BLOCK",
    10: "EXEC_LOAD",
    11: "DELETE_FILE",
    12: "NEW_LOAD",
    13: "RAND",
    14: "USER_VAR",
    15: "FORMAT_DESCRIPTION",
    16: "XID",
    17: "BEGIN_LOAD_QUERY",
    18: "EXECUTE_LOAD_QUERY",
    19: "TABLE_MAP",
    20: "PRE_GA_WRITE_ROWS",
    21: "PRE_GA_UPDATE_ROWS",
    22: "PRE_GA_DELETE_ROWS",
    23: "WRITE_ROWS_V1",
    24: "UPDATE_ROWS_V1",
    25: "DELETE_ROWS_V1",
    26: "INCIDENT",
    27: "HEARTBEAT",
    28: "IGNORABLE",
    29: "ROWS_QUERY",
    30: "WRITE_ROWS",
    31: "UPDATE_ROWS",
    32: "DELETE_ROWS",
    33: "GTID",
    34: "ANONYMOUS_GTID",
    35: "PREVIOUS_GTIDS",
    36: "TRANSACTION_CONTEXT",
    37: "VIEW_CHANGE",
    38: "XA_PREPARE",
    39: "PARTIAL_UPDATE_ROWS",
    40: "TRANSACTION_PAYLOAD",
    41: "HEARTBEAT_V2",
    42: "GTID_TAGGED",
    160: "ANNOTATE_ROWS",
    161: "BINLOG_CHECKPOINT",
    162: "GTID",
    163: "GTID_LIST",
    164: "START_ENCRYPTION",
    165: "QUERY_COMPRESSED",
    166: "WRITE_ROWS_COMPRESSED_V1",
    167: "UPDATE_ROWS_COMPRESSED_V1",
    168: "DELETE_ROWS_COMPRESSED_V1",
    169: "WRITE_ROWS_COMPRESSED",
    170: "UPDATE_ROWS_COMPRESSED",
    171: "DELETE_ROWS_COMPRESSED",
    172: "PARTIAL_ROW_DATA",
}

SKIP_INSIDE = frozenset(
    {t.IGNORABLE, t.ROWS_QUERY, t.VIEW_CHANGE, t.HEARTBEAT_V2, t.MARIADB_ANNOTATE_ROWS}
)
SKIP_BETWEEN = SKIP_INSIDE | {
    t.STOP,
    t.FORMAT_DESCRIPTION,
    t.GTID,
    t.ANONYMOUS_GTID,
    t.PREVIOUS_GTIDS,
    t.GTID_TAGGED,
    t.MARIADB_BINLOG_CHECKPOINT,
    t.MARIADB_GTID_LIST,
    t.MARIADB_START_ENCRYPTION,
}

_COMPRESSION = (
    "the server compressed this transaction (binlog_transaction_compression=ON, globally or in "
    "the session that wrote it) and Sluice does not decode compressed payloads. Fix: SET GLOBAL "
    "binlog_transaction_compression=OFF, binlog_transaction_compression=OFF in my.cnf, and no "
    "session setting it ON"
)
_PARTIAL_JSON = (
    "the server logged a partial JSON update (binlog_row_value_options=PARTIAL_JSON, globally "
    "or in the session that wrote it), which lacks the full after image. Fix: SET GLOBAL "
    "binlog_row_value_options='', binlog_row_value_options='' in my.cnf, and no session "
    "setting PARTIAL_JSON"
)
_LOG_BIN_COMPRESS = (
    "MariaDB compressed this event (log_bin_compress=ON) and Sluice does not decode compressed "
    "events. Fix: SET GLOBAL log_bin_compress=OFF (and log_bin_compress=OFF in my.cnf)"
)
_STATEMENT = (
    "a statement was logged in STATEMENT format (a session set binlog_format=STATEMENT or "
    "MIXED), and Sluice reads row images only. Fix: binlog_format=ROW for every session (it "
    "is the global default; no client may SET SESSION binlog_format)"
)
_WHY: dict[int, str] = {
    t.TRANSACTION_PAYLOAD: _COMPRESSION,
    t.PARTIAL_UPDATE_ROWS: _PARTIAL_JSON,
    **dict.fromkeys(t.COMPRESSED, _LOG_BIN_COMPRESS),
    **dict.fromkeys((t.INTVAR, t.RAND, t.USER_VAR), _STATEMENT),
    t.XA_PREPARE: (
        "an XA transaction was prepared: its rows are logged at XA PREPARE and its outcome "
        "only later, which Sluice does not follow. Avoid XA transactions on captured servers"
    ),
    t.INCIDENT: (
        "the server logged an incident: its binlog may lack changes here (replicas stop here "
        "too). Check the server's error log"
    ),
    t.MARIADB_PARTIAL_ROW_DATA: (
        "MariaDB 12.3+ cut a large rows event into fragments (binlog_row_event_fragment_"
        "threshold), which Sluice does not reassemble"
    ),
}
_UNKNOWN = (
    "Sluice does not read this event type, and skipping it could lose row changes. Check "
    "that the server and its settings are ones Sluice supports (README: The source server)"
)


def event_name(kind: int) -> str:
    """``40 (TRANSACTION_PAYLOAD)``; an unknown type is its number alone."""
    name = NAMES.get(kind)
    return f"{kind} ({name})" if name else str(kind)


def unreadable(
    kind: int,
    flags: int,
    *,
    where: str,
    end_scn: int,
    in_transaction: bool,
    last_scn: int,
) -> UnreadableEvent | None:
    """The error that stops capture at an event of a type it does not read (not in
    ``SKIP_INSIDE``/``SKIP_BETWEEN``), or None when the server flagged the event ignorable.
    ``where`` is ``file:pos`` of its end, ``end_scn`` the same as an SCN, ``last_scn`` the
    last commit captured."""
    why = _WHY.get(kind)
    if why is None:
        if flags & t.LOG_EVENT_IGNORABLE_F:
            return None
        why = _UNKNOWN
    state = "inside a transaction" if in_transaction else "between transactions"
    if kind == t.TRANSACTION_PAYLOAD:  # it holds a whole transaction: its end is a commit
        past = f"--since-scn {end_scn} skips just this transaction"
    else:
        past = (
            "to go past it, restart with --since-scn at a later commit, e.g. the binlog's end "
            "((file number << 32) | position, from SHOW MASTER STATUS; MySQL 8.4: SHOW BINARY "
            "LOG STATUS)"
        )
    return UnreadableEvent(
        f"the binlog event of type {event_name(kind)} ending at {where}, {state}, stops "
        f"capture: {why}. Restarted, the relay resumes after SCN {last_scn} and stops here "
        f"again; {past}, and re-seed the captured tables (sluice bootstrap seed): changes "
        "skipped that way are not captured",
        event_type=kind,
        position=where,
        scn=last_scn,
    )


# A QUERY event that changes rows: a statement logged in STATEMENT format (leading comments,
# as some clients add, are passed over).
_DML = re.compile(rb"\s*(?:/\*.*?\*/\s*)*(?:INSERT|UPDATE|DELETE|REPLACE|LOAD)\b", re.S | re.I)


def statement_change(text: bytes, *, where: str, last_scn: int) -> UnreadableEvent | None:
    """The error that stops capture at a row change logged as SQL text (``QUERY``), which
    capture cannot turn into row images; None for any other statement."""
    if not _DML.match(text):
        return None
    return UnreadableEvent(
        f"the binlog QUERY event ending at {where} changes rows as an SQL statement, and stops "
        f"capture: {_STATEMENT}. Restarted, the relay resumes after SCN {last_scn} and stops "
        "here again; to go past it, restart with --since-scn at a later commit and re-seed the "
        "captured tables (sluice bootstrap seed)",
        event_type=t.QUERY,
        position=where,
        scn=last_scn,
    )
