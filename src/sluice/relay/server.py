"""The relay's HTTP API (aiohttp): /stream, /stats, /sources, /schemas, /metrics, /healthz,
and the console at /ui."""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable, Iterator

from aiohttp import web

from sluice.console import add_console
from sluice.core import wire
from sluice.core.buffer import EventBuffer, Span
from sluice.core.requests import (
    HttpProblem,
    OffsetsRequest,
    StreamRequest,
    parse_offsets,
    parse_stream,
)
from sluice.errors import BootstrapRequired, ConfigError, SchemaError
from sluice.relay.cold import MAX_COLD_READS, ColdRead
from sluice.relay.turns import Turns
from sluice.relay.view import RelayView
from sluice.relay.windows import WindowFiles
from sluice.schemas.debezium import DebeziumOptions, DebeziumWindows
from sluice.schemas.events import json_lines
from sluice.web import BINARY_TYPE, errors_as_json, json_response, metrics_text

log = logging.getLogger(__name__)
# A stream reads and writes at most this much at a time, and writes the next chunk only once
# its client has taken the last: a stream's memory is bounded by it, whatever ``max_bytes``.
CHUNK_BYTES = 256 * 1024
# A stream's first piece of work up to this size needs no turn: what a client at the head
# reads (a window or a few); a catching-up stream's first read is bigger and waits its turn
FREE_FIRST_BYTES = 64 * 1024
# The work one turn allows: a loop iteration holds this much of the crowd's work per turn, so
# a client at the head waits behind no more (at 256 KiB its p99 under 200 catching up went
# 0.9 -> 4.9 ms; at 32 KiB 0.84 ms, the crowd reading as fast as before, /stats p99 0.7 ms)
TURN_BYTES = 32 * 1024


def make_app(relay: RelayView) -> web.Application:
    app = web.Application(middlewares=[errors_as_json])
    api = _Api(relay)
    app.router.add_get("/stream", api.stream)
    app.router.add_get("/offsets", api.offsets)
    app.router.add_get("/stats", api.stats)
    app.router.add_get("/sources", api.sources)
    app.router.add_get("/schemas/{source:.+}", api.schemas)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_get("/healthz", api.healthz)
    add_console(app)
    return app


