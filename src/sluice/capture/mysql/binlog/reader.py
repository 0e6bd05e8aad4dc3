"""A cursor over bytes for the few variable-length binlog encodings."""

from __future__ import annotations

from sluice.errors import DecodeError


class Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise DecodeError(f"truncated binlog event (wanted {n} bytes at {self.pos})")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def u8(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def lenenc(self) -> int:
        first = self.u8()
        if first < 0xFB:
            return first
        if first == 0xFC:
            return self.uint(2)
        if first == 0xFD:
            return self.uint(3)
        if first == 0xFE:
            return self.uint(8)
        raise DecodeError(f"bad length-encoded integer prefix 0x{first:02x}")

    def lenenc_bytes(self) -> bytes:
        return self.take(self.lenenc())

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos
