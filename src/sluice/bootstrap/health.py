"""The fold's health, as the bootstrap job records it and the bootstrap server reports it.

The job folds every ``fold_every_s``; a fold that fails is retried at the next interval, and
meanwhile the snapshots clients bootstrap from go stale. ``FoldStatus`` writes what happened
to the store (``fold-status.json``: the last success, failures in a row, the last error), so
the server, a separate process, can say so in ``/stats``, ``/metrics`` and ``/healthz``.
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


class FoldStatus:
    """The job's side: one per job, written after every fold of its loop."""

    def __init__(self) -> None:
        self.failures = 0
        self.ok_at: float | None = None

    def worked(self, store: BootstrapStore) -> dict[str, Any]:
        self.failures, self.ok_at = 0, time.time()
        return self._write(store, None)

    def failed(self, store: BootstrapStore, exc: BaseException) -> dict[str, Any]:
        self.failures += 1
        return self._write(store, first_line(exc) or repr(exc))

    def _write(self, store: BootstrapStore, error: str | None) -> dict[str, Any]:
        status = {
            "ok_at": self.ok_at,
            "failures": self.failures,
            "error": error,
            "at": time.time(),
            "snapshot_scn": store.current_snapshot(),
        }
        try:
            store.write_json(status, FOLD_STATUS)
        except OSError as exc:  # the store itself failing is what the fold says already
            log.warning("cannot record the fold's status in %s: %s", store.uri, exc)
        return status


def fold_problem(status: dict[str, Any] | None) -> dict[str, Any] | None:
    """Why the server's ``/healthz`` is not 200 as far as folds go, or None."""
    if not status or int(status.get("failures") or 0) < UNHEALTHY_FAILURES:
        return None
    return {
        "status": "folds failing",
        "failures": status["failures"],
        "error": f"the last {status['failures']} folds failed, so snapshots are going stale "
        f"(the newest is at SCN {status.get('snapshot_scn')}): {status.get('error')}",
    }
