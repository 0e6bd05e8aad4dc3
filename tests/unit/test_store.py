"""The relay's buffer file: persists from the worker thread and the final one at stop race."""

from __future__ import annotations

import json
import threading
from pathlib import Path

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
