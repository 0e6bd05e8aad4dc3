"""``sluice demo`` runs green end to end (its own MariaDB, relay, Spark job, consumers, check)."""

from __future__ import annotations

from tests.integration.support import run_sluice


def test_demo_runs_green() -> None:
    result = run_sluice("demo", "--duration", "4", "--rate", "100", timeout=400)
    out = result.stdout + result.stderr[-3000:]
    assert result.returncode == 0, out
    assert "demo OK: every replica equals the source" in result.stdout, out
    assert result.stdout.count(": match") == 6, out  # the live and the late consumer
    assert "late consumer: read the snapshot" in result.stdout, out
