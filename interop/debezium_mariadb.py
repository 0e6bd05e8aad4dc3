"""Record Debezium's MySQL connector on MariaDB on fixed rows of every type: the golden file the
test suite compares Sluice's ``format=debezium`` with (``tests/golden/debezium/``).

``python -m interop.debezium_mariadb`` (``make interop``). Debezium's MySQL connector refuses
MariaDB 10.11 at a ``SHOW BINARY LOG STATUS`` check; ``interop/java/.../MariaDbShim.java`` is
Connector/J with that one statement rewritten (compiled here with ``javac``), named in
``database.jdbc.driver`` (../shared/facts/debezium.md). The binlog stream is Debezium's own.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from interop.engine import (
    MARIADB_SHIM_SETTINGS,
    compile_mariadb_shim,
    run_engine,
    write_golden,
)
from sluice.testing import PrivateMariaDB

SETUP = [
    "CREATE DATABASE golden",
    "CREATE TABLE golden.typed (id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, "
    "sm SMALLINT, me MEDIUMINT, i INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED, "
    "n DECIMAL(10,2), f FLOAT, d DOUBLE, b1 BIT(1), b10 BIT(10), bo BOOLEAN, c CHAR(3), "
    "vc VARCHAR(20), t TEXT, bn BINARY(4), vb VARBINARY(8), bl BLOB, dt DATE, tm TIME, "
    "tm3 TIME(3), dtm DATETIME, dtm3 DATETIME(3), dtm6 DATETIME(6), ts TIMESTAMP(6) NULL, "
    "y YEAR, e ENUM('sad','ok','happy'), s SET('x','y','z'), j JSON)",
    "CREATE TABLE golden.defaults (id INT PRIMARY KEY, a INT NOT NULL DEFAULT 42, "
    "s VARCHAR(10) NOT NULL DEFAULT 'x', b BOOLEAN NOT NULL DEFAULT true, "
    "n DECIMAL(6,2) NOT NULL DEFAULT 1.50, d DATE NOT NULL DEFAULT '2024-01-01', "
    "neg BIGINT NOT NULL DEFAULT -7, z INT DEFAULT 7, nn TEXT NOT NULL, "
    "f DOUBLE NOT NULL DEFAULT 2.5, e ENUM('a','b') NOT NULL DEFAULT 'b')",
]
STATEMENTS = [
    "INSERT INTO golden.typed VALUES (1, -128, 255, -32768, -8388608, -2147483648, "
    "4294967295, -9223372036854775808, 18446744073709551615, 12345678.91, 1.5, -2.25, b'1', "
    "b'1000000001', true, 'ab', 'hello', 'text é', x'00ff10', x'0102', x'cafe', '2024-02-29', "
    "'-838:59:59', '01:02:03.456', '2024-01-02 03:04:05', '2024-01-02 03:04:05.678', "
    "'2024-01-02 03:04:05.678901', '2024-01-02 03:04:05.678901', 2024, 'happy', 'x,z', "
    "'{\"a\": 1}')",
    "INSERT INTO golden.typed (id) VALUES (2)",
    "INSERT INTO golden.typed VALUES (3, 0, 0, 0, 0, 0, 0, 0, 0, -0.01, 0, 0, b'0', b'0', "
    "false, 'x', '', '', x'', x'', x'', '1970-01-01', '00:00:00', '00:00:00', "
    "'1970-01-01 00:00:00', '1970-01-01 00:00:00', '1970-01-01 00:00:00', "
    "'1970-01-01 00:00:01', 1970, 'sad', '', '[]')",
    "UPDATE golden.typed SET vc = 'changed', n = 1.10 WHERE id = 1",
    "DELETE FROM golden.typed WHERE id = 3",
    "UPDATE golden.typed SET id = 7 WHERE id = 2",  # a key change: delete, tombstone, create
    "INSERT INTO golden.defaults (id, nn) VALUES (1, 'given')",
    "TRUNCATE golden.typed",
]
EXPECTED = 9  # value records: a key change is two (and a tombstone); TRUNCATE one if emitted
SETTINGS = {
    **MARIADB_SHIM_SETTINGS,
    "name": "golden",
    "database.server.id": "5400",
    "topic.prefix": "golden",
    "database.include.list": "golden",
    "table.include.list": "golden.typed,golden.defaults",
    "skipped.operations": "none",  # record TRUNCATE too (Debezium's default skips it)
    "snapshot.mode": "no_data",
    "poll.interval.ms": "10",
}


def record() -> Path:
    shim = compile_mariadb_shim()
    with PrivateMariaDB() as db:
        conn = db.connect()
        with conn.cursor() as cur:
            for sql in SETUP:
                cur.execute(sql)
        work = Path(tempfile.mkdtemp(prefix="dbz-"))
        props = {
            **SETTINGS,
            "database.port": str(db.port),
            "offset.storage.file.filename": str(work / "offsets.dat"),
            "schema.history.internal.file.filename": str(work / "history.dat"),
        }

        def streaming() -> bool:  # once its binlog dump is connected
            with conn.cursor() as cur:
                cur.execute("SHOW PROCESSLIST")
                return any("Binlog Dump" in str(row) for row in cur.fetchall())

        def workload() -> None:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                for sql in STATEMENTS:
                    cur.execute(sql)

        events = run_engine(props, streaming, workload, EXPECTED, [shim])
    settings = {k: v for k, v in SETTINGS.items() if not k.startswith("offset")}
    body = {"settings": settings, "setup": SETUP, "statements": STATEMENTS, "events": events}
    note = " (MySQL connector on MariaDB through interop/java/sluice/interop/MariaDbShim.java)"
    return write_golden("mariadb", "python -m interop.debezium_mariadb (make interop)", note, body)


if __name__ == "__main__":
    print("wrote", record())
    sys.exit(0)
