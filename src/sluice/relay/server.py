"""The relay's HTTP API (aiohttp): /stream, /stats, /sources, /schemas, /metrics, /healthz."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web

from sluice.core import wire
from sluice.core.buffer import EventBuffer
from sluice.core.requests import HttpProblem, StreamRequest, parse_offsets, parse_stream
from sluice.errors import BootstrapRequired, SchemaError
from sluice.relay.cold import MAX_COLD_READS, ColdRead
from sluice.schemas.events import decode_window
from sluice.web import BINARY_TYPE, errors_as_json, json_response, metrics_text

if TYPE_CHECKING:
    from sluice.relay.relay import Relay

log = logging.getLogger(__name__)


def make_app(relay: Relay) -> web.Application:
    app = web.Application(middlewares=[errors_as_json])
    api = _Api(relay)
    app.router.add_get("/stream", api.stream)
    app.router.add_get("/offsets", api.offsets)
    app.router.add_get("/stats", api.stats)
    app.router.add_get("/sources", api.sources)
    app.router.add_get("/schemas/{source:.+}", api.schemas)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_get("/healthz", api.healthz)
    return app


class _Api:
    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    async def offsets(self, request: web.Request) -> web.Response:
        """The SCN at which ``max_events`` events after ``since_scn`` end (whole windows)."""
        req = parse_offsets(request.query, frozenset(self.relay.tables))
        buffer = self.relay.buffer
        if req.since_scn < buffer.start_scn:
            raise HttpProblem(
                410,
                f"since_scn {req.since_scn} is older than this relay holds",
                oldest_scn=buffer.start_scn,
            )
        scn, events = wire.offset_after(
            _held_windows(buffer, req.since_scn), req.filter, req.since_scn, req.max_events
        )
        return json_response(200, {"scn": scn, "events": events, "max_scn": buffer.max_scn})

    async def stats(self, request: web.Request) -> web.Response:
        return json_response(200, self.relay.stats())

    async def sources(self, request: web.Request) -> web.Response:
        registry = self.relay.registry
        known = set(registry.sources())
        stopped = self.relay.stats()["capture"]["stopped_sources"]
        out = []
        for source in self.relay.tables:
            versions = registry.versions(source) if source in known else []
            out.append(
                {
                    "source": source,
                    "schema_version": versions[-1].version if versions else None,
                    "stopped": stopped.get(source),
                }
            )
        return json_response(200, {"sources": out})

    async def schemas(self, request: web.Request) -> web.Response:
        source = request.match_info["source"]
        if source not in self.relay.tables:
            raise HttpProblem(
                404,
                f"unknown source {source!r}; this relay captures: " + ", ".join(self.relay.tables),
            )
        try:
            versions = self.relay.registry.versions(source)
        except SchemaError:
            versions = []
        return json_response(200, {"source": source, "versions": [s.to_avro() for s in versions]})

    async def healthz(self, request: web.Request) -> web.Response:
        problem = self.relay.health_problem()
        if problem is not None:
            return json_response(503, problem)
        return json_response(200, {"status": "ok"})

    async def metrics(self, request: web.Request) -> web.Response:
        text = metrics_text("sluice_relay", self.relay.metrics())
        return web.Response(text=text, content_type="text/plain")

    async def stream(self, request: web.Request) -> web.StreamResponse:
        relay = self.relay
        req = parse_stream(
            request.query,
            frozenset(relay.tables),
            relay.config.max_response_bytes,
            relay.config.long_poll_ms,
        )
        buffer = relay.buffer
        if req.since_scn < buffer.start_scn:
            if request.query.get("cold") == "true" and req.since_scn > 0:
                return await self._cold(request, req)
            raise HttpProblem(
                410,
                f"since_scn {req.since_scn} is older than this relay holds; the oldest "
                f"servable SCN is {buffer.start_scn}: bootstrap the consumer",
                oldest_scn=buffer.start_scn,
                max_scn=buffer.max_scn,
            )
        if req.since_scn > max(buffer.max_scn, relay.source_end_scn):
            raise HttpProblem(
                409,
                f"since_scn {req.since_scn} is ahead of everything this relay and its "
                f"source have seen (max SCN {buffer.max_scn}): is the checkpoint from another "
                "source, or was the source rebuilt?",
                max_scn=buffer.max_scn,
            )
        return await self._respond(request, req, lambda streamer: streamer.run())

    async def _respond(
        self,
        request: web.Request,
        req: StreamRequest,
        body: Callable[[_Streamer], Awaitable[None]],
    ) -> web.StreamResponse:
        """A streamed answer: headers, ``body`` writing through a ``_Streamer``, the end."""
        relay = self.relay
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/x-ndjson" if req.json else BINARY_TYPE,
                "X-Sluice-Max-Scn": str(relay.buffer.max_scn),
                "Cache-Control": "no-store",
            }
        )
        await response.prepare(request)
        relay.clients += 1
        try:
            await body(_Streamer(relay, req, response))
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client went away
        finally:
            relay.clients -= 1
        return response

    async def _cold(self, request: web.Request, req: StreamRequest) -> web.StreamResponse:
        """Windows older than the buffer, read again from the source (relay/cold.py)."""
        relay = self.relay
        if relay.cold_reads >= MAX_COLD_READS:
            raise HttpProblem(503, "too many cold reads at once; retry in a second")
        relay.cold_reads += 1
        cold = ColdRead(relay, req.since_scn, relay.buffer.start_scn)
        try:
            await cold.start()
            return await self._respond(request, req, lambda streamer: _send_cold(cold, streamer))
        finally:
            relay.cold_reads -= 1
            await cold.close()


async def _send_cold(cold: ColdRead, streamer: _Streamer) -> None:
    last = cold.since
    async for record in cold.windows():
        last = wire.read_window_header(record).scn
        await streamer.send([record])
        if streamer.sent >= streamer.req.max_bytes:
            break
    if not streamer.req.json:  # so filtered readers move on, to the buffer's range if done
        await streamer.response.write(wire.encode_heartbeat(cold.until if cold.reached else last))


def _held_windows(buffer: EventBuffer, since_scn: int) -> Iterator[bytes]:
    """The buffer's windows after ``since_scn``, read lazily in chunks."""
    scn, cursor = since_scn, None
    while True:
        windows, cursor = buffer.read(scn, 1 << 20, cursor)
        if not windows:
            return
        yield from windows
        scn = wire.read_window_header(windows[-1]).scn


