"""The shipped Declarative Pipelines example (examples/pipelines), run by ``spark-pipelines``
against a real relay: the streaming table holds each relay event once across runs, the
materialized view equals the source tables, and the AUTO CDC flows resolve up to MERGE."""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pyspark
import pytest

from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread, key_text, table_rows
from tests.integration.support import (
    consume,
    wait_relay_caught_up,
    workload_relay,
)
from tests.integration.workload import Workload, truncate_then_a_key_twice

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipelines"
SPARK_PIPELINES = Path(pyspark.__file__).parent / "bin" / "spark-pipelines"
SOURCES = [f"piped.{t}" for t in ("alltypes", "person", "orders")]
RUN_TIMEOUT = 600  # one run: a Connect server start (~20-40 s) and two flows, on 2 busy cores

Event = tuple[int, str, str, str]  # scn, source, key_text, op


@pytest.fixture(scope="module")
def relay_db(
    mariadb: PrivateMariaDB, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RelayThread, pymysql.Connection[Any], Workload]]:
    data = tmp_path_factory.mktemp("relay") / "data"
    tables = [s.split(".", 1)[1] for s in SOURCES]
    with workload_relay(mariadb, "piped", tables, data, seed=27, transactions=30) as made:
        yield made


class Pipeline:
    """A copy of the example with its own spec, storage, warehouse and metastore under
    ``root``; ``run()`` runs ``spark-pipelines`` on it as a separate process."""

    def __init__(self, root: Path, relay_url: str, **configuration: str) -> None:
        self.root = root
        self.project = root / "pipeline"
        self.warehouse = root / "warehouse"
        self.workdir = root / "work"  # the Hive metastore (Derby) is made in the cwd
        self.workdir.mkdir(parents=True)
        shutil.copytree(EXAMPLE, self.project, ignore=shutil.ignore_patterns("__pycache__"))
        self._write_spec(relay_url, configuration)
        self.runs = 0

    def _write_spec(self, relay_url: str, configuration: dict[str, str]) -> None:
        """The shipped spec with this copy's storage and relay (written as JSON, which is
        YAML). A busy machine can make a Python worker miss Spark's fixed 10 s to connect
        back; SDP retries the flow then, so allow it a few more retries than its default 2."""
        spec_path = self.project / "spark-pipeline.yml"
        yaml: Any = importlib.import_module("yaml")  # PyYAML (pyspark's pipelines need it)
        spec = yaml.safe_load(spec_path.read_text())
        spec["storage"] = (self.root / "storage").as_uri()
        spec["configuration"] = {
            "sluice.relay": relay_url,
            "spark.sql.pipelines.maxFlowRetryAttempts": "5",
            **configuration,
        }
        spec_path.write_text(json.dumps(spec, indent=2))

    def run(self) -> tuple[int, str]:
        """(exit status, output) of one ``spark-pipelines run``."""
        self.runs += 1
        log = self.root / f"run-{self.runs}.log"
        command = [
            str(SPARK_PIPELINES),
            # the catalog must outlive a run (the default one is in memory: a second run
            # finds the tables' folders but not the tables, and fails); static settings
            # go on the command line, never in the spec's configuration
            "--conf",
            "spark.sql.catalogImplementation=hive",
            "--conf",
            f"spark.sql.warehouse.dir={self.warehouse.as_uri()}",
            "--conf",
            "spark.ui.enabled=false",
            "run",
            "--spec",
            str(self.project / "spark-pipeline.yml"),
        ]
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
        with log.open("w") as out:
            status = _run_group(command, self.workdir, env, out)
        return status, log.read_text(errors="replace")

    def run_ok(self) -> None:
        status, output = self.run()
        assert status == 0 and "Run is COMPLETED." in output, _tail(output)

    def table(self, name: str) -> Path:
        return self.warehouse / name


def _run_group(command: list[str], cwd: Path, env: dict[str, str], out: Any) -> int:
    """Run ``command`` in its own process group (the launcher, the JVM and the Python CLI
    under it), killed whole if it outlives ``RUN_TIMEOUT``."""
    proc = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        return proc.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def _tail(output: str, lines: int = 40) -> str:
    """The end of a run's output without JVM stack frames."""
    kept = [line for line in output.splitlines() if not line.lstrip().startswith("at ")]
    return "\n".join(kept[-lines:])


def _relay_events(url: str) -> Counter[Event]:
    recorder = RecordingConsumer()
    consume(url, recorder)
    return Counter((e.scn, e.source, key_text(e.key), e.op) for e in recorder.events)


