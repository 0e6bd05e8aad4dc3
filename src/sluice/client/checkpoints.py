"""Checkpoint stores. Invariant: ``load()`` returns the last checkpoint ``save()`` completed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from sluice.core.checkpoint import Checkpoint, decode_checkpoint, encode_checkpoint
from sluice.errors import CheckpointError, ConfigError
from sluice.files import write_atomically


class CheckpointStore(Protocol):
    def load(self) -> Checkpoint | None: ...
    def save(self, checkpoint: Checkpoint) -> None: ...


class MemoryCheckpointStore:
    def __init__(self, checkpoint: Checkpoint | None = None) -> None:
        self.checkpoint = checkpoint

    def load(self) -> Checkpoint | None:
        return self.checkpoint

    def save(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint


class FileCheckpointStore:
    """One JSON file per consumer name in a directory, replaced atomically on each save."""

    def __init__(self, directory: Path, name: str = "default") -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ConfigError(f"checkpoint name {name!r} may use only letters, digits, _ . -")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create checkpoint dir {directory}: {exc}") from None
        self.path = directory / f"{name}.checkpoint.json"

    def load(self) -> Checkpoint | None:
        if not self.path.exists():
            return None
        try:
            text = self.path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {exc}") from None
        return decode_checkpoint(text, where=f"checkpoint file {self.path}")

    def save(self, checkpoint: Checkpoint) -> None:
        write_atomically(self.path, encode_checkpoint(checkpoint))
