"""The fold's health, as the bootstrap job records it and the bootstrap server reports it.

The job folds every ``fold_every_s``; a fold that fails is retried at the next interval, and
meanwhile the snapshots clients bootstrap from go stale. ``FoldStatus`` writes what happened
to the store (``fold-status.json``, written atomically: whether the job runs, the last
success and the snapshot SCN it left, failures in a row, the last error), so the server, a
separate process, can say so in ``/stats``, ``/metrics`` and ``/healthz``.

The server calls the folds unhealthy (``fold_problem``) after ``UNHEALTHY_FAILURES`` failures
in a row, or when a running job has not folded successfully for ``stale_after_s`` (a fold
that hangs, or a job killed without a word, never writes a failure).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sluice.bootstrap.store import FOLD_STATUS, BootstrapStore
from sluice.errors import first_line

log = logging.getLogger(__name__)

# Failures in a row after which the server's /healthz answers 503.
UNHEALTHY_FAILURES = 3
# A running job whose last successful fold (or its start) is older than this many fold
# intervals, and at least STALE_MIN_S, is unhealthy too.
STALE_FOLDS = 10
STALE_MIN_S = 900.0


def stale_after_s(every_s: float) -> float:
    """How long a running job may go without a successful fold before it is unhealthy."""
    return max(STALE_FOLDS * every_s, STALE_MIN_S)


class FoldStatus:
    """The job's side: one per job, written when its fold loop starts, after every fold, and
    when it stops."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.failures = 0
        self.error: str | None = None
        self.started_at = time.time()
        self.ok_at: float | None = None
        self.ok_scn: int | None = None

    def started(self, store: BootstrapStore) -> dict[str, Any]:
        self.started_at = time.time()
        return self._write(store, running=True)

    def worked(self, store: BootstrapStore) -> dict[str, Any]:
        if self.failures:
            log.info("fold works again after %d failures in a row", self.failures)
        self.failures, self.error, self.ok_at = 0, None, time.time()
        self.ok_scn = store.current_snapshot()
        return self._write(store, running=True)

    def failed(self, store: BootstrapStore, exc: BaseException) -> dict[str, Any]:
        self.failures += 1
        self.error = first_line(exc) or repr(exc)
        return self._write(store, running=True)

    def stopped(self, store: BootstrapStore) -> dict[str, Any]:
        return self._write(store, running=False)

    def _write(self, store: BootstrapStore, *, running: bool) -> dict[str, Any]:
        status = {
            "running": running,
            "started_at": self.started_at,
            "every_s": self.every_s,
            "stale_after_s": stale_after_s(self.every_s),
            "ok_at": self.ok_at,
            "ok_scn": self.ok_scn,
            "failures": self.failures,
            "error": self.error,
            "at": time.time(),
            "snapshot_scn": store.current_snapshot(),
        }
        try:
            store.write_json(status, FOLD_STATUS)
        except OSError as exc:  # the store itself failing is what the fold says already
            log.warning("cannot record the fold's status in %s: %s", store.uri, exc)
        return status


def fold_problem(status: dict[str, Any] | None, now: float | None = None) -> dict[str, Any] | None:
    """Why the server's ``/healthz`` is not 200 as far as folds go, or None (also None when
    no job ever recorded a fold: a store seeded and folded by hand is not a failing job)."""
    if not status:
        return None
    failures = int(status.get("failures") or 0)
    newest = status.get("snapshot_scn")
    if failures >= UNHEALTHY_FAILURES:
        return {
            "status": "folds failing",
            "failures": failures,
            "error": f"the last {failures} folds failed, so snapshots are going stale (the "
            f"newest is at SCN {newest}): {status.get('error')}",
        }
    since = status.get("ok_at") or status.get("started_at")
    limit = float(status.get("stale_after_s") or STALE_MIN_S)
    if not status.get("running") or since is None:
        return None
    age = (time.time() if now is None else now) - float(since)
    if age <= limit:
        return None
    what = "succeeded" if status.get("ok_at") else "succeeded since the job started"
    last = f"; the last error: {status['error']}" if status.get("error") else ""
    return {
        "status": "folds stale",
        "failures": failures,
        "age_s": round(age),
        "error": f"no fold has {what} for {age:.0f} s (the limit is {limit:.0f} s), so "
        f"snapshots are going stale (the newest is at SCN {newest}): is `sluice bootstrap "
        f"run` alive and its fold not stuck?{last}",
    }
