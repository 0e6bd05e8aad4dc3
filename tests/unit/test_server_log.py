"""``web.SERVER_LOG``: its level follows the loggers above it whenever they change."""

from __future__ import annotations

import logging

from sluice.web import SERVER_LOG


def test_the_server_log_sees_a_level_set_after_it_was_asked() -> None:
    """A logger made outside ``getLogger`` kept the answer it cached first: after a WARNING
    root asked once, a later INFO root still dropped its INFO lines (a full-suite flake)."""
    root = logging.getLogger()
    before = root.level
    try:
        root.setLevel(logging.WARNING)
        assert not SERVER_LOG.isEnabledFor(logging.INFO)
        root.setLevel(logging.INFO)
        assert SERVER_LOG.isEnabledFor(logging.INFO)
    finally:
        root.setLevel(before)
