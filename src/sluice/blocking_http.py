"""Blocking HTTP to relays and bootstrap servers, for threads that cannot run an event loop
(Spark's driver and workers, a chained relay's capture thread): JSON GETs and framed
``/stream`` bodies."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit

from sluice.core.pieces import Piece, PieceParser
from sluice.core.wire import FrameParser, Heartbeat
from sluice.errors import RelayUnavailable, first_line, raise_for_status

_TIMEOUT_S = 60.0


def _connect(base: str) -> http.client.HTTPConnection:
    parts = urlsplit(base)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    return cls(parts.hostname or "127.0.0.1", parts.port, timeout=_TIMEOUT_S)


def open_get(
    base: str, path: str, params: dict[str, str], headers: dict[str, str] | None = None
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """A GET whose answer is 200 (any other raises as ``raise_for_status`` says), with its
    connection: the caller reads the body and closes the connection."""
    conn = _connect(base)
    try:
        conn.request(
            "GET", f"{path}?{urlencode(params)}" if params else path, headers=headers or {}
        )
        resp = conn.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise RelayUnavailable(f"{base}: {first_line(exc)}") from None
    if resp.status != 200:
        body = resp.read()
        conn.close()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {"error": f"HTTP {resp.status}"}
        raise_for_status(
            resp.status,
            parsed if isinstance(parsed, dict) else {},
            base,
            int(params.get("since_scn", 0)) if params else None,
        )
    return conn, resp


def get_json(base: str, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
    conn, resp = open_get(base, path, params or {})
    try:
        body: dict[str, Any] = json.loads(resp.read())
        return body
    except (OSError, http.client.HTTPException) as exc:
        raise RelayUnavailable(f"{base}: {first_line(exc)}") from None
    finally:
        conn.close()


def frames(base: str, path: str, params: dict[str, str]) -> Iterator[bytes | Heartbeat]:
    """Windows and heartbeats of one ``/stream`` (or ``/snapshot``) response."""
    parser = FrameParser()
    for data in _body(base, path, params):
        yield from parser.feed(data)
    if parser.pending:
        raise RelayUnavailable(f"{base}: stream cut in the middle of a window")


def frames_in_pieces(
    base: str, path: str, params: dict[str, str], piece_bytes: int
) -> Iterator[bytes | Heartbeat | Piece]:
    """``frames``, with windows bigger than ``piece_bytes`` in ``Piece``s (core/pieces.py)."""
    parser = PieceParser(piece_bytes)
    for data in _body(base, path, params):
        yield from parser.feed(data)
    if parser.pending:
        raise RelayUnavailable(f"{base}: stream cut in the middle of a window")


def _body(base: str, path: str, params: dict[str, str]) -> Iterator[bytes]:
    conn, resp = open_get(base, path, params)
    try:
        while chunk := resp.read1(1 << 20):
            yield chunk
    except (OSError, http.client.HTTPException) as exc:  # reset, or cut mid-chunk
        raise RelayUnavailable(f"{base}: {first_line(exc)}") from None
    finally:
        conn.close()
