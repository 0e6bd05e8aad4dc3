"""Relay chaining: a relay whose source is other Sluice relays (``sluice://HOST:PORT``)."""