def _table_events(spark: Any, path: Path) -> Counter[Event]:
    # read at the root: Spark follows the file sink's _spark_metadata (a retried batch can
    # leave files of a failed attempt that are no part of the table)
    rows = spark.read.parquet(str(path)).select("scn", "source", "key", "op").collect()
    return Counter(
        (
            r["scn"],
            r["source"],
            key_text(None if r["key"] is None else json.loads(r["key"])),
            r["op"],
        )
        for r in rows
    )


def _view_state(spark: Any, path: Path) -> dict[str, dict[str, Any]]:
    """``{source: {key_text: row}}`` of the materialized view; a key twice fails."""
    state: dict[str, dict[str, Any]] = {}
    rows = spark.read.parquet(str(path)).select("source", "key", "row").collect()
    for r in rows:
        key = key_text(json.loads(r["key"]))
        rows_of = state.setdefault(r["source"], {})
        assert key not in rows_of, f"{r['source']} {key}: twice in the view"
        rows_of[key] = json.loads(r["row"])
    return state


def _assert_state(state: dict[str, dict[str, Any]], conn: pymysql.Connection[Any]) -> None:
    """The view holds each source table's current rows, no more, no less."""
    assert set(state) <= set(SOURCES), f"unknown sources in the view: {set(state) - set(SOURCES)}"
    for source in SOURCES:
        truth, mine = table_rows(conn, source), state.get(source, {})
        missing = sorted(set(truth) - set(mine))[:5]
        extra = sorted(set(mine) - set(truth))[:5]
        assert not missing and not extra, f"{source}: missing {missing}, extra {extra}"
        changed = [k for k, row in truth.items() if mine[k] != row][:3]
        assert not changed, f"{source}: rows differ: " + "; ".join(
            f"{k}: view {mine[k]} != table {truth[k]}" for k in changed
        )


def _more_changes(conn: pymysql.Connection[Any], workload: Workload) -> None:
    """More of the workload, then what the fold must get right: a TRUNCATE (the view must
    drop every older row of ``orders``), and keys changed twice in one transaction (one SCN:
    the event's order in its window decides)."""
    workload.run(10)
    truncate_then_a_key_twice(conn)


@pytest.mark.timeout(1800)
def test_changes_table_and_current_state_across_runs(
    relay_db: tuple[RelayThread, pymysql.Connection[Any], Workload], tmp_path: Path, spark: Any
) -> None:
    relay, conn, workload = relay_db
    pipeline = Pipeline(tmp_path, relay.url)

    pipeline.run_ok()
    first = _relay_events(relay.url)
    assert _table_events(spark, pipeline.table("changes")) == first
    _assert_state(_view_state(spark, pipeline.table("current_state")), conn)
    # AUTO CDC is off by default: its targets were never made
    assert not pipeline.table("current_scd1").exists()
    assert not pipeline.table("history_scd2").exists()

    _more_changes(conn, workload)
    wait_relay_caught_up(relay.url, conn)
    expected = _relay_events(relay.url)
    # the premises of this run: new events, a truncate among them, a key twice in one SCN
    assert sum(expected.values()) > sum(first.values())
    assert any(op == "t" for _scn, _source, _key, op in expected - first)
    per_scn_key = Counter((scn, source, key) for scn, source, key, _op in expected.elements())
    assert max(per_scn_key.values()) >= 2

    pipeline.run_ok()  # from its checkpoint: only what the relay got since the first run
    assert _table_events(spark, pipeline.table("changes")) == expected
    _assert_state(_view_state(spark, pipeline.table("current_state")), conn)


@pytest.mark.timeout(900)
def test_auto_cdc_flows_need_a_merge_capable_catalog(
    relay_db: tuple[RelayThread, pymysql.Connection[Any], Workload], tmp_path: Path
) -> None:
    """With ``sluice.autoCdc`` the AUTO CDC flows are defined and resolved (a wrong column in
    their mapping fails earlier, with AUTOCDC_COLUMNS_NOT_FOUND_IN_SCHEMA); creating their
    targets then fails, as the default catalog's Parquet tables cannot MERGE."""
    relay, _conn, _workload = relay_db
    pipeline = Pipeline(tmp_path, relay.url, **{"sluice.autoCdc": "true"})
    status, output = pipeline.run()
    assert status != 0, _tail(output)
    merge = re.search(
        r"\[AUTOCDC_TARGET_DOES_NOT_SUPPORT_MERGE\] Cannot start AutoCDC flow: the target "
        r"table `spark_catalog`\.`default`\.`(current_scd1|history_scd2)` \(format: parquet\)",
        output,
    )
    assert merge, _tail(output)
