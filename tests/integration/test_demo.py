"""``sluice demo`` runs green end to end (its own MariaDB, relay, consumer and check)."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_green() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sluice.cli.main", "demo", "--duration", "4", "--rate", "100"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo OK: every replica equals the source" in result.stdout
    assert result.stdout.count(": match") == 6  # the live and the late (bootstrapped) consumer
    assert "late consumer: read the snapshot" in result.stdout
