# The compiled binlog rows transcoder (_rows.c); fastrows.py builds its programs.
from typing import Any

class Program:
    def __init__(
        self,
        columns: tuple[tuple[Any, ...], ...],
        key: tuple[tuple[int, bytes], ...],
        source: bytes,
        version: int,
    ) -> None: ...
    def events(self, mode: int, body: bytes, pos: int, /) -> list[bytes]: ...
