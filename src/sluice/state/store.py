"""``StateStore``: each key's current row, in a SQLite file, with the checkpoint it reflects.

Tables: ``rows(source, key, row, scn, ts_ms)`` (``key`` the canonical key text, sorted compact
JSON; ``row`` the after image in Sluice's JSON mapping, as ``sluice tail`` prints it),
``sources(source, key_columns)`` and ``checkpoint(name, checkpoint)``. A window's rows and
the checkpoint after it commit in one transaction (a big window's pieces share it until the
last), so a SIGKILL anywhere leaves the store at a window boundary, and its checkpoint says
which. A snapshot starting over (a new store, or one that fell behind the bootstrap log)
clears the followed sources' rows in its first window's transaction.

Writes happen on one thread (the service's); reads open their own connection (WAL: readers
never wait for the writer, and see only committed windows).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.core.checkpoint import Checkpoint, Snapshot, decode_checkpoint, encode_checkpoint
from sluice.core.event import Event
from sluice.errors import ConfigError

log = logging.getLogger(__name__)
NAME = "state"
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS rows (source TEXT NOT NULL, key TEXT NOT NULL, "
    "row TEXT NOT NULL, scn INTEGER NOT NULL, ts_ms INTEGER NOT NULL, "
    "PRIMARY KEY (source, key)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS sources (source TEXT PRIMARY KEY, key_columns TEXT NOT NULL, "
    "columns TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS checkpoint (name TEXT PRIMARY KEY, checkpoint TEXT NOT NULL)",
)


def key_text(key: dict[str, Any]) -> str:
    """The canonical key text: sorted, compact JSON (what capture hashes into partitions)."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Found:
    row: dict[str, Any]
    scn: int  # the window that wrote it
    ts_ms: int


