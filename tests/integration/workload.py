"""Tables of every column type and a randomized workload over them."""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import uuid
from decimal import Decimal
from typing import Any

import pymysql

ALL_TYPES_DDL = """
CREATE TABLE alltypes (
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
  mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  yr YEAR, b1 BIT(1), b10 BIT(10), b64 BIT(64),
  d1 DECIMAL(10,2), d2 DECIMAL(30,10), d3 DECIMAL(5,0), d4 DECIMAL(65,30),
  f FLOAT, db DOUBLE,
  c CHAR(10), vc VARCHAR(300), vcl VARCHAR(20) CHARACTER SET latin1, tx TEXT,
  mtx MEDIUMTEXT CHARACTER SET utf8mb4, e ENUM('x','y','z'), st SET('a','b','c','d'),
  bn BINARY(8), vb VARBINARY(20), bl BLOB,
  dt DATE, dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP(3) NULL DEFAULT NULL,
  tm TIME, tm6 TIME(6), tm2 TIME(2),
  j JSON, u UUID, ip INET6, ucs VARCHAR(10) CHARACTER SET ucs2, nn INT NOT NULL DEFAULT 0
) ENGINE=InnoDB
"""
ALL_TYPES_COLUMNS = [
    "ti",
    "tiu",
    "si",
    "siu",
    "mi",
    "miu",
    "i",
    "iu",
    "bi",
    "biu",
    "yr",
    "b1",
    "b10",
    "b64",
    "d1",
    "d2",
    "d3",
    "d4",
    "f",
    "db",
    "c",
    "vc",
    "vcl",
    "tx",
    "mtx",
    "e",
    "st",
    "bn",
    "vb",
    "bl",
    "dt",
    "dtm",
    "dtm6",
    "ts",
    "tm",
    "tm6",
    "tm2",
    "j",
    "u",
    "ip",
    "ucs",
    "nn",
]
PERSON_DDL = (
    "CREATE TABLE person (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, "
    "balance DECIMAL(12,2), updated DATETIME(3)) ENGINE=InnoDB"
)
ORDERS_DDL = (
    "CREATE TABLE orders (region CHAR(2), num BIGINT UNSIGNED, item VARCHAR(40), "
    "qty SMALLINT, PRIMARY KEY (region, num)) ENGINE=InnoDB"
)


def _pick(rng: random.Random, *choices: Any) -> Any:
    return rng.choice(choices)


def _decimal(rng: random.Random, digits: int, scale: int) -> Decimal:
    intg = rng.randint(0, digits - scale)
    text = "".join(rng.choice("0123456789") for _ in range(intg)) or "0"
    frac = "".join(rng.choice("0123456789") for _ in range(scale))
    sign = rng.choice(("", "-"))
    return Decimal(f"{sign}{text}.{frac}" if scale else f"{sign}{text}")


def _time(rng: random.Random, fsp: int) -> dt.timedelta:
    micros = rng.randint(0, 838 * 3600 + 59 * 60 + 59) * 1_000_000
    if fsp:
        unit = 10 ** (6 - fsp)
        micros += rng.randint(0, 10**fsp - 1) * unit
    micros = min(micros, (838 * 3600 + 59 * 60 + 59) * 1_000_000)
    return dt.timedelta(microseconds=micros * rng.choice((1, -1)))


