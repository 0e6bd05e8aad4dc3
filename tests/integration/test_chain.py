"""Relay chaining: relays whose source is other relays (``sluice://``), as real processes.

Each tier serves exactly what the tier above serves: the same window records, byte for byte
(SCN, previous SCN, commit time, events), and the same schema versions.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pymysql

from sluice.blocking_http import frames
from sluice.core import wire
from sluice.testing import PrivateMariaDB, RelayProcess, ReplicaConsumer, free_port
from tests.integration.support import (
    assert_replica_equals,
    consume,
    get_json,
    http_status,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)
from tests.integration.workload import Workload, workload_thread

TABLES = ["alltypes", "person", "orders"]


def _args(source: str, sources: list[str], data_dir: Path, port: int, *more: str) -> list[str]:
    args = ["--source", source, "--port", str(port), "--data-dir", str(data_dir), *more]
    for table in sources:
        args += ["--table", table]
    return args


def _records(url: str, since: int, until: int) -> list[bytes]:
    """Every window record a relay serves after ``since`` up to ``until``, as served."""
    out: list[bytes] = []
    while since < until:
        params = {"since_scn": str(since), "timeout_ms": "0"}
        got = [f for f in frames(url, "/stream", params) if isinstance(f, bytes)]
        got = [r for r in got if wire.read_window_header(r).scn <= until]
        if not got:
            break
        out += got
        since = wire.read_window_header(got[-1]).scn
    return out


def _max_scn(url: str) -> int:
    return int(get_json(url + "/stats")["max_scn"])


def _same_as(
    upstream: str, downstream: str, start: int, sources: list[str], least: int = 10
) -> None:
    newest = _max_scn(upstream)
    wait_for(lambda: _max_scn(downstream) >= newest, 60, f"{downstream} to reach SCN {newest}")
    mine, theirs = _records(downstream, start, newest), _records(upstream, start, newest)
    assert len(theirs) >= least
    assert [wire.read_window_header(r).scn for r in mine] == [
        wire.read_window_header(r).scn for r in theirs
    ]
    assert mine == theirs  # the records byte for byte: prev SCN, time, events, checksum
    for source in sources:
        assert get_json(f"{downstream}/schemas/{source}") == get_json(
            f"{upstream}/schemas/{source}"
        )


def test_a_chain_of_three_relays_serves_the_same_bytes_across_sigkills(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    Workload.create(conn)
    sources = [f"{database}.{t}" for t in TABLES]
    top = RelayProcess(_args(mariadb.url, sources, tmp_path / "a", 0), tmp_path / "a.log").start()
    mid_port = free_port()
    mid_args = _args(
        top.url.replace("http", "sluice"), sources, tmp_path / "b", mid_port, "--name", "tier2"
    )
    mid = RelayProcess(mid_args, tmp_path / "b.log").start()
    low = RelayProcess(
        _args(f"sluice://127.0.0.1:{mid_port}", sources, tmp_path / "c", 0), tmp_path / "c.log"
    ).start()
    start = _max_scn(top.url)
    assert _max_scn(mid.url) == start == _max_scn(low.url)
    work = workload_thread(mariadb, database, seed=11, count=200)
    try:
        for _ in range(2):  # the middle relay dies mid-workload, and comes back
            seen = _max_scn(low.url)
            wait_for(lambda s=seen: _max_scn(low.url) > s, 60, "the lowest tier to advance")
            mid.kill()
            mid = RelayProcess(mid_args, tmp_path / "b.log").start()
        work.join(timeout=180)
        wait_relay_caught_up(top.url, conn)
        _same_as(top.url, mid.url, start, sources)
        _same_as(mid.url, low.url, start, sources)
        assert get_json(low.url + "/stats")["capture"]["reconnects"] >= 1
        # the first tier's console lists the second among its followers, by its --name
        assert "tier2" in [f["name"] for f in get_json(top.url + "/stats")["followers"]]
        replica = ReplicaConsumer()
        consume(low.url, replica, since_scn=start)
        assert_replica_equals(replica, conn, sources)
        sources_info = get_json(low.url + "/sources")["source"]
        assert sources_info == get_json(top.url + "/sources")["source"]  # Debezium's source block
    finally:
        for relay in (low, mid, top):
            relay.stop()


def test_a_lost_upstream_is_replaced_by_the_next(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    Workload.create(conn)
    sources = [f"{database}.{t}" for t in TABLES]
    first = RelayProcess(_args(mariadb.url, sources, tmp_path / "a1", 0), tmp_path / "a1.log")
    second = RelayProcess(_args(mariadb.url, sources, tmp_path / "a2", 0), tmp_path / "a2.log")
    first.start()
    second.start()
    upstreams = ",".join(r.url.replace("http", "sluice") for r in (first, second))
    chained = RelayProcess(_args(upstreams, sources, tmp_path / "b", 0), tmp_path / "b.log").start()
    start = min(_max_scn(first.url), _max_scn(second.url))
    wait_for(lambda: _max_scn(chained.url) >= start, 30, "the chained relay to start")
    work = workload_thread(mariadb, database, seed=5, count=120)
    try:
        wait_for(lambda: _max_scn(chained.url) > start, 60, "some windows through the first")
        first.kill()
        work.join(timeout=180)
        wait_relay_caught_up(second.url, conn)
        _same_as(second.url, chained.url, start, sources)
        details = get_json(chained.url + "/stats")["capture"]["source"]
        assert details["upstream"] == second.url
        assert details["failovers"] >= 1
    finally:
        for relay in (chained, second, first):
            relay.stop()


def test_a_relay_behind_its_upstreams_buffer_reads_it_cold_from_the_upstream(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    """The upstream's buffer wrapped while the chained relay was down: the upstream reads the
    range again from its binlog (``cold=true``), and the chain goes on exactly."""
    Workload.create(conn)
    sources = [f"{database}.{t}" for t in TABLES]
    small = ["--buffer-size", str(64 * 1024)]
    top = RelayProcess(
        _args(mariadb.url, sources, tmp_path / "a", 0, *small), tmp_path / "a.log"
    ).start()
    args = _args(top.url.replace("http", "sluice"), sources, tmp_path / "b", 0)
    chained = RelayProcess(args, tmp_path / "b.log").start()
    start = _max_scn(top.url)
    chained.stop()
    try:
        Workload(conn, seed=7).run(150)
        wait_relay_caught_up(top.url, conn)
        oldest = get_json(top.url + "/stats")["min_scn"]
        assert oldest > start, "the upstream's buffer did not wrap"
        chained = RelayProcess(args, tmp_path / "b.log").start()
        newest = _max_scn(top.url)
        wait_for(lambda: _max_scn(chained.url) >= newest, 60, "the chained relay to catch up")
        replica = ReplicaConsumer()
        consume(chained.url, replica, since_scn=start)
        assert_replica_equals(replica, conn, sources)
        assert "cold read of SCNs" in (tmp_path / "a.log").read_text()
    finally:
        chained.stop()
        top.stop()


def _sqlite_relay(tmp_path: Path) -> tuple[sqlite3.Connection, RelayProcess]:
    """A SQLite table and a relay polling it every 50 ms into a 64 KiB buffer (a query
    source: it cannot read the past again)."""
    db = sqlite3.connect(tmp_path / "app.db")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, updated_at INTEGER)")
    db.commit()
    config = tmp_path / "relay.toml"
    config.write_text(
        '[tables."main.t"]\nmode = "incrementing"\nincrementing_column = "id"\n'
        'poll_interval = "50ms"\n'
    )
    top = RelayProcess(
        [
            *_args(f"query+sqlite:///{tmp_path / 'app.db'}", [], tmp_path / "a", 0),
            *("--config", str(config), "--buffer-size", str(64 * 1024)),
        ],
        tmp_path / "a.log",
    ).start()
    return db, top


def _insert_window(db: sqlite3.Connection, relay_url: str, batch: int) -> None:
    """50 rows of ~130 bytes, and the poll that makes them a window."""
    seen = _max_scn(relay_url)
    db.executemany(
        "INSERT INTO t (v, updated_at) VALUES (?, ?)",
        [("x" * 100, batch * 100 + i) for i in range(50)],
    )
    db.commit()
    wait_for(lambda: _max_scn(relay_url) > seen, 30, "the upstream to poll")


def test_a_relay_that_fell_out_of_its_upstreams_buffer_says_so(tmp_path: Path) -> None:
    """An upstream that cannot read its source again (a query source): the chained relay
    stops capturing, says why in /healthz and its log, and names the fix."""
    db, top = _sqlite_relay(tmp_path)
    args = _args(top.url.replace("http", "sluice"), ["main.t"], tmp_path / "b", 0)
    chained = RelayProcess(args, tmp_path / "b.log").start()
    start = _max_scn(chained.url)
    chained.stop()
    try:
        for batch in range(40):  # 40 windows of 50 rows of ~130 bytes: the buffer wraps
            _insert_window(db, top.url, batch)
        status, _ = http_status(f"{top.url}/stream?since_scn={start}&timeout_ms=0")
        assert status == 410, "the upstream's buffer did not wrap"
        chained = RelayProcess(args, tmp_path / "b.log").start()
        status, body = wait_for(
            lambda: (s := http_status(chained.url + "/healthz"))[0] == 503 and s, 60, "a 503"
        )
        assert "fell out of its upstreams' buffers" in str(body)
        assert "--since-scn" in str(body) and "bootstrap=" in str(body)
        text = (tmp_path / "b.log").read_text()
        assert "fell out of its upstreams' buffers" in text
    finally:
        chained.stop()
        top.stop()
        db.close()


def test_a_chain_to_nothing_or_to_a_table_the_upstream_lacks_is_one_clear_line(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    Workload.create(conn)
    dead = free_port()
    result = run_sluice(
        "relay", *_args(f"sluice://127.0.0.1:{dead}", ["a.b"], tmp_path / "x", 0), timeout=60
    )
    assert result.returncode != 0
    assert f"127.0.0.1:{dead}" in result.stderr and "no upstream relay answers" in result.stderr
    top = RelayProcess(
        _args(mariadb.url, [f"{database}.person"], tmp_path / "a", 0), tmp_path / "a.log"
    ).start()
    try:
        result = run_sluice(
            "relay",
            *_args(top.url.replace("http", "sluice"), [f"{database}.orders"], tmp_path / "y", 0),
            timeout=60,
        )
        assert result.returncode != 0
        assert f"does not capture {database}.orders" in result.stderr
        assert f"add --table {database}.orders" in result.stderr
        result = run_sluice(
            "relay", *_args("sluice://host:notaport", ["a.b"], tmp_path / "z", 0), timeout=60
        )
        assert result.returncode != 0 and "port is not a number" in result.stderr
    finally:
        top.stop()


def test_a_relay_out_of_its_upstreams_buffer_reads_the_gap_from_a_bootstrap_log(
    tmp_path: Path, spark: Any
) -> None:
    """The upstream cannot read its source again; the bootstrap job kept up with it: the
    chained relay reads the range it missed from the bootstrap server's log, then goes on
    from the upstream, and its consumers see every change."""
    from sluice.bootstrap.job import BootstrapJob, JobConfig
    from sluice.bootstrap.server import BootstrapServer
    from sluice.testing import ServiceThread

    db, top = _sqlite_relay(tmp_path)
    _insert_window(db, top.url, 100)  # SCN 0 would mean "from a snapshot" to the job
    job = JobConfig(
        (top.url,), ("main.t",), str(tmp_path / "s"), once=True, since_scn=_max_scn(top.url)
    )
    BootstrapJob(job, spark).run()
    args = _args(top.url.replace("http", "sluice"), ["main.t"], tmp_path / "b", 0)
    chained = RelayProcess(args, tmp_path / "b.log").start()
    start = _max_scn(chained.url)
    chained.stop()
    try:
        for round_ in range(3):  # each round fits the upstream's buffer; all together do not
            for batch in range(6):
                _insert_window(db, top.url, round_ * 6 + batch)
            BootstrapJob(job, spark).run()
        status, _ = http_status(f"{top.url}/stream?since_scn={start}&timeout_ms=0")
        assert status == 410, "the upstream's buffer did not wrap"
        with ServiceThread(BootstrapServer(job.store, port=0)) as server:
            with_log = args[:]
            with_log[1] = f"{args[1]}?bootstrap={server.url}"
            chained = RelayProcess(with_log, tmp_path / "b.log").start()
            _insert_window(db, top.url, 99)  # and a change after the gap
            newest = _max_scn(top.url)
            wait_for(lambda: _max_scn(chained.url) >= newest, 60, "the chained relay to catch up")
        details = get_json(chained.url + "/stats")["capture"]["source"]
        assert details["bootstrap_reads"] >= 1
        replica = ReplicaConsumer()
        consume(chained.url, replica, since_scn=start)
        rows = replica.snapshot("main.t")
        assert sorted(rows) == sorted(f'{{"id":{i}}}' for i in range(51, 20 * 50 + 1))
        assert http_status(chained.url + "/healthz")[0] == 200
    finally:
        chained.stop()
        top.stop()
        db.close()


def test_a_window_bigger_than_the_buffer_passes_through_a_chain_exactly(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    """One transaction of ~3 MiB through relays with 1 MiB buffers: the upstream serves it
    from a file of its own, the chained relay reads it in pieces and hands it over in parts
    (never whole), and holds it in a file of its own too: the same record, byte for byte."""
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, body VARCHAR(2000))")
    source = f"{database}.big"
    small = ("--buffer-size", str(1 << 20))
    top = RelayProcess(_args(mariadb.url, [source], tmp_path / "a", 0, *small), tmp_path / "a.log")
    top.start()
    args = _args(top.url.replace("http", "sluice"), [source], tmp_path / "b", 0, *small)
    chained = RelayProcess(args, tmp_path / "b.log").start()
    start = _max_scn(top.url)
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO big VALUES (0, 'before')")
            cur.executemany(
                "INSERT INTO big VALUES (%s, %s)", [(i, f"{i:06d}" * 300) for i in range(1, 1800)]
            )
            cur.execute("INSERT INTO big VALUES (5000, 'after')")
        conn.commit()
        wait_relay_caught_up(top.url, conn)
        _same_as(top.url, chained.url, start, [source], least=1)
        assert "held in" in (tmp_path / "b.log").read_text()  # a window file of its own
        replica = ReplicaConsumer()
        consume(chained.url, replica, since_scn=start)
        assert_replica_equals(replica, conn, [source])
    finally:
        chained.stop()
        top.stop()


def test_a_relay_ahead_of_its_upstream_says_so(tmp_path: Path) -> None:
    """A chained relay whose SCN its upstream has never seen (another database's data dir, a
    mistyped --since-scn): capture stops and /healthz says why, naming the fix."""
    db, top = _sqlite_relay(tmp_path)
    _insert_window(db, top.url, 0)
    ahead = str(_max_scn(top.url) * 2)
    args = _args(top.url.replace("http", "sluice"), ["main.t"], tmp_path / "b", 0)
    chained = RelayProcess([*args, "--since-scn", ahead], tmp_path / "b.log").start()
    try:
        _, body = wait_for(
            lambda: (s := http_status(chained.url + "/healthz"))[0] == 503 and s, 60, "a 503"
        )
        assert "its upstream has never seen" in str(body)
        assert "new --data-dir" in str(body)
        assert _max_scn(chained.url) == int(ahead)  # nothing was taken
    finally:
        chained.stop()
        top.stop()
        db.close()