class StateStore:
    """Open with ``StateStore(path)``; ``apply`` on the writer's thread only."""

    def __init__(self, path: Path) -> None:
        if not path.parent.is_dir():
            raise ConfigError(f"no directory {path.parent} for the state store {path}")
        self.path = path
        self._conn = self._open()
        for sql in SCHEMA:
            self._conn.execute(sql)
        self._open_tx = False
        self.skipped_keyless: set[str] = set()
        self._versions: dict[str, int] = {}  # source -> the schema version last seen
        self._known: dict[str, list[str]] = {
            source: json.loads(columns)
            for source, columns in self._conn.execute("SELECT source, columns FROM sources")
        }

    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL: a commit survives a process crash
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open the state store {self.path}: {exc}") from None
        return conn

    def close(self) -> None:
        if self._open_tx:
            self._conn.execute("ROLLBACK")
        self._conn.close()

    # -- writing (the service's thread) -------------------------------------------------------
    def load_checkpoint(self) -> Checkpoint | None:
        row = self._conn.execute("SELECT checkpoint FROM checkpoint WHERE name = ?", (NAME,))
        found = row.fetchone()
        if found is None:
            return None
        return decode_checkpoint(found[0], where=f"the state store {self.path}")

    def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        """A checkpoint outside a window (a heartbeat): nothing else changes."""
        if self._open_tx:
            return  # inside a big window: its last piece writes a newer one
        self._conn.execute("BEGIN IMMEDIATE")
        self._write_checkpoint(checkpoint)
        self._conn.execute("COMMIT")

    def apply(
        self, events: Sequence[Event], checkpoint: Checkpoint | None, *, last: bool = True
    ) -> int:
        """A window's (or a piece's) events; commits with ``checkpoint`` on the last piece.
        Returns how many rows changed."""
        conn = self._conn
        if not self._open_tx:
            conn.execute("BEGIN IMMEDIATE")
            self._open_tx = True
            if self._snapshot_starts(checkpoint):
                self._clear(self._sources())
        changed = 0
        for event in events:
            changed += self._event(event)
        if last:
            if checkpoint is not None:
                self._write_checkpoint(checkpoint)
            conn.execute("COMMIT")
            self._open_tx = False
        return changed

    def rollback(self) -> None:
        if self._open_tx:
            self._conn.execute("ROLLBACK")
            self._open_tx = False

    def _event(self, event: Event) -> int:
        conn, source = self._conn, event.source
        if event.op == "t":
            return conn.execute("DELETE FROM rows WHERE source = ?", (source,)).rowcount
        if event.key is None:  # a table without a key has no state by key
            if source not in self.skipped_keyless:
                log.warning("%s has no primary key: its changes are not kept (no state by "
                            "key); /stats lists it under keyless_skipped", source)  # fmt: skip
                self.skipped_keyless.add(source)
            return 0
        key = key_text(event.key)
        if event.op == "d" or event.after is None:
            return conn.execute(
                "DELETE FROM rows WHERE source = ? AND key = ?", (source, key)
            ).rowcount
        if event.op == "u" and event.before is not None:  # a primary-key change moves the row
            old = {k: event.before.get(k) for k in event.key}
            if old != event.key:
                conn.execute("DELETE FROM rows WHERE source = ? AND key = ?",
                             (source, key_text(old)))  # fmt: skip
        conn.execute(
            "INSERT INTO rows (source, key, row, scn, ts_ms) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (source, key) DO UPDATE SET row = excluded.row, scn = excluded.scn, "
            "ts_ms = excluded.ts_ms",
            (source, key, json.dumps(event.after, ensure_ascii=False), event.scn, event.ts_ms),
        )
        if self._versions.get(source) != event.schema_version:  # once per schema version
            self._versions[source] = event.schema_version
            columns = list(event.after)
            if self._known.get(source) != columns:
                self._remember(source, event.key, columns)
        return 1

    def _remember(self, source: str, key: dict[str, Any], columns: list[str]) -> None:
        """The key's columns and their JSON types (a lookup's text values are typed by them),
        and the table's columns now (rows written before an ADD COLUMN are read with it)."""
        types = {name: _json_type(value) for name, value in sorted(key.items())}
        self._conn.execute("INSERT OR REPLACE INTO sources VALUES (?, ?, ?)",
                           (source, json.dumps(types), json.dumps(columns)))  # fmt: skip
        self._known[source] = columns

    def _sources(self) -> list[str]:
        return [r[0] for r in self._conn.execute("SELECT source FROM sources")]

    def _clear(self, sources: Iterable[str]) -> None:
        for source in sources:
            self._conn.execute("DELETE FROM rows WHERE source = ?", (source,))

    def _snapshot_starts(self, checkpoint: Checkpoint | None) -> bool:
        if not isinstance(checkpoint, Snapshot):
            return False
        done = self.load_checkpoint()
        return not (isinstance(done, Snapshot) and done.scn == checkpoint.scn)

    def _write_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._conn.execute(
            "INSERT INTO checkpoint VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET "
            "checkpoint = excluded.checkpoint",
            (NAME, encode_checkpoint(checkpoint)),
        )


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else "json"


class StateReader:
    """Lookups on a connection of their own (any thread)."""

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def close(self) -> None:
        self._conn.close()

    def get(self, source: str, key: str) -> Found | None:
        """The key's row in the table's current columns: one added since the row's last
        change is null, as on a replica (the log has no row events for an ADD COLUMN), and
        one dropped since is gone."""
        row = self._conn.execute(
            "SELECT r.row, r.scn, r.ts_ms, s.columns FROM rows r LEFT JOIN sources s "
            "ON s.source = r.source WHERE r.source = ? AND r.key = ?",
            (source, key),
        ).fetchone()
        if row is None:
            return None
        stored = json.loads(row[0])
        columns = json.loads(row[3]) if row[3] else list(stored)
        return Found({c: stored.get(c) for c in columns}, row[1], row[2])

    def key_columns(self, source: str) -> dict[str, str] | None:
        """The key's columns and their JSON types (number, string, bool, json)."""
        row = self._conn.execute(
            "SELECT key_columns FROM sources WHERE source = ?", (source,)
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def checkpoint(self) -> Checkpoint | None:
        row = self._conn.execute(
            "SELECT checkpoint FROM checkpoint WHERE name = ?", (NAME,)
        ).fetchone()
        return None if row is None else decode_checkpoint(row[0], where="the state store")

    def counts(self) -> dict[str, int]:
        return dict(self._conn.execute("SELECT source, count(*) FROM rows GROUP BY source"))
