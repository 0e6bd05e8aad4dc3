"""Sluice: change data capture for Python (relay, client, schema registry)."""

from sluice.errors import BootstrapRequired, CheckpointError, ConfigError, SluiceError

__version__ = "0.1.0"
__all__ = ["BootstrapRequired", "CheckpointError", "ConfigError", "SluiceError", "__version__"]
