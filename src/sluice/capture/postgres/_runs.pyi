# The compiled pgoutput run transcoder (_runs.c); compiled.py builds its programs.
from collections.abc import Callable

class Program:
    def __init__(
        self,
        columns: tuple[tuple[int, int, int], ...],
        key: tuple[tuple[int, bytes, int] | tuple[int, bytes, int, Callable[[str], str]], ...],
        source: bytes,
        version: int,
    ) -> None: ...
    def events(self, payloads: list[bytes], /) -> list[bytes] | None: ...
