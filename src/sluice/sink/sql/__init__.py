"""Database replicas: PostgreSQL, MariaDB/MySQL and SQLite targets, exactly once (each window
and the sink's checkpoint commit in one target transaction)."""

from __future__ import annotations

from sluice.sink.config import SinkConfig
from sluice.sink.sql.target import SqlTarget


def open_target(config: SinkConfig) -> SqlTarget:
    return SqlTarget(config)


__all__ = ["SqlTarget", "open_target"]
