"""The event buffer's file: a memory-mapped circular buffer plus the persisted max SCN."""

from __future__ import annotations

import json
import logging
import mmap
import os
import threading
from pathlib import Path

from sluice.core.buffer import EventBuffer
from sluice.errors import ConfigError
from sluice.files import write_atomically

log = logging.getLogger(__name__)

BUFFER_FILE = "events.buf"
STATE_FILE = "relay-state.json"


class BufferStore:
    """Owns the mmap; ``buffer`` is the pure layout on top of it."""

    def __init__(self, data_dir: Path, size: int) -> None:
        self.data_dir = data_dir
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the data dir {data_dir}: {exc}") from None
        for name in (STATE_FILE, BUFFER_FILE):
            if (data_dir / name).exists() and not (data_dir / name).is_file():
                raise ConfigError(
                    f"{data_dir / name} is not a file: move it away (the relay keeps its "
                    f"{'max SCN' if name == STATE_FILE else 'event buffer'} there)"
                )
        path = data_dir / BUFFER_FILE
        existed = path.exists() and path.stat().st_size == size
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            os.ftruncate(self._fd, size)
            self._mmap = mmap.mmap(self._fd, size)
        except OSError as exc:
            raise ConfigError(
                f"cannot map the event buffer {path} ({size} bytes): {exc}; "
                "check --data-dir and --buffer-size"
            ) from None
        # persist() runs in a worker thread; stop() persists once more and closes. One at a
        # time: a cancelled task's thread may still be flushing when stop() gets here.
        self._lock = threading.Lock()
        self.buffer = EventBuffer(self._mmap)
        self.restored = existed and self.buffer.restore()
        if existed and not self.restored:
            log.warning("event buffer file %s is not valid; starting a new one", path)
        if self.restored and self.buffer.dropped is not None:
            count, oldest, newest = self.buffer.dropped
            log.warning(
                "event buffer %s: %d older windows (SCNs %d..%d) are not linked to the newest "
                "ones (a damaged block, or history from before a reset): dropped; clients "
                "older than SCN %d need a bootstrap",
                path,
                count,
                oldest,
                newest,
                self.buffer.start_scn,
            )

    def persisted_scn(self) -> int | None:
        path = self.data_dir / STATE_FILE
        if not path.exists():
            return None
        try:
            scn = json.loads(path.read_text("utf-8"))["max_scn"]
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc}; move it away") from None
        except (ValueError, KeyError, TypeError):
            log.warning("relay state %s is corrupt; relying on the buffer", path)
            return None
        return int(scn) if isinstance(scn, int) else None

    def persist(self, max_scn: int) -> None:
        """Flush the buffer's pages, then record ``max_scn`` (temp, fsync, rename)."""
        with self._lock:
            if self._mmap.closed:
                return
            self._mmap.flush()
            write_atomically(self.data_dir / STATE_FILE, json.dumps({"max_scn": max_scn}))

    def close(self) -> None:
        with self._lock:
            if not self._mmap.closed:
                self._mmap.flush()
                self._mmap.close()
                os.close(self._fd)
