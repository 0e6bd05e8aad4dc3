"""Pin the public API so changes to it are deliberate."""

from __future__ import annotations

import sluice
import sluice.client
import sluice.relay
import sluice.schemas
import sluice.testing


def test_public_names() -> None:
    assert sluice.__all__ == [
        "BootstrapRequired",
        "CheckpointError",
        "ConfigError",
        "SluiceError",
        "__version__",
    ]
    assert sluice.client.__all__ == [
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
    assert sluice.relay.__all__ == ["Relay", "RelayConfig"]
    assert sluice.schemas.__all__ == [
        "KINDS",
        "Column",
        "RowCodec",
        "SchemaRegistry",
        "TableSchema",
    ]
    assert "PrivateMariaDB" in sluice.testing.__all__
