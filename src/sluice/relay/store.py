"""The event buffer's file: a memory-mapped circular buffer plus the persisted max SCN."""

from __future__ import annotations

import errno
import json
import logging
import mmap
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sluice.core import wire
from sluice.core.buffer import FILE_HEADER_SIZE, MIN_DATA_SIZE, EventBuffer
from sluice.errors import ConfigError, SchemaError
from sluice.files import write_atomically
from sluice.schemas import SchemaRegistry

log = logging.getLogger(__name__)

BUFFER_FILE = "events.buf"
STATE_FILE = "relay-state.json"


def _allocate(fd: int, size: int, path: Path) -> None:
    """Give the buffer file every block now: a sparse file fails later, on a full disk, with
    SIGBUS in the middle of a write, with nothing logged."""
    os.ftruncate(fd, size)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            free = shutil.disk_usage(path.parent).free
            raise ConfigError(
                f"no room for the event buffer {path}: it needs {size:,} bytes and its disk "
                f"has {free:,} free; free some space or lower --buffer-size"
            ) from None
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        log.warning("cannot reserve %s on this file system: a full disk may stop the relay", path)


def _map(path: Path, size: int) -> tuple[int, mmap.mmap]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        _allocate(fd, size, path)
        return fd, mmap.mmap(fd, size)
    except OSError as exc:
        raise ConfigError(
            f"cannot map the event buffer {path} ({size} bytes): {exc}; "
            "check --data-dir and --buffer-size"
        ) from None


def _move_windows(old: Path, buffer: EventBuffer) -> tuple[int, int, int]:
    """The windows of a buffer file of another size into ``buffer`` (newest kept when they do
    not all fit), then the old file goes; returns (old size, kept, dropped)."""
    size = old.stat().st_size
    with old.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as mem:
        previous = EventBuffer(mem)
        held = previous.restore()
        records = _records(previous) if held else []
    buffer.format(previous.start_scn if held else 0)
    room, keep = buffer.capacity, 0
    for record in reversed(records):  # the newest that fit, with some room to spare
        room -= len(record)
        if room < buffer.capacity // 8:
            break
        keep += 1
    for record in records[len(records) - keep :]:
        header = wire.read_window_header(record)
        if header.external_len:
            buffer.append_reference(header.scn, header.ts_ms, header.n_events, header.external_len)
        else:
            events = [record[s:e] for s, e, *_ in wire.iter_event_spans(record)]
            buffer.append(header.scn, header.ts_ms, events)
    dropped = len(records) - keep
    if dropped:
        log.warning(
            "the event buffer is now %d bytes (it was %d): its %d oldest windows do not fit and "
            "are dropped; clients older than SCN %d need a bootstrap",
            buffer.capacity,
            previous.capacity,
            dropped,
            buffer.start_scn,
        )
    log.info("event buffer resized from %d bytes: its %d newest windows kept", size, keep)
    old.unlink()
    return size, keep, dropped