class _Streamer:
    """Writes windows after ``since_scn`` until ``max_bytes`` or the long-poll timeout."""

    def __init__(self, relay: Relay, req: StreamRequest, response: web.StreamResponse) -> None:
        self.relay = relay
        self.req = req
        self.response = response
        self.sent = 0

    async def run(self) -> None:
        relay, req = self.relay, self.req
        loop = asyncio.get_running_loop()
        deadline = loop.time() + req.timeout_ms / 1000
        scn, cursor, beat = req.since_scn, None, -1
        while self.sent < req.max_bytes and not relay.stopping:
            changed = relay.changed
            try:
                windows, cursor = relay.buffer.read(scn, req.max_bytes - self.sent, cursor)
            except BootstrapRequired:
                return  # overtaken while streaming: the next request gets the 410
            if windows:
                assert cursor is not None
                scn = cursor.scn
                await self.send(windows)
                continue
            if not req.json and beat != scn:
                await self.response.write(wire.encode_heartbeat(scn))
                beat = scn
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                return

    async def send(self, windows: list[bytes]) -> None:
        kept = [w for w in (wire.filter_window(w, self.req.filter) for w in windows) if w]
        if not kept:
            return
        data = self.json_response(kept) if self.req.json else b"".join(kept)
        self.sent += len(data)
        self.relay.bytes_served += len(data)
        await self.response.write(data)

    def json_response(self, windows: list[bytes]) -> bytes:
        lines = []
        for window in windows:
            for event in decode_window(window, self.relay.registry.codec).events:
                lines.append(json.dumps(event.to_json_dict(), ensure_ascii=False))
        return ("\n".join(lines) + "\n").encode()
