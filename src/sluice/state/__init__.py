"""Current state by key: a store of each key's current row, kept from the relays' windows,
answering lookups (``sluice state serve``)."""

from sluice.state.server import StateServer
from sluice.state.service import StateConfig, StateService
from sluice.state.store import StateReader, StateStore, key_text

__all__ = ["StateConfig", "StateReader", "StateServer", "StateService", "StateStore", "key_text"]