def random_all_types(rng: random.Random, nulls: bool = True) -> dict[str, Any]:
    def maybe(value: Any) -> Any:
        return None if nulls and rng.random() < 0.1 else value

    row: dict[str, Any] = {
        "ti": _pick(rng, -128, 127, 0, rng.randint(-128, 127)),
        "tiu": _pick(rng, 0, 255, rng.randint(0, 255)),
        "si": rng.randint(-32768, 32767),
        "siu": _pick(rng, 65535, rng.randint(0, 65535)),
        "mi": _pick(rng, -8388608, 8388607, rng.randint(-8388608, 8388607)),
        "miu": _pick(rng, 16777215, rng.randint(0, 16777215)),
        "i": _pick(rng, -(2**31), 2**31 - 1, rng.randint(-(2**31), 2**31 - 1)),
        "iu": _pick(rng, 2**32 - 1, rng.randint(0, 2**32 - 1)),
        "bi": _pick(rng, -(2**63), 2**63 - 1, rng.randint(-(2**63), 2**63 - 1)),
        "biu": _pick(rng, 2**64 - 1, 2**63, rng.randint(0, 2**64 - 1)),
        "yr": _pick(rng, 1901, 2155, 0, rng.randint(1901, 2155)),
        "b1": rng.randint(0, 1),
        "b10": rng.randint(0, 1023),
        "b64": _pick(rng, 2**64 - 1, rng.randint(0, 2**64 - 1)),
        "d1": _decimal(rng, 10, 2),
        "d2": _decimal(rng, 30, 10),
        "d3": _decimal(rng, 5, 0),
        "d4": _decimal(rng, 65, 30),
        "f": _pick(rng, 1.1, -3.25, 0.0, 3.4e38, round(rng.uniform(-1e6, 1e6), 3)),
        "db": _pick(rng, 0.1, -1e308, 2.5e-300, rng.uniform(-1e12, 1e12)),
        "c": _pick(rng, "", "abc", "héllo", "0123456789"),
        "vc": _pick(rng, "", "x" * 300, "日本語テキスト", "emoji 😀", "tab\tnew\nline"),
        "vcl": _pick(rng, "", "café", "Ÿ€ok", "plain"),
        "tx": _pick(rng, "", "long " * 200, "ünïcödé"),
        "mtx": _pick(rng, "", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "m" * 1000),
        "e": _pick(rng, "x", "y", "z"),
        "st": _pick(rng, "", "a", "c,a", "d,b,a", "a,b,c,d"),
        "bn": _pick(
            rng,
            b"",
            b"a\0\0",
            b"\0" * 8,
            bytes(rng.randrange(256) for _ in range(8)),
            b"ab\0\0\0\0\0\0",
        ),
        "vb": _pick(rng, b"", b"\0\0", bytes(rng.randrange(256) for _ in range(20))),
        "bl": _pick(rng, b"", b"\0", bytes(rng.randrange(256) for _ in range(300))),
        "dt": _pick(
            rng, dt.date(1000, 1, 1), dt.date(9999, 12, 31), dt.date(2024, 2, 29), "0000-00-00"
        ),
        "dtm": _pick(
            rng,
            dt.datetime(1000, 1, 1),
            dt.datetime(9999, 12, 31, 23, 59, 59),
            dt.datetime(2024, 5, 6, 7, 8, 9),
            "0000-00-00 00:00:00",
        ),
        "dtm6": _pick(
            rng,
            dt.datetime(2024, 5, 6, 7, 8, 9, 123456),
            dt.datetime(1999, 12, 31, 23, 59, 59, 999999),
            dt.datetime(2000, 1, 1),
        ),
        "ts": _pick(
            rng,
            dt.datetime(1970, 1, 1, 0, 0, 1),
            dt.datetime(2038, 1, 19, 3, 14, 7),
            dt.datetime(2024, 5, 6, 7, 8, 9, 123000),
        ),
        "tm": _time(rng, 0),
        "tm6": _pick(
            rng,
            dt.timedelta(hours=-12, minutes=-34, seconds=-56, microseconds=-789012),
            _time(rng, 6),
        ),
        "tm2": _time(rng, 2),
        "j": _pick(
            rng,
            '{"a": 1, "b": [true, null, 2.5]}',
            "[]",
            '"text"',
            "42",
            json.dumps({"k": rng.randint(0, 9)}),
        ),
        "u": _pick(
            rng,
            str(uuid.uuid4()),
            str(uuid.uuid1()),
            "00000000-0000-0000-0000-000000000000",
            "12345678-1234-5678-abcd-123456789000",
        ),
        "ip": _pick(
            rng,
            "::1",
            "::",
            "2001:db8::ff00:42:8329",
            "::ffff:1.2.3.4",
            "fe80::",
            "1:2:3:4:5:6:7:0",
        ),
        "ucs": _pick(rng, "", "ucs2 ok", "ÀÉÎ"),
        "nn": rng.randint(0, 10),
    }
    return {k: (v if k == "nn" else maybe(v)) for k, v in row.items()}


def insert_all_types(cur: Any, seed: int, count: int) -> None:
    """``count`` random rows into ``alltypes`` (ids ``i * 7 - 500``; every other row may hold
    NULLs), reproducible from ``seed``."""
    rng = random.Random(seed)
    for i in range(count):
        row = random_all_types(rng, nulls=i % 2 == 0)
        cols = ", ".join(["id", *row])
        cur.execute(
            f"INSERT INTO alltypes ({cols}) VALUES ({', '.join(['%s'] * (len(row) + 1))})",
            (i * 7 - 500, *row.values()),
        )


