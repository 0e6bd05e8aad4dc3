"""Windows too big for the event buffer's ring, each held in a file of its own beside it.

A transaction bigger than a capture part (``CaptureSettings.part_bytes``) reaches the relay in
parts; ``OpenWindow`` writes them to ``windows/open.tmp`` as they come, so neither capture nor
the relay ever holds it whole. At its commit the record's header (SCN, ``prev_scn``, count,
CRC) is written in front, the file is synced and renamed to ``windows/<SCN>.win``: then, and
only then, the ring gets its reference record (``EventBuffer.append_reference``). The file is
the very window record a big enough ring would hold, so ``/stream`` copies it out a chunk at a
time like any window, and consumers see the usual wire format.

Disk use is bounded by ``RelayConfig.window_files_bytes``: older windows are evicted from the
buffer to make room (their clients then bootstrap, as after any eviction), and a single window
bigger than the whole budget stops capture with an error naming the setting.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from sluice.core import wire
from sluice.errors import ConfigError, WindowTooLarge

log = logging.getLogger(__name__)

DIR = "windows"
OPEN = "open.tmp"
# Sub-windows of a held window (JSON and filtered streams, schema checks) hold about this much
SUB_WINDOW_BYTES = 1 << 20
_READ = 1 << 20


def file_name(scn: int) -> str:
    return f"{scn:020d}.win"


class WindowFiles:
    """The folder of held windows; one ``OpenWindow`` at a time is being written."""

    def __init__(self, data_dir: Path, limit: int) -> None:
        self.dir = data_dir / DIR
        self.limit = limit
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create {self.dir}: {exc}") from None

    def path(self, scn: int) -> Path:
        return self.dir / file_name(scn)

    def open_window(self) -> OpenWindow:
        return OpenWindow(self.dir / OPEN, self.limit)

    def delete(self, scns: list[int]) -> None:
        for scn in scns:
            self.path(scn).unlink(missing_ok=True)

    def tidy(self, held: dict[int, int]) -> list[int]:
        """After a restart: remove the open window of a transaction that never committed and
        files the buffer no longer refers to; returns the held SCNs whose file is missing or
        has the wrong length (``held``: SCN -> record length)."""
        (self.dir / OPEN).unlink(missing_ok=True)
        names = {file_name(scn): scn for scn in held}
        for path in self.dir.iterdir():
            if path.name not in names:
                log.info("removing %s: no window of the buffer refers to it", path)
                path.unlink(missing_ok=True)
        bad = []
        for scn, length in held.items():
            path = self.path(scn)
            if not path.is_file() or path.stat().st_size != length or not _head_ok(path, scn):
                bad.append(scn)
        return bad

    def read(self, scn: int, start: int, end: int) -> bytes:
        """Bytes ``start..end`` of the record of the window at ``scn``."""
        with open(self.path(scn), "rb") as f:
            return os.pread(f.fileno(), end - start, start)

    def sub_windows(self, scn: int, max_bytes: int = SUB_WINDOW_BYTES) -> Iterator[bytes]:
        """The held window at ``scn`` as window records of about ``max_bytes`` each, same SCN
        and header fields, its events in order: for code that decodes windows (JSON lines,
        filters, schema checks) without holding the whole one."""
        with open(self.path(scn), "rb") as f:
            head = f.read(wire.WINDOW_HEADER_SIZE)
            header = wire.read_window_header(head)
            events: list[bytes] = []
            size = 0
            for event in _events(f, header.n_events):
                events.append(event)
                size += len(event)
                if size >= max_bytes:
                    yield wire.encode_window(header.scn, header.prev_scn, header.ts_ms, events)
                    events, size = [], 0
            if events:
                yield wire.encode_window(header.scn, header.prev_scn, header.ts_ms, events)


def _head_ok(path: Path, scn: int) -> bool:
    try:
        with open(path, "rb") as f:
            return wire.read_window_header(f.read(wire.WINDOW_HEADER_SIZE)).scn == scn
    except (OSError, ValueError):
        return False


def _events(f: BinaryIO, count: int) -> Iterator[bytes]:
    """``count`` encoded events read from a file positioned after a window header."""
    read = f.read
    buf = b""
    pos = 0
    for _ in range(count):
        if len(buf) - pos < wire.EVENT_HEADER_SIZE:
            buf = buf[pos:] + read(_READ)
            pos = 0
        (size,) = wire.EVENT_HEADER.unpack_from(buf, pos)[:1]
        while len(buf) - pos < size:
            more = read(max(_READ, size))
            if not more:
                raise ValueError("held window file ends inside an event")
            buf = buf[pos:] + more
            pos = 0
        yield buf[pos : pos + size]
        pos += size


class OpenWindow:
    """The file of one window being received in parts; ``finish`` makes it whole."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.n_events = 0
        self.body_len = 0
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.pwrite(self._fd, b"\0" * wire.WINDOW_HEADER_SIZE, 0)

    @property
    def length(self) -> int:
        """The record's length once finished."""
        return wire.WINDOW_HEADER_SIZE + self.body_len + len(wire.padding(self.body_len))

    def add(self, events: list[bytes]) -> None:
        data = b"".join(events)
        if self.length + len(data) > self.limit:
            raise WindowTooLarge(
                f"a transaction of more than {self.length + len(data):,} bytes of events is "
                f"bigger than the relay may keep on disk for windows outside its buffer "
                f"(window_files_bytes = {self.limit:,}); raise --window-files-bytes (and "
                "make sure its disk has the room)"
            )
        os.pwrite(self._fd, data, wire.WINDOW_HEADER_SIZE + self.body_len)
        self.body_len += len(data)
        self.n_events += len(events)

    def finish(self, scn: int, prev_scn: int, ts_ms: int, dest: Path) -> int:
        """Write the header (its CRC read back from the body), sync, and rename to ``dest``;
        returns the record's length."""
        pad = wire.padding(self.body_len)
        os.pwrite(self._fd, pad, wire.WINDOW_HEADER_SIZE + self.body_len)
        head = wire.window_head(scn, prev_scn, ts_ms, self.n_events, self.body_len)
        crc = wire.crc_start(head)
        pos, end = wire.WINDOW_HEADER_SIZE, self.length
        while pos < end:
            piece = os.pread(self._fd, min(_READ * 4, end - pos), pos)
            crc = zlib.crc32(piece, crc)
            pos += len(piece)
        os.pwrite(self._fd, head + crc.to_bytes(4, "little"), 0)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self.path.replace(dest)
        _sync_dir(dest.parent)
        return end

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.path.unlink(missing_ok=True)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
