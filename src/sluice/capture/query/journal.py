"""Where each table's poll stood at each SCN the query source handed out.

A query source's SCN is synthetic, so restarting "after SCN s" means: poll again from the
positions (last timestamp, last id) recorded with window s. Each window's line is written
(and reaches the OS) *before* the window goes to the relay, so whatever SCN the relay resumes
from, its positions are here; ``fsync`` runs once per poll, so after a power loss the relay
may poll one poll's rows again (as new windows), never skip one.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from sluice.errors import ConfigError
from sluice.files import write_atomically

log = logging.getLogger(__name__)
JOURNAL = "query-positions.jsonl"
_COMPACT_BYTES = 1 << 20


class Journal:
    """``{scn: {table: position}}``, appended as JSON lines, compacted behind the relay."""

    def __init__(self, directory: Path | None) -> None:
        self.path = None if directory is None else directory / JOURNAL
        self.entries: list[tuple[int, dict[str, Any]]] = []
        self._file: Any = None
        self._size = 0
        if self.path is not None:
            self._load(self.path)

    def _load(self, path: Path) -> None:
        if not path.exists():
            return
        if not path.is_file():
            raise ConfigError(
                f"{path} is not a file: remove it (the query source keeps its positions there)"
            )
        text = path.read_bytes().decode("utf-8", "replace")
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            try:
                entry = json.loads(line)
                self.entries.append((int(entry["scn"]), dict(entry["positions"])))
            except (ValueError, KeyError, TypeError):
                if number == len(lines):  # a line cut by a crash: the window never left
                    log.warning("%s: ignoring a cut last line", path)
                    break
                raise ConfigError(
                    f"{path} line {number} is not a position record: restore the file, or "
                    "delete the relay's data dir to capture every table again from the start"
                ) from None
        self._size = path.stat().st_size

    @property
    def last_scn(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def positions_at(self, scn: int) -> dict[str, Any] | None:
        """The positions recorded with the newest window at or before ``scn``: ``{}`` at 0
        (nothing read yet), None when no such window is recorded."""
        if scn == 0:
            return {}
        best = None
        for at, positions in self.entries:
            if at > scn:
                break
            best = positions
        return best

    def append(self, scn: int, positions: dict[str, Any]) -> None:
        self.entries.append((scn, positions))
        if self.path is None:
            return
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open across polls
        data = json.dumps({"scn": scn, "positions": positions}, separators=(",", ":")) + "\n"
        self._file.write(data.encode())
        self._file.flush()
        self._size += len(data)

    def sync(self) -> None:
        if self._file is not None:
            os.fdatasync(self._file.fileno())

    def compact(self, persisted: int) -> None:
        """Drop lines the relay can no longer ask for: those before the newest persisted one."""
        if self.path is None or self._size < _COMPACT_BYTES:
            return
        keep = [i for i, (scn, _p) in enumerate(self.entries) if scn <= persisted]
        if not keep or keep[-1] == 0:
            return
        self.entries = self.entries[keep[-1] :]
        text = "".join(
            json.dumps({"scn": s, "positions": p}, separators=(",", ":")) + "\n"
            for s, p in self.entries
        )
        self.close()
        write_atomically(self.path, text)
        self._size = len(text)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
