"""A flood of one failure is one log line per interval, with a count of the repeats."""

from __future__ import annotations

import logging

from sluice.web import RepeatedFailures


def _record(msg: str, level: int = logging.ERROR) -> logging.LogRecord:
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        import sys

        return logging.LogRecord("asyncio", level, __file__, 1, msg, None, sys.exc_info())


def test_repeats_are_counted_not_logged() -> None:
    flood = RepeatedFailures(interval_s=60)
    kept = [
        r
        for r in (_record("socket.accept() out of system resource") for _ in range(500))
        if flood.filter(r)
    ]
    assert len(kept) == 1  # one line (with its traceback) for 500 failures
    other = _record("another failure")
    assert flood.filter(other)  # a different failure still shows
    assert flood.filter(_record("debug detail", logging.DEBUG))


def test_after_the_interval_the_count_is_reported() -> None:
    flood = RepeatedFailures(interval_s=0)
    assert flood.filter(_record("x"))
    again = _record("x")
    flood._seen["asyncio:x"] = (0.0, 5)  # five seen in the last interval
    assert flood.filter(again) and "and 4 more like it" in str(again.msg)
