"""``sluice bootstrap seed`` from the command line: a read-only user, SIGKILL then resume,
and bad input (one clear line, exit 2, nothing written to the store)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.bootstrap.reader import snapshot_rows
from sluice.bootstrap.store import BootstrapStore
from sluice.capture.mysql.metadata import end_scn
from sluice.testing import PrivateMariaDB
from sluice.testing.truth import table_rows
from tests.integration.support import SLUICE, run_sluice, wait_for

ROWS = 30_000


@pytest.fixture
def reader_url(mariadb: PrivateMariaDB, database: str) -> str:
    """A read-only user: SELECT, REPLICATION SLAVE, BINLOG MONITOR; no write, no lock."""
    admin = mariadb.connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE USER IF NOT EXISTS 'ro_{database}'@'%' IDENTIFIED BY 'p/w#?'")
        cur.execute(f"GRANT SELECT ON {database}.* TO 'ro_{database}'@'%'")
        cur.execute(f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'ro_{database}'@'%'")
    admin.close()
    return f"mysql://ro_{database}:p%2Fw%23%3F@127.0.0.1:{mariadb.port}"


def _fill(conn: pymysql.Connection[Any]) -> None:
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE big (id BIGINT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2), "
            "at DATETIME(3)) ENGINE=InnoDB"
        )
        cur.execute(
            "INSERT INTO big SELECT seq, CONCAT('n-', seq), seq / 7, "
            f"'2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_{ROWS}"
        )
        cur.execute("CREATE TABLE nokey (a INT, b INT) ENGINE=InnoDB")
        cur.execute("CREATE TABLE mine (id INT PRIMARY KEY) ENGINE=MyISAM")


def _snapshot_rows(store: BootstrapStore, source: str) -> dict[str, Any]:
    assert store.current_snapshot() is not None
    return snapshot_rows(store, source)


def _seed_setup(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, url: str, chunk_rows: int
) -> tuple[Any, str, BootstrapStore, list[str], Path]:
    """A filled table, a store whose log starts now, the seed's arguments, its chunk folder."""
    conn = mariadb.connect(database)
    _fill(conn)
    source = f"{database}.big"
    store = BootstrapStore(str(tmp_path / "store"))
    store.create(end_scn(conn), (source,))
    args = ["bootstrap", "seed", "--source", url, "--table", source, "--store", store.uri]
    args += ["--chunk-rows", str(chunk_rows), "--parallelism", "1"]
    return conn, source, store, args, tmp_path / "store" / "seeds" / source / "gen=1"


def test_seed_killed_midway_resumes_with_the_missing_chunks_only(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, reader_url: str
) -> None:
    conn, source, store, args, gen = _seed_setup(mariadb, database, tmp_path, reader_url, 1000)
    first = subprocess.Popen(
        [*SLUICE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        wait_for(lambda: len(list(gen.glob("_done-*.json"))) >= 3, 120, "three chunks done")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
        first.communicate(timeout=30)
    done_before = len(list(gen.glob("_done-*.json")))
    assert 3 <= done_before < 30 and store.current_snapshot() is None

    second = run_sluice(*args, timeout=300)
    assert second.returncode == 0, second.stderr
    # 30,000 dense integer keys in chunks of 1,000: 30 ranges by arithmetic.
    assert f"read {30 - done_before} of 30 chunks" in second.stdout, second.stdout
    # The fast path (make setup installs the MariaDB JDBC driver), with a read-only user.
    via = re.search(r"(\d+) through Spark's JDBC source", second.stdout)
    assert via is not None and int(via[1]) == 30 - done_before, second.stdout
    assert f"seeded {source}: {ROWS} rows in 30 chunks" in second.stdout
    assert "seed: " in second.stderr  # progress lines
    assert "WARN" not in second.stderr and "Traceback" not in second.stderr
    truth = table_rows(conn, source)
    assert _snapshot_rows(store, source) == truth
    conn.close()


@pytest.mark.parametrize("group", [False, True], ids=["process", "process-group"])
def test_sigterm_stops_a_seed_with_one_line_and_it_resumes(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, reader_url: str, group: bool
) -> None:
    """SIGTERM to the seed's process, or to its whole process group as systemd sends it (its
    Spark JVM then stops at once too: stopping the session finds it gone)."""
    conn, source, store, args, gen = _seed_setup(mariadb, database, tmp_path, reader_url, 500)
    seed = subprocess.Popen(
        [*SLUICE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(list(gen.glob("_done-*.json"))) >= 2, 120, "two chunks done")
        if group:
            os.killpg(seed.pid, signal.SIGTERM)
        else:
            seed.send_signal(signal.SIGTERM)
        _out, err = seed.communicate(timeout=120)
    finally:
        if seed.poll() is None:
            os.killpg(seed.pid, signal.SIGKILL)
            seed.communicate(timeout=30)
    assert seed.returncode == 130, err
    assert [line for line in err.splitlines() if line.startswith("sluice:")] == [
        "sluice: stopped: seed stopped by a signal; what it finished is kept: run it again "
        "to resume"
    ]
    assert "Traceback" not in err and "Py4J" not in err and store.current_snapshot() is None
    again = run_sluice(*args, timeout=300)
    assert again.returncode == 0, again.stderr
    assert _snapshot_rows(store, source) == table_rows(conn, source)
    conn.close()


def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, reader_url: str
) -> None:
    conn = mariadb.connect(database)
    _fill(conn)
    sources = tuple(f"{database}.{t}" for t in ("big", "nokey", "mine", "gone"))
    good = BootstrapStore(str(tmp_path / "good"))
    good.create(end_scn(conn), sources)
    other = BootstrapStore(str(tmp_path / "other"))
    other.create(999 << 32, sources)  # a log that starts beyond this server's binlog
    anonymous = reader_url.replace(":p%2Fw%23%3F@", "@")

    def seed(*extra: str, url: str = reader_url, store: str = good.uri) -> str:
        result = run_sluice(
            "bootstrap", "seed", "--source", url, "--store", store, *extra, timeout=60
        )
        assert result.returncode == 2, (extra, result.stdout, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.startswith("sluice: error")]
        assert len(lines) == 1, result.stderr
        assert "p/w#?" not in result.stderr and "p%2Fw" not in result.stderr
        return lines[0]

    assert "unknown table" in seed("--table", sources[3])
    assert "has no primary key" in seed("--table", sources[1])
    assert "ADD PRIMARY KEY" in seed("--table", sources[1])
    assert "MyISAM" in seed("--table", sources[2])
    assert "another server" in seed("--table", sources[0], store=other.uri)
    assert "at least 1" in seed("--table", sources[0], "--chunk-rows", "0")
    assert "refused the login" in seed("--table", sources[0], url=anonymous)
    assert "--where is not a condition" in seed("--table", sources[0], "--where", "nope ==")
    assert "does not capture" in seed("--table", f"{database}.elsewhere")
    assert "not a Sluice bootstrap store" in seed(
        "--table", sources[0], store=str(tmp_path / "none")
    )
    for store in (good, other):
        assert not (Path(store.root) / "seeds").exists()
        assert sorted(p.name for p in Path(store.root).iterdir()) == ["sluice-store.json"]
    nope = run_sluice("bootstrap", "nope")
    assert nope.returncode == 2 and "invalid choice" in nope.stderr
    conn.close()
