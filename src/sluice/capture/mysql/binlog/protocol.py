"""The replication protocol: log in with PyMySQL, ask for a binlog dump, read raw events."""

from __future__ import annotations

import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any

import pymysql

from sluice.errors import SourceConnectionError, SourceError, SourceSetupError

COM_BINLOG_DUMP = 0x12
_EVENT_HEADER = struct.Struct("<IBIIIH")
EVENT_HEADER_SIZE = _EVENT_HEADER.size
_MAX_PACKET = 0xFFFFFF


class LogPositionError(SourceError):
    """The server cannot stream from the requested position (error 1236: purged, bad offset)."""


class _Connection(pymysql.connections.Connection):  # type: ignore[misc]
    """PyMySQL builds a TLS context for every connection in its default (preferred) TLS mode:
    loading the CA store costs ~35 ms, more than the rest of a connect and a capture's first
    window together. One context serves every connection (SSLContext is thread-safe)."""

    _preferred: ssl.SSLContext | None = None

    def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
        if sslp:  # explicit TLS options: PyMySQL's own handling
            ctx: ssl.SSLContext = super()._create_ssl_ctx(sslp)
            return ctx
        if _Connection._preferred is None:
            _Connection._preferred = super()._create_ssl_ctx(sslp)
        return _Connection._preferred


def open_connection(**kwargs: Any) -> pymysql.Connection[Any]:
    """``pymysql.connect`` with the shared TLS context; PyMySQL's errors pass through."""
    conn: pymysql.Connection[Any] = _Connection(**kwargs)
    return conn


@dataclass(frozen=True, slots=True)
class ConnectParams:
    host: str
    port: int
    user: str
    password: str
    connect_timeout: float = 10.0

    def connect(self, **kwargs: Any) -> pymysql.Connection[Any]:
        kwargs.setdefault("autocommit", True)
        try:
            return open_connection(
                host=self.host,
                port=self.port,
                user=self.user,
                password=self.password,
                connect_timeout=self.connect_timeout,
                **kwargs,
            )
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code in (1045, 1044):  # wrong credentials: a setup problem, not retriable
                raise SourceSetupError(
                    f"{self.user}@{self.host}:{self.port} refused the login ({exc.args[1]}); "
                    "check the user and password in --source (or SLUICE_SOURCE_PASSWORD)"
                ) from None
            raise SourceConnectionError(
                f"cannot connect to MySQL/MariaDB at {self.host}:{self.port}: {exc.args[-1]}"
            ) from None


@dataclass(frozen=True, slots=True)
class RawLogEvent:
    timestamp: int
    type: int
    log_pos: int  # end position of this event in its file (0 for artificial events)
    flags: int
    body: bytes


class BinlogStream:
    """One dump connection; ``read()`` blocks for the next event. ``close()`` from any thread."""

    def __init__(self, params: ConnectParams, server_id: int, heartbeat_s: float = 1.0) -> None:
        self._params = params
        self._server_id = server_id
        self._heartbeat_s = heartbeat_s
        self._conn: pymysql.Connection[Any] | None = None
        self._checksum = 0

    def open(self, log_file: str, position: int) -> None:
        conn = self._params.connect(read_timeout=max(30.0, self._heartbeat_s * 10))
        with conn.cursor() as cur:
            cur.execute("SELECT @@global.binlog_checksum")
            row = cur.fetchone()
            self._checksum = 4 if row and str(row[0]).upper() != "NONE" else 0
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SET @mariadb_slave_capability = 4")
            cur.execute("SET @master_heartbeat_period = %s", (int(self._heartbeat_s * 1e9),))
        payload = (
            bytes([COM_BINLOG_DUMP])
            + struct.pack("<IHI", position, 0, self._server_id)
            + log_file.encode()
        )
        self._conn = conn
        self._send(payload)

    def _send(self, payload: bytes) -> None:
        if self._conn is None:
            raise SourceConnectionError("binlog connection closed")
        header = struct.pack("<I", len(payload))[:3] + b"\x00"
        self._conn._sock.sendall(header + payload)

    def _read_exact(self, n: int) -> bytes:
        conn = self._conn  # close() may clear it from another thread
        rfile = conn._rfile if conn is not None else None
        if rfile is None:
            raise SourceConnectionError("binlog connection closed")
        try:
            data: bytes = rfile.read(n)
        except (OSError, ValueError, AttributeError) as exc:
            raise SourceConnectionError(f"binlog connection lost: {exc}") from None
        if len(data) != n:
            raise SourceConnectionError("binlog connection closed by the server")
        return data

    def _read_packet(self) -> bytes:
        parts: list[bytes] = []
        while True:
            header = self._read_exact(4)
            length = int.from_bytes(header[:3], "little")
            parts.append(self._read_exact(length))
            if length < _MAX_PACKET:
                return b"".join(parts) if len(parts) > 1 else parts[0]

    def read(self) -> RawLogEvent:
        packet = self._read_packet()
        status = packet[0]
        if status == 0xFF:
            code = int.from_bytes(packet[1:3], "little")
            message = packet[9:].decode("utf-8", "replace")
            if code == 1236:
                raise LogPositionError(f"the server cannot stream from there: {message}")
            raise SourceConnectionError(f"binlog stream error {code}: {message}")
        if status == 0xFE and len(packet) < 9:
            raise SourceConnectionError("binlog stream ended by the server")
        timestamp, type_code, _sid, size, log_pos, flags = _EVENT_HEADER.unpack_from(packet, 1)
        body = packet[1 + EVENT_HEADER_SIZE : 1 + size - self._checksum]
        return RawLogEvent(timestamp, type_code, log_pos, flags, body)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if conn._sock is not None:
                conn._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            conn.close()
        except Exception:
            conn._force_close()
