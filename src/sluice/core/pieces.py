"""Reading a ``/stream`` body whose windows may be too big to hold whole (Spark readers).

``PieceParser`` is ``wire.FrameParser`` for readers that can take a window in parts: a window
record longer than ``piece_bytes`` comes out as ``Piece``s while its bytes arrive, each a
valid window record (same SCN, ``prev_scn`` and time) of consecutive events, so memory stays
bounded by ``piece_bytes`` whatever the transaction's size. The whole record's CRC is checked
as the bytes pass; a mismatch raises ``DecodeError`` at its end (the reader then fails, and
whatever it made of the pieces is thrown away with it). Pieces are cut at the same events for
the same record bytes, so a reader that reads a window again can skip the pieces it has.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import TypeAlias

from sluice.core import wire
from sluice.errors import DecodeError

_LEN_AT = struct.Struct("<4sI")
_EV_LEN = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class Piece:
    """Events ``first_seq ..`` of a big window, as a window record of their own; ``last``:
    the window ends with this piece (and its checksum was right)."""

    record: bytes
    first_seq: int
    last: bool


Frame: TypeAlias = "bytes | wire.Heartbeat | Piece"


class _Big:
    """A big window being read: its header, and what is left of it."""

    def __init__(self, head: bytes, piece_bytes: int) -> None:
        self.header = wire.read_window_header(head)
        self.expect_crc = int.from_bytes(head[wire.WINDOW_HEADER_SIZE - 4 :], "little")
        self.crc = zlib.crc32(head[: wire.WINDOW_HEADER_SIZE - 4])
        self.piece_bytes = piece_bytes
        self.left = self.header.n_events
        self.body = 0
        self.first = 0
        self.events: list[bytes] = []
        self.size = 0
        self.done = False

    def take(self, buf: bytearray, pos: int, out: list[Frame]) -> int:
        """Events from ``buf[pos:]`` into pieces; returns where it stopped."""
        while self.left and len(buf) - pos >= wire.EVENT_HEADER_SIZE:
            (size,) = _EV_LEN.unpack_from(buf, pos)
            if size < wire.EVENT_HEADER_SIZE:
                raise DecodeError("corrupt stream: bad event length", scn=self.header.scn)
            if len(buf) - pos < size:
                break
            event = bytes(buf[pos : pos + size])
            pos += size
            self.crc = zlib.crc32(event, self.crc)
            self.events.append(event)
            self.size += size
            self.body += size
            self.left -= 1
            if self.size >= self.piece_bytes and self.left:
                out.append(self._piece(last=False))
        if self.left:
            return pos
        pad = len(wire.padding(self.body))
        if len(buf) - pos < pad:
            return pos
        self.crc = zlib.crc32(bytes(buf[pos : pos + pad]), self.crc)
        if self.crc != self.expect_crc:
            raise DecodeError("corrupt stream: window checksum mismatch", scn=self.header.scn)
        out.append(self._piece(last=True))
        self.done = True
        return pos + pad

    def _piece(self, last: bool) -> Piece:
        h = self.header
        piece = Piece(wire.encode_window(h.scn, h.prev_scn, h.ts_ms, self.events), self.first, last)
        self.first += len(self.events)
        self.events, self.size = [], 0
        return piece


class PieceParser:
    """Bytes in; windows, heartbeats and pieces of big windows out."""

    def __init__(self, piece_bytes: int) -> None:
        self.piece_bytes = piece_bytes
        self._buf = bytearray()
        self._big: _Big | None = None

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        out: list[Frame] = []
        pos = 0
        buf = self._buf
        while True:
            if self._big is not None:
                pos = self._big.take(buf, pos, out)
                if not self._big.done:
                    break
                self._big = None
                continue
            if len(buf) - pos < 8:
                break
            magic, length = _LEN_AT.unpack_from(buf, pos)
            if magic == wire.WINDOW_MAGIC and length > self.piece_bytes:
                if len(buf) - pos < wire.WINDOW_HEADER_SIZE:
                    break
                head = bytes(buf[pos : pos + wire.WINDOW_HEADER_SIZE])
                self._big = _Big(head, self.piece_bytes)
                pos += wire.WINDOW_HEADER_SIZE
                continue
            if magic not in (wire.WINDOW_MAGIC, wire.HEARTBEAT_MAGIC) or length < 8:
                raise DecodeError("corrupt stream: unknown frame")
            if len(buf) - pos < length:
                break
            out.append(wire.frame_at(buf, pos, magic, length))  # checked, copied once
            pos += length
        del buf[:pos]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame (or big window) held: a cut stream when not 0."""
        return len(self._buf) + (self._big is not None)
