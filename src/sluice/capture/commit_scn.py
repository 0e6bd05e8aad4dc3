"""Read your writes: the SCN a writer waits for after its commit (``min_scn`` of a state
lookup, or of any consumer's checkpoint).

- MariaDB/MySQL: an SCN is ``(binlog file number << 32) | end position`` of a commit event;
  right after ``COMMIT``, ``SHOW MASTER STATUS`` names the binlog's end, at or after the end of
  that commit.
- PostgreSQL: an SCN is the commit's end LSN; right after ``COMMIT``,
  ``pg_current_wal_insert_lsn()`` is at or after it (not ``pg_current_wal_lsn()``, the write
  position, which lags behind it with ``synchronous_commit = off``).

Either is an upper bound: other sessions' commits may follow, and are waited for too.
"""

from __future__ import annotations

from typing import Any

from sluice.capture.mysql.scn import scn_of_log
from sluice.errors import ConfigError


def commit_scn(conn: Any) -> int:
    """An SCN at or after the last commit made on ``conn`` (a PyMySQL or psycopg2
    connection), for ``min_scn``."""
    module = type(conn).__module__
    cur = conn.cursor()
    try:
        if module.startswith("pymysql"):
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
            if row is None:
                raise ConfigError("SHOW MASTER STATUS returned nothing: is the binlog on?")
            return scn_of_log(str(row[0]), int(row[1]))
        if module.startswith("psycopg2"):
            cur.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
            return int(cur.fetchone()[0])
    finally:
        cur.close()
    raise ConfigError(f"commit_scn takes a PyMySQL or psycopg2 connection, not {module}")
