"""Pure parts of what the console shows: rates from a counter, the relay's source summary and
links, the followers list, and a seed's progress read from its records."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from sluice.bootstrap.seed.records import ChunkDone, SeedRecords
from sluice.bootstrap.store import BootstrapStore
from sluice.core.rates import CounterHistory
from sluice.relay.overview import Followers, links, source_summary


def test_rates_are_per_second_per_step_and_zero_where_nothing_changed() -> None:
    history = CounterHistory(step_s=5, keep_s=60)
    history.note(100.0, 0, mark=1)
    history.note(106.0, 50, mark=2)  # bucket 21: +50 in 5 s
    history.note(108.0, 100, mark=3)  # same bucket: the last value counts
    history.note(121.0, 150, mark=4)  # bucket 24: +50; buckets 22 and 23 had no change
    assert history.rates(125.0) == [(105, 20.0), (110, 0.0), (115, 0.0), (120, 10.0)]
    assert history.rates(121.0)[-1] == (115, 0.0)  # the step under way is not shown yet
    assert history.since(121.0, 10) == (3, 50, 121.0 - 110)
    assert history.since(121.0, 100) is None


def test_rates_forget_what_is_older_than_they_keep() -> None:
    history = CounterHistory(step_s=5, keep_s=20)
    for t in range(0, 100, 5):
        history.note(float(t), t)
    assert [t for t, _ in history.rates(100.0)] == [80, 85, 90, 95]


def test_a_counter_that_restarts_never_shows_a_negative_rate() -> None:
    history = CounterHistory(step_s=1, keep_s=10)
    history.note(0.0, 100)
    history.note(1.0, 3)  # a restart of the counting process
    assert history.rates(2.0) == [(1, 0.0)]


def test_the_source_summary_has_no_password_and_names_the_kind() -> None:
    summary = source_summary("postgresql://repl:s3cret@db:5432/app?slot=s")
    assert "s3cret" not in summary["address"] and summary["address"].startswith("repl:***@db")
    assert summary["kind"] == "postgresql"
    sqlite = source_summary("query+sqlite:////data/app.db")
    assert sqlite == {"kind": "query+sqlite", "address": "/data/app.db"}


def test_links_come_from_the_settings_and_the_sinks_of_the_same_file() -> None:
    got = links({"lake": "http://boot:7080/ui"}, [{"name": "pg", "port": 7100}, {"port": 0}])
    assert got == [
        {"name": "lake", "console": "http://boot:7080/ui"},
        {"name": "pg", "console": "http://127.0.0.1:7100/ui"},
    ]


class _Peer:
    """A transport that came from ``host``."""

    def __init__(self, host: str) -> None:
        self.host = host

    def get_extra_info(self, name: str, default: object = None) -> object:
        return (self.host, 40000) if name == "peername" else default


def test_followers_are_those_that_name_themselves_and_a_wildcard_host_is_their_address() -> None:
    followers = Followers()
    anonymous = make_mocked_request("GET", "/stream")
    assert followers.enter(anonymous) is None
    named = make_mocked_request(
        "GET",
        "/stream",
        headers={"X-Sluice-Client": "pg-replica", "X-Sluice-Console": "http://0.0.0.0:7100/ui"},
        transport=_Peer("10.0.0.5"),
    )
    follower = followers.enter(named)
    assert follower is not None
    listed = followers.to_json()
    assert [f["name"] for f in listed] == ["pg-replica"] and listed[0]["connected"]
    assert listed[0]["console"] == "http://10.0.0.5:7100/ui"
    assert listed[0]["address"] == "10.0.0.5"
    followers.leave(follower)
    assert not followers.to_json()[0]["connected"]


def test_a_console_url_that_is_not_http_is_not_listed() -> None:
    followers = Followers()
    bad = make_mocked_request(
        "GET", "/stream", headers={"X-Sluice-Client": "x", "X-Sluice-Console": "javascript:1"}
    )
    followers.enter(bad)
    assert followers.to_json()[0]["console"] is None


@pytest.fixture
def store(tmp_path: Path) -> BootstrapStore:
    return BootstrapStore(str(tmp_path / "store"))


def _done(folder: Path, index: int, finished_at: float, rows: int = 10) -> None:
    body = {"scn": 5, "rows": rows, "finished_at": finished_at}
    (folder / f"_done-{index:05d}.json").write_text(json.dumps(body))


def test_a_seed_in_progress_shows_its_chunks_rows_and_an_eta(store: BootstrapStore) -> None:
    records = SeedRecords(store)
    folder = Path(store.path(*records.gen_dir("db.t", 1)))
    folder.mkdir(parents=True)
    assert records.in_progress("db.t") == {"generation": 1, "state": "planning"}
    plan: dict[str, Any] = {
        "schema_version": 1,
        "chunk_rows": 10,
        "where": None,
        "ranges": [{}] * 4,
    }
    now = time.time()
    (folder / "_plan.json").write_text(json.dumps({**plan, "created_at": now - 10}))
    progress = records.in_progress("db.t")
    assert progress is not None
    assert (progress["chunks"], progress["chunks_done"], progress["eta_s"]) == (4, 0, None)
    _done(folder, 0, now - 2)
    seen: dict[tuple[str, int], dict[int, ChunkDone]] = {}
    progress = records.in_progress("db.t", seen)
    assert progress is not None and progress["chunks_done"] == 1 and progress["rows"] == 10
    assert list(seen[("db.t", 1)]) == [0]  # read once: a later call takes it from here
    assert progress["eta_s"] is None  # one chunk shows no pace yet: "after the first chunks"
    _done(folder, 1, now - 1)
    progress = records.in_progress("db.t", seen)
    assert progress is not None and progress["eta_s"] is not None and progress["eta_s"] > 0


def test_the_eta_counts_from_the_first_chunk_not_from_the_jobs_start(
    store: BootstrapStore,
) -> None:
    """Spark took 60 s to start and the first chunk's read; then a chunk a second: 98 chunks
    left are ~98 s, not the ~50 min that counting from the job's start gives."""
    records = SeedRecords(store)
    folder = Path(store.path(*records.gen_dir("db.t", 1)))
    folder.mkdir(parents=True)
    now = time.time()
    plan: dict[str, Any] = {
        "schema_version": 1,
        "chunk_rows": 10,
        "where": None,
        "ranges": [{}] * 100,
    }
    (folder / "_plan.json").write_text(json.dumps({**plan, "created_at": now - 61}))
    _done(folder, 0, now - 1, rows=1000)
    _done(folder, 1, now, rows=1000)
    progress = records.in_progress("db.t")
    assert progress is not None and progress["eta_s"] is not None
    assert 90 < progress["eta_s"] < 110
    assert progress["rows_per_s"] is not None and progress["rows_per_s"] > 500  # not 2000/61