class _Api:
    def __init__(self, relay: RelayView) -> None:
        self.relay = relay
        self.turns = relay.turns

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
        scn, events = await asyncio.to_thread(self._offset_after, req)
        return json_response(200, {"scn": scn, "events": events, "max_scn": buffer.max_scn})

    def _offset_after(self, req: OffsetsRequest) -> tuple[int, int]:
        """``wire.offset_after`` over the buffer, windows held in files counted from them.
        In a worker thread: the windows are read as ``_held_windows`` copies them."""
        scn, events = req.since_scn, 0
        for window in _held_windows(self.relay.buffer, req.since_scn):
            header = wire.read_window_header(window)
            if header.external_len and not req.filter.is_open:
                count = sum(
                    wire.count_events(piece, req.filter)
                    for piece in self.relay.windows.sub_windows(header.scn)
                )
            else:
                count = wire.count_events(window, req.filter)
            if events and events + count > req.max_events:
                break
            events += count
            scn = header.scn
        return scn, events

    async def stats(self, request: web.Request) -> web.Response:
        return json_response(200, self.relay.stats(tables=request.query.get("tables") == "1"))

    async def sources(self, request: web.Request) -> web.Response:
        registry = self.relay.registry
        known = set(registry.sources())
        capture = self.relay.stats()["capture"]
        stopped = capture["stopped_sources"]
        out = []
        for source in self.relay.tables:
            versions = registry.versions(source) if source in known else []
            out.append(
                {
                    "source": source,
                    "schema_version": versions[-1].version if versions else None,
                    "stopped": stopped.get(source),
                    **capture["tables"].get(source, {}),
                }
            )
        # "source": how event formats name the database (Debezium's source block)
        return json_response(200, {"sources": out, "source": self.relay.source_info})

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
        if relay.clients >= relay.config.max_clients:
            relay.rejected_clients += 1
            raise HttpProblem(
                503,
                f"this relay serves {relay.config.max_clients} streams at once (max_clients); "
                "retry in a second",
                headers={"Retry-After": "1"},
            )
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
        lines = _lines(relay, req)  # a 400 for bad format options, before the headers
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/x-ndjson" if req.json else BINARY_TYPE,
                "X-Sluice-Max-Scn": str(relay.buffer.max_scn),
                "Cache-Control": "no-store",
            }
        )
        relay.clients += 1
        relay.streams[id(request)] = request
        follower = relay.followers.enter(request)
        try:
            await response.prepare(request)
            await body(_Streamer(relay, req, response, self.turns, lines))
            await response.write_eof()
        except _Evicted:
            if request.transport is not None:
                request.transport.abort()  # a cut stream, never a clean end
        except (ConnectionResetError, ConnectionError):
            pass  # the client went away
        finally:
            relay.clients -= 1
            del relay.streams[id(request)]
            relay.followers.leave(follower)
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
        await streamer.take_turn(len(record))
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
    """Writes windows after ``since_scn`` until ``max_bytes`` or the long-poll timeout, a chunk
    at a time: each write waits until the client has taken the previous one, and every chunk
    of work after the first waits for its turn (relay/turns.py)."""

    def __init__(
        self,
        relay: RelayView,
        req: StreamRequest,
        response: web.StreamResponse,
        turns: Turns,
        lines: Callable[[bytes], Iterator[str]],
    ) -> None:
        self.relay = relay
        self.req = req
        self.response = response
        self.turns = turns
        self.sent = 0
        # Bytes copied, read, filtered or encoded for this stream, kept or not, and how far
        # the last turn lets it go (``take_turn``)
        self.work = 0
        self._allowed = 0
        self.lines = lines  # a window as JSON lines (format=json or debezium)

    async def run(self) -> None:
        relay, req = self.relay, self.req
        loop = asyncio.get_running_loop()
        deadline = loop.time() + req.timeout_ms / 1000
        scn, cursor, beat = req.since_scn, None, -1
        while self.sent < req.max_bytes and not relay.stopping:
            changed = relay.changed
            buffer = relay.buffer
            try:
                limit = min(req.max_bytes - self.sent, CHUNK_BYTES)
                spans, cursor = buffer.spans(scn, limit, cursor)
            except BootstrapRequired:
                return  # overtaken while streaming: the next request gets the 410
            if spans:
                assert cursor is not None
                for span in spans:
                    await self._send_span(buffer, span)
                scn = cursor.scn
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

    async def _send_span(self, buffer: EventBuffer, span: Span) -> None:
        """One window. Raw, it is copied out of the buffer a chunk at a time (a big
        transaction never sits whole in memory per client); a filtered or JSON stream needs
        the whole window, copied once. Each copy is checked against eviction before it is
        sent: a window overwritten while its client lagged cuts the stream (the client's retry
        then gets the 410)."""
        if span.external:
            await self._send_held(buffer, span)
            return
        if self.req.json or not self.req.filter.is_open:
            await self.take_turn(span.end - span.start)
            record = buffer.copy(span.start, span.end)
            _check_held(buffer, span)
            await self.send([record])
            return
        for start in range(span.start, span.end, CHUNK_BYTES):
            end = min(start + CHUNK_BYTES, span.end)
            await self.take_turn(end - start)
            piece = buffer.copy(start, end)
            _check_held(buffer, span)
            await self._write(piece)

    async def _send_held(self, buffer: EventBuffer, span: Span) -> None:
        """A window held in a file of its own, a chunk at a time: raw, its record as it is;
        JSON, its events in pieces; filtered, a record of the kept events, measured and
        checksummed in a first pass (the header goes first), then sent piece by piece."""
        files = self.relay.windows
        if self.req.json:
            for piece in files.sub_windows(span.scn, CHUNK_BYTES):
                await self.take_turn(len(piece))
                _check_held(buffer, span)
                await self.send([piece])
            return
        if not self.req.filter.is_open:
            await self._send_filtered(buffer, span)
            return
        for start in range(0, span.external, CHUNK_BYTES):
            end = min(start + CHUNK_BYTES, span.external)
            await self.take_turn(end - start)
            try:
                piece = await asyncio.to_thread(files.read, span.scn, start, end)
            except FileNotFoundError:
                raise _Evicted(f"window {span.scn} was evicted while its client lagged") from None
            _check_held(buffer, span)
            await self._write(piece)

    async def _send_filtered(self, buffer: EventBuffer, span: Span) -> None:
        flt, files = self.req.filter, self.relay.windows
        try:
            head = await asyncio.to_thread(_filtered_head, files, span.scn, flt)
        except FileNotFoundError:
            raise _Evicted(f"window {span.scn} was evicted while its client lagged") from None
        if head is None:
            return
        _check_held(buffer, span)
        await self._write(head)
        body_len = 0
        for piece in files.sub_windows(span.scn, CHUNK_BYTES):
            await self.take_turn(len(piece))  # kept or not: scanning it is the work
            kept = b"".join(
                piece[s:e]
                for s, e, key_hash, source, op in wire.iter_event_spans(piece)
                if flt.keeps(key_hash, source, op)
            )
            if kept:
                _check_held(buffer, span)
                body_len += len(kept)
                await self._write(kept)
        await self._write(wire.padding(body_len))

    async def send(self, windows: list[bytes]) -> None:
        """Filter and write ``windows`` (JSON: encoded in chunks, each one work to take a turn
        for); the caller has taken the turn for reading them."""
        kept = [w for w in (wire.filter_window(w, self.req.filter) for w in windows) if w]
        if not kept:
            return
        if not self.req.json:
            await self._write(b"".join(kept))
            return
        chunks = self.json_chunks(kept)
        data = next(chunks, None)
        while data is not None:
            await self._write(data)
            await self.take_turn(len(data))  # encoding the next chunk is bulk work too
            data = next(chunks, None)

    async def take_turn(self, size: int) -> None:
        """Before ``size`` bytes of work: a turn for each ``CHUNK_BYTES`` of it (or one piece,
        if bigger), the first one not queued behind streams catching up. Work, not bytes
        sent: a filter that keeps little sends little, and counting sent bytes let 200 such
        streams scan the whole buffer each without yielding the loop (issue 40: ``/stats``
        waited 9.6 s)."""
        if self.work + size > self._allowed:
            if not self.work and size <= FREE_FIRST_BYTES:
                # a client at the head: its few bytes at once, as before any turn (behind
                # 1,000 long polls woken by the same window, its p99 went 0.9 -> 4.9 ms)
                self._allowed = size
            else:
                await self.turns.take(first=not self.work)
                self._allowed = self.work + max(size, TURN_BYTES)
        self.work += size

    async def _write(self, data: bytes) -> None:
        self.sent += len(data)
        self.relay.bytes_served += len(data)
        await self.response.write(data)

    def json_chunks(self, windows: list[bytes]) -> Iterator[bytes]:
        """The windows' events as JSON lines, in chunks of about ``CHUNK_BYTES``."""
        lines: list[str] = []
        size = 0
        for window in windows:
            for text in self.lines(window):
                line = text + "\n"
                lines.append(line)
                size += len(line)
                if size >= CHUNK_BYTES:
                    yield "".join(lines).encode()
                    lines, size = [], 0
        if lines:
            yield "".join(lines).encode()