def _records(buffer: EventBuffer) -> list[bytes]:
    out: list[bytes] = []
    scn = buffer.start_scn
    while True:
        windows, _cursor = buffer.read(scn, 1 << 24)
        if not windows:
            return out
        out += windows
        scn = wire.read_window_header(windows[-1]).scn


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
        old = path.with_suffix(".old")  # a buffer of another size, whose windows move over
        if path.is_file() and path.stat().st_size != size:
            path.replace(old)
        existed = path.exists()
        self._fd, self._mmap = _map(path, size)
        # persist() runs in a worker thread; stop() persists once more and closes. One at a
        # time: a cancelled task's thread may still be flushing when stop() gets here.
        self._lock = threading.Lock()
        self.buffer = EventBuffer(self._mmap)
        # a restart with another --buffer-size: (old size, windows kept, windows dropped)
        self.resized: tuple[int, int, int] | None = None
        # why the buffer file's history was dropped at start (/stats ``buffer_lost``)
        self.lost: str | None = None
        if old.is_file() and old.stat().st_size < FILE_HEADER_SIZE + MIN_DATA_SIZE:
            # truncated, e.g. to 0 bytes by a crash on a full disk: no window to move over
            self.lost = f"{path} was {old.stat().st_size} bytes long, too short to be a buffer"
            old.unlink()
            existed = False
        elif old.is_file():  # (again, if a restart cut the move short)
            self.resized = _move_windows(old, self.buffer)
            self._sync()
            existed = self.resized[1] > 0
        self.restored = existed and self.buffer.restore()
        if existed and not self.restored:
            self.lost = f"{path} is not a valid event buffer"
        if self.lost is not None:
            log.warning(
                "%s: its windows are dropped and a new buffer starts; capture resumes after "
                "the SCN in %s (or at the source's end without one), and clients older than "
                "that need a bootstrap",
                self.lost,
                STATE_FILE,
            )
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

    def _sync(self) -> None:
        """The buffer's written pages to disk. ``mmap.flush()`` holds the GIL through its
        msync (CPython 3.11): every persist froze the relay's capture and streams for as long
        as the disk took (tens of ms on a busy disk). On Linux an fsync of the mapped file
        writes the same dirty pages (a shared mapping's writes are the file's page cache), and
        ``os.fsync`` lets the other threads run meanwhile."""
        os.fsync(self._fd)

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

    def persist(self, max_scn: int, schemas: dict[str, dict[str, str]] | None = None) -> None:
        """Flush the buffer's pages, then record ``max_scn`` and the fingerprints of the schema
        versions (temp, fsync, rename)."""
        with self._lock:
            if self._mmap.closed:
                return
            self._sync()
            state = {"max_scn": max_scn, "schemas": schemas or {}}
            write_atomically(self.data_dir / STATE_FILE, json.dumps(state))

    def check_schemas(
        self, registry: SchemaRegistry, held: Callable[[int], Iterable[bytes]]
    ) -> None:
        """Refuse to start when a schema version the buffer's events use is missing, or a
        schema file differs from what the relay wrote: consumers would fail on it later.
        ``held(scn)`` gives a window held outside the ring in pieces."""
        recorded = self._state().get("schemas") or {}
        for source, versions in sorted(recorded.items()):
            for version, digest in sorted(versions.items()):
                self._same_schema(registry, source, int(version), str(digest))
        used: set[tuple[str, int]] = set()
        scn = self.buffer.start_scn
        while True:
            windows, _cursor = self.buffer.read(scn, 1 << 22)
            if not windows:
                break
            for window in windows:
                header = wire.read_window_header(window)
                pieces = held(header.scn) if header.external_len else (window,)
                for piece in pieces:
                    used.update((e.source, e.schema_version) for e in wire.decode_events(piece))
            scn = wire.read_window_header(windows[-1]).scn
        for source, version in sorted(used):
            self._same_schema(registry, source, version, None)

    def _same_schema(
        self, registry: SchemaRegistry, source: str, version: int, digest: str | None
    ) -> None:
        path = registry.path_of(source, version)
        try:
            schema = registry.get(source, version)
        except SchemaError:
            raise ConfigError(
                f"{path} is missing (the event buffer or {STATE_FILE} refers to version "
                f"{version} of {source}): restore it from a backup of the data dir, or move "
                f"{BUFFER_FILE} and {STATE_FILE} away to start over (consumers then bootstrap)"
            ) from None
        if digest is not None and schema.fingerprint() != digest:
            raise ConfigError(
                f"{path} differs from the schema the relay wrote (its fingerprint changed): "
                "restore it from a backup of the data dir; never edit schema files"
            )

    def _state(self) -> dict[str, Any]:
        path = self.data_dir / STATE_FILE
        try:
            state = json.loads(path.read_text("utf-8")) if path.exists() else {}
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def close(self) -> None:
        with self._lock:
            if not self._mmap.closed:
                self._sync()
                self._mmap.close()
                os.close(self._fd)