def test_a_resumed_seed_counts_its_pace_from_its_own_run(store: BootstrapStore) -> None:
    """Chunks an earlier run did took none of this run's time: the ETA and the rate count
    from this run's chunks."""
    records = SeedRecords(store)
    folder = Path(store.path(*records.gen_dir("db.t", 1)))
    folder.mkdir(parents=True)
    plan: dict[str, Any] = {
        "schema_version": 1,
        "chunk_rows": 10,
        "where": None,
        "ranges": [{}] * 10,
    }
    (folder / "_plan.json").write_text(json.dumps({**plan, "created_at": time.time() - 3600}))
    for index in range(5):  # done an hour ago, by a run that was killed
        _done(folder, index, time.time() - 3600 + index * 600)
    old = records.in_progress("db.t")
    assert old is not None and old["eta_s"] is not None and old["eta_s"] > 3000
    records.mark_run("db.t", 1)
    progress = records.in_progress("db.t")
    assert progress is not None and progress["eta_s"] is None  # nothing done by this run yet
    assert progress["rows"] == 50 and progress["rows_per_s"] is None
    now = time.time()
    _done(folder, 5, now + 1)
    _done(folder, 6, now + 2)
    progress = records.in_progress("db.t")
    assert progress is not None and progress["eta_s"] is not None
    assert progress["eta_s"] < 600  # 3 chunks left at this run's pace, not the hour's
    assert progress["rows_per_s"] is not None and progress["rows_per_s"] > 0
