"""Talking to relays over HTTP: schemas, and the framed ``/stream`` body."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp

from sluice.core.names import check_relay_url, schemas_path
from sluice.core.pieces import Piece, PieceParser
from sluice.core.wire import FrameParser, Heartbeat
from sluice.errors import (
    RelayError,
    RelayUnavailable,
    SluiceError,
    raise_for_status,
)
from sluice.schemas import TableSchema


async def _error_body(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        body = json.loads(await resp.text())
    except (ValueError, UnicodeDecodeError, aiohttp.ClientError):
        return {"error": f"HTTP {resp.status}"}
    return body if isinstance(body, dict) else {"error": str(body)}


class RelayConnection:
    """One relay, one aiohttp session."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = check_relay_url(url)
        self._session = session

    async def get_json(self, path: str) -> dict[str, Any]:
        try:
            async with self._session.get(self.url + path) as resp:
                if resp.status != 200:
                    raise_for_status(resp.status, await _error_body(resp), self.url, None)
                body: dict[str, Any] = await resp.json()
                return body
        except aiohttp.ClientError as exc:
            raise RelayUnavailable(f"{self.url}: {exc}") from None

    async def schemas(self, source: str) -> list[TableSchema]:
        body = await self.get_json(schemas_path(source))
        return [TableSchema.from_avro(s) for s in body.get("versions", [])]

    def stream(
        self,
        since_scn: int,
        sources: tuple[str, ...],
        partition: str | None,
        timeout_ms: int,
        piece_bytes: int | None = None,
    ) -> AsyncGenerator[bytes | Heartbeat | Piece, None]:
        """Windows after ``since_scn`` (and heartbeats) from ``/stream``; with
        ``piece_bytes``, windows bigger than that in ``Piece``s (core/pieces.py)."""
        params = {"since_scn": str(since_scn), "timeout_ms": str(timeout_ms)}
        return self.frames(
            "/stream", _with_filters(params, sources, partition), since_scn, timeout_ms, piece_bytes
        )

    def snapshot(
        self,
        snapshot_scn: int,
        after: str | None,
        sources: tuple[str, ...],
        partition: str | None,
    ) -> AsyncGenerator[bytes | Heartbeat | Piece, None]:
        """Snapshot rows (``r`` events) after ``after`` from a bootstrap server's ``/snapshot``."""
        params = {"snapshot_scn": str(snapshot_scn)}
        if after is not None:
            params["after"] = after
        return self.frames("/snapshot", _with_filters(params, sources, partition), None, 0)

    async def frames(
        self,
        path: str,
        params: dict[str, str],
        since_scn: int | None,
        timeout_ms: int,
        piece_bytes: int | None = None,
    ) -> AsyncGenerator[bytes | Heartbeat | Piece, None]:
        parser = FrameParser() if piece_bytes is None else PieceParser(piece_bytes)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=10, sock_read=timeout_ms / 1000 + 60
        )
        try:
            async with self._session.get(self.url + path, params=params, timeout=timeout) as resp:
                if resp.status != 200:
                    raise_for_status(resp.status, await _error_body(resp), self.url, since_scn)
                async for chunk in resp.content.iter_any():
                    for frame in parser.feed(chunk):
                        yield frame
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise RelayUnavailable(f"{self.url}: {exc or type(exc).__name__}") from None
        if parser.pending:
            raise RelayUnavailable(f"{self.url}: stream cut in the middle of a window")


def _with_filters(
    params: dict[str, str], sources: tuple[str, ...], partition: str | None
) -> dict[str, str]:
    if sources:
        params["sources"] = ",".join(sources)
    if partition:
        params["partition"] = partition
    return params


__all__ = ["RelayConnection", "RelayError", "check_relay_url"]


async def newest_scn(
    session: aiohttp.ClientSession, relays: tuple[str, ...] | list[str]
) -> tuple[int | None, list[str]]:
    """The max SCN of the first relay that answers ``/stats`` (None when none does), and what
    the ones before it said instead."""
    problems: list[str] = []
    for url in relays:
        try:
            stats = await RelayConnection(url, session).get_json("/stats")
            return int(stats["max_scn"]), problems
        except (SluiceError, TimeoutError, KeyError, TypeError, ValueError) as exc:
            problems.append(str(exc) if isinstance(exc, SluiceError) else f"{url}: {exc!r}")
    return None, problems
