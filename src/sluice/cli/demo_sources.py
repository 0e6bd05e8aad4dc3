"""The demo's databases: a private MariaDB or PostgreSQL with the same three shop tables, the
rows that exist before the relay starts, one workload transaction, and the tables' truth
(read with a plain SELECT, never through capture)."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any, Protocol

from sluice.capture.source import end_scn
from sluice.testing import PrivateMariaDB, table_rows
from sluice.testing.truth import pg_table_rows

TABLES = ("shop.customer", "shop.product", "shop.purchase")


class DemoDatabase(Protocol):
    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def fill(self) -> None:
        """Create the tables and the rows that exist before the relay starts."""
        ...

    def connect(self) -> Any: ...

    def transaction(self, cur: Any, n: int, rng: random.Random) -> None:
        """One workload transaction (every 23rd rolls back)."""
        ...

    def truth(self, conn: Any, source: str) -> dict[str, dict[str, Any]]: ...

    def end_scn(self) -> int:
        """The database's current end (its last commit is at or before it), as an SCN."""
        ...


def demo_database(kind: str, base: Path) -> DemoDatabase:
    if kind == "postgresql":
        return PostgresDemo(base)
    return MariaDBDemo(base)


class MariaDBDemo:
    DDL = (
        "CREATE DATABASE shop",
        "CREATE TABLE shop.customer (id INT PRIMARY KEY, name VARCHAR(60) NOT NULL, "
        "email VARCHAR(120), tier ENUM('free','pro','team'), created DATE)",
        "CREATE TABLE shop.product (sku CHAR(8) PRIMARY KEY, title VARCHAR(100), "
        "price DECIMAL(10,2), tags SET('new','sale','eco'), updated_at DATETIME(6))",
        "CREATE TABLE shop.purchase (id BIGINT UNSIGNED PRIMARY KEY, customer_id INT, "
        "sku CHAR(8), qty SMALLINT, paid_at TIMESTAMP(3) NULL, note JSON)",
    )
    # Rows that exist before the relay starts: only the seed brings them to consumers.
    EXISTING = (
        "INSERT INTO shop.customer SELECT seq, CONCAT('Customer ', seq), "
        "CONCAT('c', seq, '@example.com'), ELT(1 + seq % 3, 'free', 'pro', 'team'), "
        "'2023-01-01' + INTERVAL seq % 365 DAY FROM seq_0_to_19999",
        "INSERT INTO shop.product SELECT CONCAT('SKU', LPAD(seq, 5, '0')), "
        "CONCAT('Product ', seq), seq % 1000 + 0.99, ELT(1 + seq % 3, '', 'new', 'sale,eco'), "
        "'2023-06-01' + INTERVAL seq SECOND FROM seq_0_to_9999",
        "INSERT INTO shop.purchase SELECT 10000000 + seq, seq % 20000, "
        "CONCAT('SKU', LPAD(seq % 10000, 5, '0')), 1 + seq % 9, "
        "'2023-06-01' + INTERVAL seq MINUTE, CONCAT('{\"old\": ', seq, '}') FROM seq_1_to_30000",
    )

    def __init__(self, base: Path) -> None:
        self.db = PrivateMariaDB(base / "mariadb")

    @property
    def url(self) -> str:
        return self.db.url

    def start(self) -> None:
        self.db.start()
        print(f"MariaDB started on 127.0.0.1:{self.db.port} (binlog ROW/FULL/FULL)")

    def stop(self) -> None:
        self.db.stop()

    def fill(self) -> None:
        with self.db.connect() as conn, conn.cursor() as cur:
            for statement in (*self.DDL, "USE shop", *self.EXISTING, "COMMIT"):
                cur.execute(statement)

    def connect(self) -> Any:
        conn = self.db.connect()
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        return conn

    SQL = (
        "INSERT INTO shop.customer VALUES (%s, %s, %s, %s, %s) ON DUPLICATE KEY "
        "UPDATE tier=VALUES(tier)",
        "INSERT INTO shop.product VALUES (%s, %s, %s, %s, UTC_TIMESTAMP(6)) ON "
        "DUPLICATE KEY UPDATE price=VALUES(price), updated_at=UTC_TIMESTAMP(6)",
        "INSERT INTO shop.purchase VALUES (%s, %s, %s, %s, UTC_TIMESTAMP(3), %s)",
    )
    TAGS = ("", "new", "sale,eco")

    def transaction(self, cur: Any, n: int, rng: random.Random) -> None:
        _transaction(cur, self.SQL, self.TAGS, n, rng)

    def truth(self, conn: Any, source: str) -> dict[str, dict[str, Any]]:
        return table_rows(conn, source)

    def end_scn(self) -> int:
        return end_scn(self.url)


