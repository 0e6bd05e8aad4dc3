"""``sluice demo`` runs green end to end (its own database, relay, Spark job with a seed,
consumers, check), for each source kind."""

from __future__ import annotations

import pytest

from tests.integration.support import run_sluice


@pytest.mark.parametrize("source", ["mariadb", "postgresql"])
def test_demo_runs_green(source: str) -> None:
    result = run_sluice("demo", "--source", source, "--duration", "4", "--rate", "100", timeout=400)
    out = result.stdout + result.stderr[-3000:]
    assert result.returncode == 0, out
    assert "demo OK: every replica equals the source" in result.stdout, out
    assert result.stdout.count(": match") == 6, out  # the live and the late consumer
    assert "late consumer: read the snapshot" in result.stdout, out
    assert ("PostgreSQL started" in result.stdout) == (source == "postgresql"), out
