"""Checkpoints: where a consumer stands, as a small tagged union with one JSON codec."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sluice.errors import CheckpointError

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Online:
    """Consuming from a relay: every window with SCN <= ``scn`` was fully processed."""

    scn: int


Checkpoint = Online


def encode_checkpoint(checkpoint: Checkpoint) -> str:
    body: dict[str, Any] = {"version": FORMAT_VERSION, "phase": "online", "scn": checkpoint.scn}
    return json.dumps(body, sort_keys=True)


def decode_checkpoint(text: str, *, where: str = "checkpoint") -> Checkpoint:
    """Parse a checkpoint; a corrupt one raises ``CheckpointError`` naming ``where``."""
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise CheckpointError(
            f"{where} is not valid JSON ({exc}); remove it to start over"
        ) from None
    if not isinstance(body, dict) or body.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{where} has an unknown format: {text[:80]!r}")
    scn = body.get("scn")
    if body.get("phase") != "online" or not isinstance(scn, int) or isinstance(scn, bool):
        raise CheckpointError(f"{where} is corrupt: {text[:80]!r}")
    if not 0 <= scn < 1 << 64:
        raise CheckpointError(f"{where} holds an SCN out of range: {scn}")
    return Online(scn)
