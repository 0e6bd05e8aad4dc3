"""``sluice lake run``: a relay's tables MERGEd into Delta tables by Spark (real SparkSession,
Delta 4.4's runtime, a real MariaDB and relay), SCD1 and SCD2, across runs, a truncate, a
primary-key change, a new column, and a driver crash between Delta's commit and Spark's."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.testing import PrivateMariaDB, RelayThread
from tests.integration.support import (
    get_json,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
    workload_relay,
)
from tests.integration.workload import Workload, truncate_then_a_key_twice

DB = "laked"  # the running test's database (its fixture names it)
_ids = itertools.count()
TABLES = ("person", "orders")
READER = Path(__file__).with_name("lake_reader.py")
RUN_TIMEOUT = 900  # a JVM, Delta's first MERGE (~10-40 s on 2 busy cores), per table


@pytest.fixture
def relay_db(
    mariadb: PrivateMariaDB, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RelayThread, pymysql.Connection[Any], Workload]]:
    """A database of its own per test (one test alters and truncates its tables)."""
    global DB
    DB = f"laked{next(_ids)}"
    data = tmp_path_factory.mktemp("relay") / "data"
    with workload_relay(mariadb, DB, list(TABLES), data, seed=31, transactions=30) as made:
        yield made


def _truth(conn: pymysql.Connection[Any], table: str) -> set[tuple[Any, ...]]:
    conn.commit()  # a fresh snapshot of the table, not the session's last one
    columns = {"person": "id, name, balance, updated", "orders": "region, num, item, qty"}
    with conn.cursor() as cur:
        cur.execute(f"SELECT {columns[table]} FROM {table}")
        return {tuple(r) for r in cur.fetchall()}


def _mine(rows: list[dict[str, Any]], table: str) -> set[tuple[Any, ...]]:
    if table == "person":
        return {
            (r["id"], r["name"], None if r["balance"] is None else Decimal(str(r["balance"])),
             None if r["updated"] is None else dt.datetime.fromisoformat(r["updated"]))
            for r in rows
        }  # fmt: skip
    return {(r["region"], r["num"], r["item"], r["qty"]) for r in rows}


def _read(spec: list[dict[str, Any]]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(READER), json.dumps(spec)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class Lake:
    def __init__(self, root: Path, relay: str, mode: str) -> None:
        self.root, self.relay, self.mode = root, relay, mode
        self.template = str(root / mode / "{db}" / "{table}")

    def table(self, name: str) -> str:
        return self.template.format(db=DB, table=name)

    def run(self, *more: str) -> subprocess.CompletedProcess[str]:
        args = ["lake", "run", "--relay", self.relay, "--to", f"delta:{self.template}",
                "--checkpoint", str(self.root / f"{self.mode}-ckpt"), "--mode", self.mode,
                "--master", "local[2]", "--once", "--max-events-per-trigger", "400",
                *[a for t in TABLES for a in ("--source", f"{DB}.{t}")], *more]  # fmt: skip
        result = run_sluice(*args, timeout=RUN_TIMEOUT)
        assert result.returncode == 0, result.stderr[-3000:]
        return result


def _more_changes(conn: pymysql.Connection[Any], workload: Workload) -> None:
    """The workload again, then a truncate, a key changed twice in one transaction, a
    primary-key change, a delete, and a new column."""
    workload.run(10)
    truncate_then_a_key_twice(conn)
    with conn.cursor() as cur:
        cur.execute("UPDATE orders SET num = 900004 WHERE num = 900003")  # a new key
        cur.execute("SELECT MIN(id) FROM person")
        first = cur.fetchone()[0]  # type: ignore[index]
        cur.execute("DELETE FROM person WHERE id = %s", (first,))
        cur.execute("ALTER TABLE person ADD COLUMN nick VARCHAR(20)")
        cur.execute("UPDATE person SET nick = 'n' ORDER BY id LIMIT 3")
    conn.commit()


@pytest.mark.timeout(3600)
def test_scd1_and_scd2_equal_the_source_across_runs_and_a_crash(
    relay_db: tuple[RelayThread, pymysql.Connection[Any], Workload], tmp_path: Path
) -> None:
    relay, conn, workload = relay_db
    lakes = [Lake(tmp_path, relay.url, mode) for mode in ("scd1", "scd2")]
    for lake in lakes:
        lake.run()
    first_scn = int(get_json(relay.url + "/stats")["max_scn"])
    first = {t: _truth(conn, t) for t in TABLES}

    _more_changes(conn, workload)
    wait_relay_caught_up(relay.url, conn)
    for lake in lakes:
        lake.run()
    final = {t: _truth(conn, t) for t in TABLES}
    newest = 2**62
    spec = [
        {"label": f"{lake.mode}.{t}.{when}", "table": lake.table(t), "scn": scn}
        for lake in lakes for t in TABLES
        for when, scn in (("first", first_scn), ("now", newest))
    ]  # fmt: skip
    spec.append({"label": "scd2.orders.raw", "table": lakes[1].table("orders"), "raw": True})
    got = _read(spec)
    for lake in lakes:
        for t in TABLES:
            assert _mine(got[f"{lake.mode}.{t}.now"], t) == final[t], (lake.mode, t)
            # as of the SCN the first run reached: the table then (SCD1 by time travel at a
            # batch boundary, SCD2 from its versions)
            assert _mine(got[f"{lake.mode}.{t}.first"], t) == first[t], (lake.mode, t)
    # the new column reached the Delta tables, with its values
    nicks = [r.get("nick") for r in got["scd1.person.now"]]
    assert nicks.count("n") == 3 and "nick" in got["scd2.person.now"][0]
    # SCD2: one current version per key, every closed one ended by the next change's SCN
    raw = got["scd2.orders.raw"]
    current = [r for r in raw if r["__is_current"]]
    assert {(r["region"], r["num"]) for r in current} == {(o[0], o[1]) for o in final["orders"]}
    assert len(current) == len(final["orders"])
    closed = [r for r in raw if not r["__is_current"]]
    assert closed and all(r["__end_scn"] >= r["__start_scn"] for r in closed)
    # the key changed twice in one transaction is one version; its old key was closed
    assert [r["item"] for r in raw if r["num"] == 900001] == ["second"]
    moved = [r for r in raw if r["num"] in (900003, 900004)]
    assert sorted((r["num"], r["__is_current"]) for r in moved) == [(900003, False), (900004, True)]
    # each batch committed once, with its SCN, by this job's writer
    for lake in lakes:
        for t in TABLES:
            mine = [v for v in got["versions"][f"{lake.mode}.{t}.now"] if v[3] is not None]
            batches = [v[3] for v in mine]
            assert batches == sorted(set(batches)), (lake.mode, t, batches)
            assert {v[2] for v in mine} == {f"sluice-lake:lake:{DB}.{t}"}
            assert [v[1] for v in mine] == sorted(v[1] for v in mine)

    # the CLI: an SCD2 table as of the first run's SCN; an SCD1 table refuses an SCN inside a
    # batch (it never held that state)
    shown = run_sluice("lake", "as-of", "--table", lakes[1].table("person"), "--scn",
                       str(first_scn), "--master", "local[2]", timeout=RUN_TIMEOUT)  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-3000:]
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert _mine([{"updated": None, "balance": None, **r} for r in lines], "person") == first[
        "person"
    ]
    inside = [v for v in got["versions"]["scd1.orders.now"] if v[4] is not None and v[4] < v[1]]
    assert inside, got["versions"]["scd1.orders.now"]
    refused = run_sluice(
        "lake", "as-of", "--table", lakes[0].table("orders"), "--scn", str(inside[0][4]),
        "--master", "local[2]", timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert refused.returncode == 2 and "falls inside batch" in refused.stderr, refused.stderr

    # A driver that died after Delta committed a batch and before Spark recorded it: Spark
    # runs that batch again, and Delta's transaction identifiers make it a no-op.
    lake = lakes[0]
    commits = tmp_path / "scd1-ckpt" / f"{DB}.orders" / "commits"
    last = max(commits.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
    before = got["versions"]["scd1.orders.now"]
    lake.run()
    assert last.exists()  # Spark ran that batch again
    again = _read([{"label": "o", "table": lake.table("orders"), "scn": newest}])
    assert again["versions"]["o"] == before  # no new Delta version: the repeat was skipped
    assert _mine(again["o"], "orders") == final["orders"]


def test_lake_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    result = run_sluice(
        "lake", "run", "--relay", "http://127.0.0.1:9", "--source", "a.b", "--to",
        str(tmp_path / "t"), "--checkpoint", str(tmp_path / "c"),
    )  # fmt: skip
    assert result.returncode == 2 and "delta:PATH" in result.stderr
    result = run_sluice(
        "lake", "run", "--relay", "http://127.0.0.1:9", "--source", "a.b", "--source", "a.c",
        "--to", f"delta:{tmp_path}/t", "--checkpoint", str(tmp_path / "c"),
    )  # fmt: skip
    assert result.returncode == 2 and "{table}" in result.stderr
    result = run_sluice(
        "lake", "run", "--relay", "http://127.0.0.1:9", "--source", "a.b", "--to",
        f"delta:{tmp_path}/{{table}}", "--checkpoint", str(tmp_path / "c"), "--key", "a.b",
    )  # fmt: skip
    assert result.returncode == 2 and "DB.TABLE=COL" in result.stderr


def _delta_scns(table: str) -> list[int]:
    """The SCNs of the table's sluice commits, read from its Delta log (no JVM)."""
    scns = []
    log_dir = Path(table) / "_delta_log"
    for commit in sorted(log_dir.glob("*.json")) if log_dir.is_dir() else []:
        for line in commit.read_text().splitlines():
            info = json.loads(line).get("commitInfo") or {}
            meta = info.get("userMetadata")
            if meta:
                scns.append(int(json.loads(meta)["sluice.scn"]))
    return scns


