"""The relay: captures a source's log into a circular event buffer and serves it over HTTP."""

from sluice.relay.config import RelayConfig
from sluice.relay.relay import Relay

__all__ = ["Relay", "RelayConfig"]