def _lines(relay: RelayView, req: StreamRequest) -> Callable[[bytes], Iterator[str]]:
    """How a JSON stream writes a window: Sluice's JSON lines, or (``format=debezium``)
    Debezium's envelopes; bad Debezium options, or a source without its conventions, are a
    400 before anything is streamed."""
    codec = relay.registry.codec
    if req.debezium is None:
        return lambda window: json_lines(window, codec)
    try:
        windows = DebeziumWindows(relay.source_info, DebeziumOptions.parse(dict(req.debezium)))
    except ConfigError as exc:
        raise HttpProblem(400, str(exc)) from None
    return lambda window: windows.lines(window, codec)


def _filtered_head(files: WindowFiles, scn: int, flt: wire.Filter) -> bytes | None:
    """The header, with its CRC, of the record of the held window's events that ``flt``
    keeps; None when it keeps none. Two passes over the file: the CRC starts with the header,
    which needs the count and length first."""

    def kept() -> Iterator[memoryview]:
        for piece in files.sub_windows(scn):
            view = memoryview(piece)
            for s, e, key_hash, source, op in wire.iter_event_spans(piece):
                if flt.keeps(key_hash, source, op):
                    yield view[s:e]

    count = body_len = 0
    for event in kept():
        count += 1
        body_len += len(event)
    if not count:
        return None
    first = wire.read_window_header(next(files.sub_windows(scn, 1)))
    head = wire.window_head(first.scn, first.prev_scn, first.ts_ms, count, body_len)
    crc = wire.crc_start(head)
    for event in kept():
        crc = zlib.crc32(event, crc)
    crc = zlib.crc32(wire.padding(body_len), crc)
    return head + crc.to_bytes(4, "little")


class _Evicted(ConnectionResetError):
    """The window being sent was overwritten: the stream is cut, not finished."""


def _check_held(buffer: EventBuffer, span: Span) -> None:
    if not buffer.holds(span.scn):
        raise _Evicted(f"window {span.scn} was evicted while its client lagged")