class Workload:
    """Random inserts, updates (some changing the key), deletes, rollbacks, one big txn."""

    def __init__(self, conn: pymysql.Connection[Any], seed: int = 7) -> None:
        self.conn = conn
        self.rng = random.Random(seed)
        self.ids: dict[str, set[Any]] = {"alltypes": set(), "person": set(), "orders": set()}
        self.next_id = 1

    @staticmethod
    def create(conn: pymysql.Connection[Any]) -> None:
        with conn.cursor() as cur:
            for ddl in (ALL_TYPES_DDL, PERSON_DDL, ORDERS_DDL):
                cur.execute(ddl)

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _insert(self, cur: Any, table: str) -> None:
        rng = self.rng
        if table == "alltypes":
            row = random_all_types(rng, nulls=rng.random() < 0.5)
            cols = ", ".join(["id", *row])
            marks = ", ".join(["%s"] * (len(row) + 1))
            key = self._new_id()
            cur.execute(f"INSERT INTO alltypes ({cols}) VALUES ({marks})", (key, *row.values()))
        elif table == "person":
            key = self._new_id()
            cur.execute(
                "INSERT INTO person VALUES (%s, %s, %s, %s)",
                (key, f"name-{key}", _decimal(rng, 12, 2), dt.datetime(2024, 1, 1)),
            )
        else:
            key = (rng.choice(("eu", "us", "ap")), self._new_id())
            cur.execute(
                "INSERT INTO orders VALUES (%s, %s, %s, %s)",
                (*key, f"item-{key[1]}", rng.randint(-5, 500)),
            )
        self.ids[table].add(key)

    def _update(self, cur: Any, table: str) -> None:
        if not self.ids[table]:
            return
        rng = self.rng
        key = rng.choice(sorted(self.ids[table]))
        if table == "alltypes":
            row = random_all_types(rng, nulls=rng.random() < 0.5)
            sets = ", ".join(f"{c}=%s" for c in row)
            cur.execute(f"UPDATE alltypes SET {sets} WHERE id=%s", (*row.values(), key))
        elif table == "person":
            if rng.random() < 0.3:  # a primary key change
                new = self._new_id()
                cur.execute(
                    "UPDATE person SET id=%s, name=%s WHERE id=%s", (new, f"moved-{new}", key)
                )
                self.ids[table].discard(key)
                self.ids[table].add(new)
            else:
                cur.execute(
                    "UPDATE person SET balance=%s, updated=%s WHERE id=%s",
                    (_decimal(rng, 12, 2), dt.datetime(2025, 1, 1, 1, 1, 1, 500000), key),
                )
        else:
            cur.execute(
                "UPDATE orders SET qty=qty+1, item=CONCAT(item,'+') WHERE region=%s AND num=%s", key
            )

    def _delete(self, cur: Any, table: str) -> None:
        if not self.ids[table]:
            return
        key = self.rng.choice(sorted(self.ids[table]))
        if table == "orders":
            cur.execute("DELETE FROM orders WHERE region=%s AND num=%s", key)
        else:
            cur.execute(f"DELETE FROM {table} WHERE id=%s", (key,))
        self.ids[table].discard(key)

    def transaction(self, statements: int, rollback: bool = False) -> None:
        snapshot = {t: set(v) for t, v in self.ids.items()}
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(statements):
                table = self.rng.choice(("alltypes", "person", "orders"))
                op = self.rng.choices(("i", "u", "d"), (5, 3, 2))[0]
                {"i": self._insert, "u": self._update, "d": self._delete}[op](cur, table)
            cur.execute("ROLLBACK" if rollback else "COMMIT")
        if rollback:
            self.ids = snapshot

    def large_transaction(self, rows: int) -> None:
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(rows):
                self._insert(cur, "person")
            cur.execute("COMMIT")

    def run(self, transactions: int) -> None:
        for n in range(transactions):
            self.transaction(self.rng.randint(1, 5), rollback=self.rng.random() < 0.1)
            if n == transactions // 2:
                self.large_transaction(2000)


def truncate_then_a_key_twice(conn: pymysql.Connection[Any]) -> None:
    """What a fold or a merge must get right, on ``orders``: a TRUNCATE (every older row goes),
    then one transaction that changes a key twice, inserts and deletes another, and inserts
    ``('ap', 900003)`` (one SCN: the events' order in their window decides)."""
    with conn.cursor() as cur:
        cur.execute("TRUNCATE TABLE orders")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO orders VALUES ('eu', 900001, 'first', 1)")
        cur.execute("UPDATE orders SET item = 'second', qty = 2 WHERE num = 900001")
        cur.execute("INSERT INTO orders VALUES ('us', 900002, 'gone', 1)")
        cur.execute("DELETE FROM orders WHERE num = 900002")
        cur.execute("INSERT INTO orders VALUES ('ap', 900003, 'kept', 3)")
        cur.execute("COMMIT")


def workload_thread(db: Any, database: str, seed: int, count: int) -> threading.Thread:
    """``count`` random transactions of ``Workload`` on ``database``, in a thread of their own
    (started; join it)."""

    def work() -> None:
        conn = db.connect(database)
        Workload(conn, seed=seed).run(count)
        conn.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread
