"""Sink tests' common parts: a source workload with every kind of change, ``sluice sink`` as a
process that can be SIGKILLed, and the relay's own events to compare deliveries with."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql

from sluice.testing.mariadb import free_port
from tests.integration.support import get_json, wait_for, wait_relay_caught_up

SOURCE_TABLES = (
    "orders (id INT PRIMARY KEY, status VARCHAR(20) NOT NULL, amount DECIMAL(10,2), "
    "note TEXT NULL, created DATETIME(6) NULL, data VARBINARY(16) NULL)",
    "items (order_id INT, line INT, sku VARCHAR(30), qty INT, PRIMARY KEY (order_id, line))",
    "audit (msg VARCHAR(40), n INT)",
)
SOURCES = ["shop.orders", "shop.items", "shop.audit"]


def workload(
    conn: pymysql.Connection[Any],
    transactions: int,
    seed: int = 7,
    on_progress: Callable[[int], None] | None = None,
    pace_s: float = 0.0,
    first_id: int = 1,
) -> None:
    """Inserts, updates, deletes, primary-key changes, a TRUNCATE and an ALTER (ADD COLUMN)
    over ``orders``/``items``/``audit``, in ``transactions`` transactions."""
    rng = random.Random(seed)
    cur = conn.cursor()
    next_id = first_id
    altered = False
    for t in range(transactions):
        if t == transactions // 3:
            cur.execute("TRUNCATE TABLE items")
            conn.commit()
            continue
        if t == transactions // 2 and not altered:
            cur.execute("ALTER TABLE orders ADD COLUMN IF NOT EXISTS priority INT NULL")
            altered = True
            continue
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            if op < 0.45 or next_id < first_id + 10:
                note = None if rng.random() < 0.3 else f"note {next_id} ü"
                cur.execute(
                    "INSERT INTO orders (id, status, amount, note, created, data) "
                    "VALUES (%s, 'new', %s, %s, '2024-05-06 07:08:09.123456', %s)",
                    (next_id, f"{rng.randint(0, 99999) / 100:.2f}", note, bytes([next_id % 256])),
                )
                cur.execute(
                    "INSERT INTO items VALUES (%s, 1, %s, %s)",
                    (next_id, f"sku-{next_id}", rng.randint(1, 5)),
                )
                next_id += 1
            elif op < 0.7:
                victim = rng.randint(first_id, next_id - 1)
                if altered:
                    cur.execute(
                        "UPDATE orders SET status = 'paid', amount = amount + 1, priority = %s "
                        "WHERE id = %s",
                        (rng.randint(1, 3), victim),
                    )
                else:
                    cur.execute(
                        "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id = %s",
                        (victim,),
                    )
            elif op < 0.8:
                cur.execute(
                    "DELETE FROM orders WHERE id = %s", (rng.randint(first_id, next_id - 1),)
                )
            elif op < 0.88:  # a primary-key change
                old = rng.randint(first_id, next_id - 1)
                cur.execute("UPDATE orders SET id = %s WHERE id = %s", (next_id, old))
                cur.execute("UPDATE items SET line = line + 1 WHERE order_id = %s", (old,))
                next_id += 1
            else:
                cur.execute("INSERT INTO audit VALUES (%s, %s)", (f"m{t % 5}", t % 3))
                if rng.random() < 0.3:
                    cur.execute("DELETE FROM audit WHERE msg = %s LIMIT 1", (f"m{t % 5}",))
        conn.commit()
        if on_progress is not None:
            on_progress(t)
        if pace_s:
            time.sleep(pace_s)


def newest_window(relay_url: str, conn: pymysql.Connection[Any]) -> int:
    """The SCN a sink's checkpoint reaches once it has every window: the relay's newest,
    after its capture read the binlog to the server's current end. Not that end itself: a
    sink writing its replica on the same server adds binlog events after the last window,
    which no window covers (waiting for it raced the sink's own commits)."""
    wait_relay_caught_up(relay_url, conn)
    return int(get_json(relay_url + "/stats")["max_scn"])


class SinkProcess:
    """``sluice sink`` as a child process on a known port (``/stats``)."""

    def __init__(self, args: list[str], log_path: Path, **env: str) -> None:
        self.env = env
        self.port = free_port()
        self.args = [*args, "--port", str(self.port)]
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> SinkProcess:
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sluice.cli.main", "-v", "sink", *self.args],
                stdout=log,
                stderr=log,
                env=dict(os.environ, PYTHONUNBUFFERED="1", **self.env),
            )
        return self

    def stats(self) -> dict[str, Any] | None:
        self.check_alive()
        try:
            stats: dict[str, Any] = get_json(self.url + "/stats")
        except OSError:
            return None
        return stats

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"sluice sink exited {self.proc.returncode}: {self.log_path.read_text()[-3000:]}"
            )

    def wait_scn(self, scn: int, timeout: float = 120) -> dict[str, Any]:
        """Until the sink's checkpoint reaches ``scn``; on a timeout the failure shows the
        sink's last ``/stats`` and its log's end."""
        last: list[dict[str, Any] | None] = [None]

        def reached() -> dict[str, Any] | None:
            stats = last[0] = self.stats()
            return stats if stats is not None and (stats["checkpoint_scn"] or 0) >= scn else None

        try:
            stats: dict[str, Any] = wait_for(reached, timeout, f"the sink to reach SCN {scn}")
        except AssertionError as exc:
            tail = self.log_path.read_text()[-4000:]
            shown = json.dumps(last[0])
            raise AssertionError(f"{exc}\nlast /stats: {shown}\nlog: {tail}") from None
        return stats

    def wait_events(self, events: int, timeout: float = 120) -> None:
        wait_for(
            lambda: (s := self.stats()) is not None and s["events"] >= events,
            timeout,
            f"the sink to deliver {events} events",
        )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def run_with_kills(
    conn: pymysql.Connection[Any],
    sink: SinkProcess,
    transactions: int,
    kills: int = 2,
) -> None:
    """The workload in a thread while the sink is SIGKILLed ``kills`` times midway (each
    time after it delivered something new, or caught up once the workload ended) and started
    again."""
    errors: list[BaseException] = []

    def work() -> None:
        try:
            workload(conn, transactions, pace_s=0.01)
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    sink.start()
    thread.start()
    delivered = 0
    for _ in range(kills):
        wait_for(
            lambda: (
                (s := sink.stats()) is not None
                and (s["events"] > 0 or (not thread.is_alive() and s["lag_scn"] == 0))
            ),
            120,
            "the sink to deliver some events",
        )
        stats = sink.stats() or {}
        delivered += int(stats.get("events", 0))
        sink.kill()
        sink.start()
    thread.join(300)
    assert not errors, errors
    assert delivered > 0


def relay_events(relay_url: str, sources: list[str] | None = None) -> list[dict[str, Any]]:
    """Every event the relay holds, as its JSON lines (``sluice tail``)."""
    args = [sys.executable, "-m", "sluice.cli.main", "tail", "--relay", relay_url]
    for source in sources or []:
        args += ["--source", source]
    out = subprocess.run(
        [*args, "--until-caught-up"], capture_output=True, text=True, check=True, timeout=300
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line]
