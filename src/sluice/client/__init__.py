"""The client library: pull windows from relays, call consumer code, keep the checkpoint."""

from sluice.client.checkpoints import CheckpointStore, FileCheckpointStore, MemoryCheckpointStore
from sluice.client.client import AsyncClient
from sluice.client.config import ClientConfig, RetryPolicy
from sluice.client.consumer import (
    BaseConsumer,
    Consumer,
    ConsumerFailed,
    JsonConsumer,
    RecordConsumer,
    RecordWindow,
)
from sluice.client.threaded import Client

__all__ = [
    "AsyncClient",
    "BaseConsumer",
    "CheckpointStore",
    "Client",
    "ClientConfig",
    "Consumer",
    "ConsumerFailed",
    "FileCheckpointStore",
    "JsonConsumer",
    "MemoryCheckpointStore",
    "RecordConsumer",
    "RecordWindow",
    "RetryPolicy",
]
