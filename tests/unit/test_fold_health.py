"""The bootstrap job's fold status (bootstrap/health.py): what it records, when it is unhealthy."""

from __future__ import annotations

from pathlib import Path

from sluice.bootstrap.health import (
    STALE_MIN_S,
    UNHEALTHY_FAILURES,
    FoldStatus,
    fold_problem,
    stale_after_s,
)
from sluice.bootstrap.store import FOLD_STATUS, BootstrapStore
from sluice.errors import SourceError


def test_failures_in_a_row_are_recorded_and_a_success_clears_them(tmp_path: Path) -> None:
    store = BootstrapStore(str(tmp_path))
    status = FoldStatus(every_s=30)
    status.started(store)
    assert fold_problem(store.fold_status()) is None
    for n in range(1, UNHEALTHY_FAILURES + 1):
        status.failed(store, SourceError("footer is too large\nstack..."))
        recorded = store.fold_status()
        assert recorded is not None
        assert (recorded["failures"], recorded["error"]) == (n, "footer is too large")
    problem = fold_problem(store.fold_status())
    assert problem is not None and problem["status"] == "folds failing"
    assert "snapshots are going stale" in problem["error"]
    assert "footer is too large" in problem["error"]
    status.worked(store)
    recorded = store.fold_status()
    assert recorded is not None and recorded["failures"] == 0 and recorded["ok_at"]
    assert fold_problem(recorded) is None
    assert not list(tmp_path.glob("*.tmp"))  # written atomically (temp, then moved)
    assert (tmp_path / FOLD_STATUS).exists()


def test_a_running_job_without_a_success_for_too_long_is_stale(tmp_path: Path) -> None:
    store = BootstrapStore(str(tmp_path))
    status = FoldStatus(every_s=120)
    recorded = status.started(store)
    limit = stale_after_s(120)
    assert limit == max(1200, STALE_MIN_S) and recorded["stale_after_s"] == limit
    start = recorded["started_at"]
    assert fold_problem(recorded, now=start + limit - 1) is None
    problem = fold_problem(recorded, now=start + limit + 5)
    assert problem is not None and problem["status"] == "folds stale"
    assert "no fold has succeeded since the job started" in problem["error"]
    worked = status.worked(store)
    assert fold_problem(worked, now=worked["ok_at"] + limit - 1) is None
    problem = fold_problem(worked, now=worked["ok_at"] + limit + 1)
    assert problem is not None and "no fold has succeeded for" in problem["error"]
    # a job stopped cleanly is not failing: nothing folds, and the operator knows why
    stopped = status.stopped(store)
    assert fold_problem(stopped, now=worked["ok_at"] + 10 * limit) is None


def test_no_status_is_healthy() -> None:
    assert fold_problem(None) is None
    assert fold_problem({}) is None
