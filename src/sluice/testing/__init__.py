"""Helpers for tests and demos that users need too: a private MariaDB, relays, consumers."""

from sluice.testing.consumers import RecordingConsumer, ReplicaConsumer, key_text
from sluice.testing.mariadb import MariaDBNotAvailable, PrivateMariaDB, free_port
from sluice.testing.relays import RelayProcess, RelayThread, ServiceThread
from sluice.testing.truth import table_rows

__all__ = [
    "MariaDBNotAvailable",
    "PrivateMariaDB",
    "RecordingConsumer",
    "RelayProcess",
    "RelayThread",
    "ReplicaConsumer",
    "ServiceThread",
    "free_port",
    "key_text",
    "table_rows",
]
