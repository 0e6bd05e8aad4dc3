"""Capture: read a source database's log in a thread and emit committed windows."""

from sluice.capture.mysql import CapturedWindow, CaptureStats, MySQLCapture
from sluice.capture.url import SourceUrl, parse_source_url

__all__ = ["CaptureStats", "CapturedWindow", "MySQLCapture", "SourceUrl", "parse_source_url"]
