# Wire events of an Arrow batch (_frames.c); arrow_frames.py prepares its columns.
from typing import Any

def frames(
    columns: list[tuple[Any, ...]],
    rows: int,
    keys: tuple[Any, ...],
    ops: Any,
    source: bytes,
    version: int,
    /,
) -> list[bytes]: ...
