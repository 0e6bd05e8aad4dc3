"""The relay's buffer file: persists from the worker thread and the final one at stop race."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from sluice.core import wire
from sluice.core.wire import RawEvent
from sluice.relay.store import STATE_FILE, BufferStore


def test_concurrent_persists_and_close_never_fail(tmp_path: Path) -> None:
    store = BufferStore(tmp_path, 1 << 16)
    errors: list[BaseException] = []

    def persist_many(first: int) -> None:
        try:
            for scn in range(first, first + 300):
                store.persist(scn)
        except BaseException as exc:  # collected: a thread's exception would be lost
            errors.append(exc)

    threads = [threading.Thread(target=persist_many, args=(n * 1000,)) for n in range(4)]
    for thread in threads:
        thread.start()
    store.persist(10**6)
    store.close()  # while the others may still be persisting: they stop quietly
    for thread in threads:
        thread.join()
    assert errors == []
    assert isinstance(json.loads((tmp_path / STATE_FILE).read_text())["max_scn"], int)
    assert not list(tmp_path.glob("*.tmp"))


class _NoFlush:
    """The store's mmap, with ``flush`` refused: it holds the GIL through msync."""

    def __init__(self, mapped: Any) -> None:
        self._mapped = mapped

    def __getattr__(self, name: str) -> Any:
        if name == "flush":
            raise AssertionError("mmap.flush() holds the GIL through its msync")
        return getattr(self._mapped, name)


def test_persist_syncs_with_fsync_which_lets_other_threads_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BufferStore(tmp_path, 1 << 16)
    store._mmap = _NoFlush(store._mmap)  # type: ignore[assignment]
    store.buffer.format(0)
    synced: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store.buffer.append(5, 0, [wire.encode_event(RawEvent("db.t", "c", 1, 7, b"row"))])
    store.persist(5)
    assert store._fd in synced
    store.close()
    assert synced.count(store._fd) == 2
    reopened = BufferStore(tmp_path, 1 << 16)
    assert reopened.restored and reopened.buffer.max_scn == 5
    reopened.close()
