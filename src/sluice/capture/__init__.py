"""Capture: read a source database's log in a thread and emit committed windows, through the
``CaptureSource`` seam (``open_capture`` picks the source kind by the URL's scheme)."""

from sluice.capture.source import (
    CapturedWindow,
    CaptureSettings,
    CaptureSource,
    CaptureStats,
    describe,
    known_schemes,
    open_capture,
    source_info,
)

__all__ = [
    "CaptureSettings",
    "CaptureSource",
    "CaptureStats",
    "CapturedWindow",
    "describe",
    "known_schemes",
    "open_capture",
    "source_info",
]
