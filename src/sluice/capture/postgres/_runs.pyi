# The compiled pgoutput run transcoder (_runs.c); compiled.py builds its programs.
class Program:
    def __init__(
        self,
        columns: tuple[tuple[int, int, int], ...],
        key: tuple[tuple[int, bytes, int], ...],
        source: bytes,
        version: int,
    ) -> None: ...
    def events(self, payloads: list[bytes], /) -> list[bytes] | None: ...
