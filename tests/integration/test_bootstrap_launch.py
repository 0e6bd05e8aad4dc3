"""``sluice bootstrap run`` launched and stopped as operators do: through ``spark-submit`` (the
README's form, with the JDBC driver passed by ``--jars``), and stopped by SIGTERM to its whole
process group (what systemd sends: the Spark JVM and the Python workers get it too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.bootstrap.reader import snapshot_rows
from sluice.bootstrap.seed.records import SeedRecords
from sluice.bootstrap.store import BootstrapStore
from sluice.capture.source import seed_jars
from sluice.testing import PrivateMariaDB, RelayThread, table_rows
from sluice.testing.spark_cluster import spark_bin
from tests.integration.support import (
    SLUICE,
    create_database,
    relay_config,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)

SOURCE = "launch.kv"


@pytest.fixture(scope="module")
def source(
    mariadb: PrivateMariaDB, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A table with rows from before the relay (only a seed has them) and changes after it,
    and the relay, caught up."""
    conn = create_database(mariadb, "launch", "kv (k INT PRIMARY KEY, body VARCHAR(100))")
    with conn.cursor() as cur:
        cur.execute("INSERT INTO kv SELECT seq, CONCAT('row ', seq) FROM seq_1_to_200")
    tmp = tmp_path_factory.mktemp("launch")
    with RelayThread(relay_config(mariadb, [SOURCE], tmp / "relay")) as relay:
        with conn.cursor() as cur:
            cur.execute("UPDATE kv SET body = 'changed' WHERE k % 10 = 0")
            cur.execute("DELETE FROM kv WHERE k % 37 = 3")
            cur.execute("INSERT INTO kv SELECT seq, 'new' FROM seq_201_to_260")
        wait_relay_caught_up(relay.url, conn)
        yield {"conn": conn, "db": mariadb.url, "relay": relay.url, "tmp": tmp}
    conn.close()


def _run_args(source: dict[str, Any], store: Path) -> list[str]:
    return [
        "bootstrap",
        "run",
        "--relay",
        source["relay"],
        "--source",
        SOURCE,
        "--store",
        str(store),
    ]


@pytest.mark.timeout(300)
def test_bootstrap_run_through_spark_submit_as_the_readme_says(source: dict[str, Any]) -> None:
    """``spark-submit --master local[1] --jars JDBC.jar "$(sluice spark-entry)" bootstrap run
    ... --seed URL --once``: the driver's Python is the one on PATH, as in a venv."""
    entry = run_sluice("spark-entry").stdout.strip()
    assert entry.endswith(".py") and Path(entry).is_file(), entry
    (jar,) = seed_jars("mysql://localhost")  # make setup installs it
    store = source["tmp"] / "store-submitted"
    command = [str(spark_bin("spark-submit")), "--master", "local[1]", "--jars", jar, entry]
    command += [*_run_args(source, store), "--seed", source["db"], "--once"]
    python_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PATH"] = f"{python_bin}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=240, check=False
    )
    # spark-submit puts the Python driver's stderr on its stdout
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Failed to get main class" not in done.stderr
    written = BootstrapStore(str(store))
    scn = written.current_snapshot()
    assert scn is not None
    assert f"bootstrap store {written.uri}: snapshot at SCN {scn}" in done.stdout
    truth = table_rows(source["conn"], SOURCE)
    assert len(truth) == 254 and snapshot_rows(written, SOURCE) == truth
    seeded = SeedRecords(written).seeded(SOURCE)
    assert seeded is not None
    # --jars brought the JDBC driver: no chunk fell back to the row path
    assert seeded.fallback_chunks == 0, seeded.fallback


@pytest.mark.timeout(300)
def test_sigterm_to_the_process_group_stops_bootstrap_run_cleanly(
    source: dict[str, Any],
) -> None:
    """systemd stops a service with SIGTERM to every process of it: the job's Spark JVM dies
    with it, so the job cannot fold one last time. It stops with no traceback (Python's or
    Py4J's), exit 0, and leaves no process behind."""
    store = source["tmp"] / "store-sigtermed"
    job = subprocess.Popen(
        [*SLUICE, *_run_args(source, store), "--fold-every", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        # a snapshot folded: Spark's JVM is up and the job is in its fold loop
        written = BootstrapStore(str(store))
        wait_for(
            lambda: job.poll() is not None or written.current_snapshot() is not None,
            180,
            "the job's first fold",
        )
        assert job.poll() is None, job.communicate()
        os.killpg(job.pid, signal.SIGTERM)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
    assert "Traceback" not in err and "py4j" not in err.lower(), err
    assert job.returncode == 0, err
    assert f"bootstrap store {written.uri}: snapshot at SCN" in out, out
    assert len(err.strip().splitlines()) <= 1, err  # at most one line says why
    # nothing of it is left running: the JVM and its Python workers are gone too
    wait_for(lambda: not _group_alive(job.pid), 30, "the job's processes to end")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