class PostgresDemo:
    DDL = (
        "CREATE SCHEMA shop",
        "CREATE TABLE shop.customer (id int PRIMARY KEY, name varchar(60) NOT NULL, "
        "email varchar(120), tier text, created date)",
        "CREATE TABLE shop.product (sku char(8) PRIMARY KEY, title varchar(100), "
        "price numeric(10,2), tags text[], updated_at timestamp(6))",
        "CREATE TABLE shop.purchase (id bigint PRIMARY KEY, customer_id int, sku char(8), "
        "qty smallint, paid_at timestamptz(3), note jsonb)",
    )
    EXISTING = (
        "INSERT INTO shop.customer SELECT g, 'Customer ' || g, 'c' || g || '@example.com', "
        "(ARRAY['free','pro','team'])[1 + g % 3], DATE '2023-01-01' + g % 365 "
        "FROM generate_series(0, 19999) g",
        "INSERT INTO shop.product SELECT 'SKU' || lpad(g::text, 5, '0'), 'Product ' || g, "
        "g % 1000 + 0.99, (ARRAY['{}', '{new}', '{sale,eco}'])[1 + g % 3]::text[], "
        "TIMESTAMP '2023-06-01' + g * INTERVAL '1 second' FROM generate_series(0, 9999) g",
        "INSERT INTO shop.purchase SELECT 10000000 + g, g % 20000, "
        "'SKU' || lpad((g % 10000)::text, 5, '0'), 1 + g % 9, "
        "TIMESTAMPTZ '2023-06-01 00:00:00+00' + g * INTERVAL '1 minute', "
        "jsonb_build_object('old', g) FROM generate_series(1, 30000) g",
    )

    def __init__(self, base: Path) -> None:
        from sluice.testing.postgres import PrivatePostgres  # noqa: PLC0415 - optional driver

        # Commits flushed at once, as in production: the default here (off) lets the WAL
        # writer hold a commit back from replication for up to 200 ms.
        self.db = PrivatePostgres(base / "postgres", settings=("synchronous_commit=on",))

    @property
    def url(self) -> str:
        return self.db.source_url("postgres")

    def start(self) -> None:
        self.db.start()
        print(f"PostgreSQL started on 127.0.0.1:{self.db.port} (wal_level=logical)")

    def stop(self) -> None:
        self.db.stop()

    def fill(self) -> None:
        conn = self.db.connect()
        with conn.cursor() as cur:
            for statement in (*self.DDL, *self.EXISTING):
                cur.execute(statement)
        conn.close()

    def connect(self) -> Any:
        conn = self.db.connect()
        with conn.cursor() as cur:
            cur.execute("SET TimeZone = 'UTC'")
        return conn

    SQL = (
        "INSERT INTO shop.customer VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE "
        "SET tier = EXCLUDED.tier",
        "INSERT INTO shop.product VALUES (%s, %s, %s, %s, clock_timestamp() AT TIME ZONE "
        "'UTC') ON CONFLICT (sku) DO UPDATE SET price = EXCLUDED.price, "
        "updated_at = EXCLUDED.updated_at",
        "INSERT INTO shop.purchase VALUES (%s, %s, %s, %s, clock_timestamp(), %s)",
    )
    TAGS: tuple[list[str], ...] = ([], ["new"], ["sale", "eco"])

    def transaction(self, cur: Any, n: int, rng: random.Random) -> None:
        _transaction(cur, self.SQL, self.TAGS, n, rng)

    def truth(self, conn: Any, source: str) -> dict[str, dict[str, Any]]:
        return pg_table_rows(conn, source)

    def end_scn(self) -> int:
        return end_scn(self.url)


def _transaction(
    cur: Any, sql: tuple[str, str, str], tags: tuple[Any, ...], n: int, rng: random.Random
) -> None:
    """The workload's transaction ``n`` in either dialect (``sql``: the customer upsert, the
    product upsert stamping ``updated_at`` now, the purchase insert); every 23rd rolls back."""
    customer, product, purchase = sql
    cur.execute("BEGIN")
    cur.execute(
        customer,
        (
            n % 500,
            f"Customer {n % 500}",
            f"c{n % 500}@example.com",
            rng.choice(["free", "pro", "team"]),
            dt.date(2024, 1, 1 + n % 28),
        ),
    )
    sku = f"SKU{n % 300:05d}"
    price = f"{rng.randint(100, 99999) / 100:.2f}"
    cur.execute(product, (sku, f"Product {sku}", price, rng.choice(tags)))
    cur.execute(purchase, (n, n % 500, sku, rng.randint(1, 9), f'{{"n": {n}}}'))
    if n % 7 == 0:
        cur.execute("DELETE FROM shop.purchase WHERE id = %s", (max(n - 50, 0),))
    cur.execute("ROLLBACK" if n % 23 == 0 else "COMMIT")
