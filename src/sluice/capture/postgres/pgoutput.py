"""The ``pgoutput`` logical replication protocol (version 1), parsed from message bytes.

Only what capture needs: Begin, Commit, Relation, Insert, Update, Delete, Truncate (Origin and
Type messages are read past). Values arrive in the server's text form.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sluice.errors import DecodeError

UNCHANGED = object()  # an unchanged TOASTed value the server did not send ('u')
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
# Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
PG_EPOCH_MICROS = 946_684_800_000_000


@dataclass(frozen=True, slots=True)
class RelationColumn:
    name: str
    type_oid: int
    typmod: int
    in_identity: bool


@dataclass(frozen=True, slots=True)
class Relation:
    relid: int
    namespace: str
    name: str
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    columns: tuple[RelationColumn, ...]


Tuple = list[object]  # per column: None, UNCHANGED, or the text value (str)


@dataclass(frozen=True, slots=True)
class Change:
    op: str  # I, U, D
    relid: int
    old: Tuple | None  # the old key ('K') or the whole old row ('O'), if sent
    new: Tuple | None
    whole_old: bool = False  # ``old`` is the whole old row ('O'), not the key alone


@dataclass(frozen=True, slots=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    ts_micros: int  # since the Unix epoch


@dataclass(frozen=True, slots=True)
class Truncate:
    relids: tuple[int, ...]


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 1

    def i8(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def i16(self) -> int:
        (value,) = _I16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(value)

    def i32(self) -> int:
        (value,) = _I32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def u32(self) -> int:
        (value,) = _U32.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def i64(self) -> int:
        (value,) = _I64.unpack_from(self.data, self.pos)
        self.pos += 8
        return int(value)

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        text = self.data[self.pos : end].decode()
        self.pos = end + 1
        return text

    def tuple(self) -> Tuple:
        values, self.pos = read_tuple(self.data, self.pos)
        return values


def read_tuple(data: bytes, pos: int) -> tuple[Tuple, int]:
    """TupleData at ``pos``: per column None ('n'), UNCHANGED ('u') or its text ('t')."""
    count = (data[pos] << 8) | data[pos + 1]
    pos += 2
    values: Tuple = []
    add = values.append
    for _ in range(count):
        kind = data[pos]
        if kind == 116:  # 't'
            size = int.from_bytes(data[pos + 1 : pos + 5], "big")
            pos += 5
            add(data[pos : pos + size].decode())
            pos += size
        elif kind == 110:  # 'n'
            add(None)
            pos += 1
        elif kind == 117:  # 'u'
            add(UNCHANGED)
            pos += 1
        else:
            raise DecodeError(f"pgoutput: unknown tuple value kind {chr(kind)!r}")
    if pos > len(data):
        raise DecodeError("pgoutput: a tuple is cut short")
    return values, pos


_COMMIT = struct.Struct(">xbqqq")


def commit(message: bytes) -> Commit:
    """A Commit message ('C'), the one every transaction ends with, without ``parse``."""
    commit_lsn, end_lsn, ts = _commit_fields(message)
    return Commit(commit_lsn, end_lsn, ts)


def commit_end(message: bytes) -> tuple[int, int]:
    """A Commit message's end LSN and its time (microseconds since the Unix epoch): what
    capture keeps of every transaction, without building a ``Commit``."""
    _commit_lsn, end_lsn, ts = _commit_fields(message)
    return end_lsn, ts


def _commit_fields(message: bytes) -> tuple[int, int, int]:
    try:
        _flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(message)
    except struct.error as exc:
        raise DecodeError(f"pgoutput: a b'C' message is corrupt or cut ({exc})") from None
    return commit_lsn, end_lsn, ts + PG_EPOCH_MICROS


def parse(message: bytes) -> Relation | Change | Commit | Truncate | None:
    """One pgoutput message; None for the ones capture does not need (Begin, Origin, Type)."""
    tag = message[:1]
    r = _Reader(message)
    try:
        if tag in (b"I", b"U", b"D"):
            return _change(tag.decode(), r)
        if tag == b"C":
            return commit(message)
        if tag == b"R":
            return _relation(r)
        if tag == b"T":
            count = r.i32()
            r.i8()  # options (CASCADE, RESTART IDENTITY)
            return Truncate(tuple(r.u32() for _ in range(count)))
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise DecodeError(f"pgoutput: a {tag!r} message is corrupt or cut ({exc})") from None
    if tag in (b"B", b"O", b"Y", b"M"):
        return None
    raise DecodeError(f"pgoutput: unknown message {tag!r}")


def _relation(r: _Reader) -> Relation:
    relid, namespace, name = r.u32(), r.string(), r.string()
    identity = chr(r.i8())
    columns = []
    for _ in range(r.i16()):
        flags = r.i8()
        columns.append(RelationColumn(r.string(), r.u32(), r.i32(), bool(flags & 1)))
    return Relation(relid, namespace, name, identity, tuple(columns))


def _change(op: str, r: _Reader) -> Change:
    relid = r.u32()
    old: Tuple | None = None
    new: Tuple | None = None
    marker = r.data[r.pos : r.pos + 1]
    r.pos += 1
    whole = marker == b"O"
    if marker in (b"K", b"O"):
        old = r.tuple()
        if op == "U":
            marker = r.data[r.pos : r.pos + 1]
            r.pos += 1
    if marker == b"N":
        new = r.tuple()
    return Change(op, relid, old, new, whole)