def _start_job(lake: Lake, log: Path) -> subprocess.Popen[bytes]:
    args = ["lake", "run", "--relay", lake.relay, "--to", f"delta:{lake.template}",
            "--checkpoint", str(lake.root / f"{lake.mode}-ckpt"), "--mode", lake.mode,
            "--master", "local[2]", "--trigger-seconds", "1", "--max-events-per-trigger", "300",
            *[a for t in TABLES for a in ("--source", f"{DB}.{t}")]]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "sluice.cli.main", *args],
            stdout=out, stderr=out, start_new_session=True,  # its JVM in its process group
        )  # fmt: skip


def _kill(job: subprocess.Popen[bytes]) -> None:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait(60)


@pytest.mark.timeout(3600)
def test_scd2_through_two_sigkills_mid_stream_has_one_version_per_change(
    relay_db: tuple[RelayThread, pymysql.Connection[Any], Workload], tmp_path: Path
) -> None:
    relay, conn, workload = relay_db
    lake = Lake(tmp_path, relay.url, "scd2")
    log = tmp_path / "job.log"
    states: list[tuple[int, dict[str, set[tuple[Any, ...]]]]] = []
    job = _start_job(lake, log)
    try:
        for round in range(3):
            # the job is merging: kill it after its next Delta commit, mid-stream
            seen = len(_delta_scns(lake.table("person"))) + len(_delta_scns(lake.table("orders")))
            workload.run(6)
            states.append((wait_relay_caught_up(relay.url, conn),
                           {t: _truth(conn, t) for t in TABLES}))  # fmt: skip
            wait_for(
                lambda seen=seen: len(_delta_scns(lake.table("person")))
                + len(_delta_scns(lake.table("orders"))) > seen,
                RUN_TIMEOUT, "a Delta commit of the job",
            )  # fmt: skip
            if round < 2:
                _kill(job)
                job = _start_job(lake, log)
        with conn.cursor() as cur:  # one last transaction, to both tables: one SCN
            cur.execute("BEGIN")
            cur.execute("UPDATE person SET name = CONCAT(name, '!') ORDER BY id LIMIT 1")
            cur.execute("UPDATE orders SET qty = qty + 1 ORDER BY num LIMIT 1")
            cur.execute("COMMIT")
        wait_relay_caught_up(relay.url, conn)
        last = int(get_json(relay.url + "/stats")["max_scn"])
        wait_for(
            lambda: all(max(_delta_scns(lake.table(t)), default=0) >= last for t in TABLES),
            RUN_TIMEOUT, "the job to merge the last change",
        )  # fmt: skip
        states.append((last, {t: _truth(conn, t) for t in TABLES}))
    finally:
        job.send_signal(signal.SIGTERM)  # the sluice process: its batches finish, it stops
        try:
            status = job.wait(300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)  # whatever it left
    output = log.read_text(errors="replace")
    assert status == 0 and "Traceback" not in output, output[-3000:]
    spec = [{"label": f"{t}.{i}", "table": lake.table(t), "scn": scn}
            for i, (scn, _) in enumerate(states) for t in TABLES]  # fmt: skip
    spec += [{"label": f"{t}.raw", "table": lake.table(t), "raw": True} for t in TABLES]
    got = _read(spec)
    for i, (scn, truth) in enumerate(states):  # as of each recorded SCN: the source then
        for t in TABLES:
            assert _mine(got[f"{t}.{i}"], t) == truth[t], (t, scn)
    keys = {"person": ("id",), "orders": ("region", "num")}
    for t in TABLES:  # a batch run again after a kill would have added its versions twice
        starts = [(*(r[k] for k in keys[t]), r["__start_scn"]) for r in got[f"{t}.raw"]]
        twice = [s for s in set(starts) if starts.count(s) > 1]
        assert not twice, (t, twice[:5])
        batches = [v[3] for v in got["versions"][f"{t}.raw"] if v[3] is not None]
        assert batches == sorted(set(batches)), (t, batches)
