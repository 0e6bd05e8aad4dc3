"""Checkpoints: where a consumer stands, as a small tagged union with one JSON codec.

- ``Online(scn)``: consuming from a relay; every window with SCN <= scn was processed.
- ``Snapshot(scn, source, row)``: reading the bootstrap snapshot consistent at ``scn``; every
  row of the sources before ``source``, and of ``source`` up to row number ``row`` in the
  snapshot's order, was processed (``source`` None: nothing yet).
- ``CatchUp(scn)``: replaying the bootstrap server's log after ``scn`` before returning to
  the relay.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sluice.errors import CheckpointError

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class Online:
    scn: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    scn: int
    source: str | None = None
    row: int = -1


@dataclass(frozen=True, slots=True)
class CatchUp:
    scn: int


Checkpoint = Online | Snapshot | CatchUp
_PHASES = {"online": Online, "snapshot": Snapshot, "catchup": CatchUp}


def encode_checkpoint(checkpoint: Checkpoint) -> str:
    body: dict[str, Any] = {"version": FORMAT_VERSION, "scn": checkpoint.scn}
    if isinstance(checkpoint, Snapshot):
        body.update(phase="snapshot", source=checkpoint.source, row=checkpoint.row)
    else:
        body["phase"] = "online" if isinstance(checkpoint, Online) else "catchup"
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
    scn, phase = body.get("scn"), _PHASES.get(str(body.get("phase")))
    if phase is None or not isinstance(scn, int) or isinstance(scn, bool):
        raise CheckpointError(f"{where} is corrupt: {text[:80]!r}")
    if not 0 <= scn < 1 << 64:
        raise CheckpointError(f"{where} holds an SCN out of range: {scn}")
    if phase is Snapshot:
        source, row = body.get("source"), body.get("row")
        if not (source is None or isinstance(source, str)) or not isinstance(row, int):
            raise CheckpointError(f"{where} is corrupt: {text[:80]!r}")
        return Snapshot(scn, source, row)
    return phase(scn)  # type: ignore[no-any-return]
