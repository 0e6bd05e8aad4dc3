"""Sinks: ``sluice sink --to URL`` delivers a relay's changes to a database replica, NATS
JetStream, Redis Streams, RabbitMQ or a webhook, exactly once wherever the target allows."""

from sluice.sink.config import SinkConfig, load_sink_config
from sluice.sink.sink import Sink, SinkFailed
from sluice.sink.target import Batch, Change, Target, TargetUnavailable

__all__ = [
    "Batch",
    "Change",
    "Sink",
    "SinkConfig",
    "SinkFailed",
    "Target",
    "TargetUnavailable",
    "load_sink_config",
]
