"""``sluice bootstrap serve``: catch-up and snapshots over HTTP, in the relay's wire formats."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

from aiohttp import web

from sluice.bootstrap.health import fold_problem
from sluice.bootstrap.reader import StoreReader
from sluice.bootstrap.seed.records import ChunkDone, SeedRecords
from sluice.bootstrap.store import (
    GENERATION_SHIFT,
    BootstrapStore,
    Gap,
    gaps_after,
    generation_dir,
)
from sluice.console import add_console
from sluice.core import wire
from sluice.core.component import AsyncComponent
from sluice.core.names import redact
from sluice.core.requests import (
    MAX_SCN,
    HttpProblem,
    parse_offsets,
    parse_partition,
    parse_stream,
)
from sluice.schemas.events import decode_window
from sluice.web import (
    BINARY_TYPE,
    SERVER_LOG,
    errors_as_json,
    json_response,
    metrics_text,
    rss_bytes,
    start_site,
)

log = logging.getLogger(__name__)
# A connection without a complete request after this long is closed.
HEADER_TIMEOUT_S = 10.0
# Streams (/stream, /snapshot) served at once; each holds at most one run of the log or one
# Parquet batch of a snapshot (bootstrap/reader.py), so this bounds the server's memory.
MAX_CLIENTS = 32
_CHUNK = 256 * 1024
_DIGITS = re.compile(r"[0-9]{1,20}")  # ASCII digits only: str.isdigit() takes '²' too


class BootstrapServer(AsyncComponent):
    """``async with BootstrapServer(store_uri, port=0) as server:``; ``server.port``."""

    def __init__(
        self,
        store: str,
        host: str = "127.0.0.1",
        port: int = 7080,
        max_clients: int = MAX_CLIENTS,
        name: str = "bootstrap",
        relays: tuple[str, ...] = (),
    ) -> None:
        self.reader = StoreReader(BootstrapStore(store))
        self.name = name
        self.relays = relays  # the relays the store is fed from: the console links to them
        self._seed_chunks: dict[tuple[str, int], dict[int, ChunkDone]] = {}  # read once each
        self.host, self.port = host, port
        self.max_clients = max_clients
        self.clients = 0  # /stream and /snapshot answers being written now
        self.rejected_clients = 0
        self.requests = 0
        self.rows_served = 0
        self._runner: web.AppRunner | None = None
        self._fold_said: tuple[str, int] | None = None  # the fold problem last logged

    @property
    def sources(self) -> tuple[str, ...]:
        return self.reader.meta.sources

    async def start(self) -> BootstrapServer:
        app = web.Application(middlewares=[errors_as_json])
        for path, handler in (
            ("/stream", self.stream),
            ("/snapshot", self.snapshot),
            ("/offsets", self.offsets),
            ("/stats", self.stats),
            ("/sources", self.list_sources),
            ("/schemas/{source:.+}", self.schemas),
            ("/metrics", self.metrics),
            ("/healthz", self.healthz),
        ):
            app.router.add_get(path, handler)
        add_console(app)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            logger=SERVER_LOG,  # a client's mistake is an INFO line (web.py)
            handle_signals=False,
            handler_cancellation=True,
            shutdown_timeout=5,
            keepalive_timeout=HEADER_TIMEOUT_S,  # slowloris: see the relay
        )
        self.port = await start_site(self._runner, self.host, self.port)
        log.info(
            "bootstrap server for %s on http://%s:%d", self.reader.store.uri, self.host, self.port
        )
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- handlers ----------------------------------------------------------------------------
    def _stats(self) -> dict[str, Any]:
        view = self.reader.view()
        current = self.reader.store.current() or {}
        snapshot = current.get("scn")
        return {
            "role": "bootstrap",
            "name": self.name,
            "relays": [redact(url) for url in self.relays],
            "store": redact(self.reader.store.uri),
            "generations": self.reader.store.generations(),
            "log_start_scn": self.reader.meta.log_start_scn,
            "min_scn": self.reader.meta.log_start_scn,
            "max_scn": view.max_scn,
            "log_files": len(view.files),
            "snapshot_scn": snapshot,
            "snapshots": dict.fromkeys(self.sources, snapshot),
            "sources": list(self.sources),
            "rows_served": self.rows_served,
            "clients": self.clients,
            "rejected_clients": self.rejected_clients,
            "rss_bytes": rss_bytes(),
            "tables": self._tables(current, view.gaps),
            # the job's folds (bootstrap/health.py): last success, failures in a row, error
            "fold": self._fold_health()[0],
        }

    def _fold_health(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The job's fold status (with ``problem``: why folds are unhealthy, or None) and the
        problem's ``/healthz`` body. A change of health is one log line, not one per probe."""
        status = self.reader.store.fold_status()
        problem = fold_problem(status)
        said = None if problem is None else (str(problem["status"]), int(problem["failures"]))
        if said != self._fold_said:
            if problem is not None:
                log.warning("/healthz answers 503: %s", problem["error"])
            elif self._fold_said is not None:
                log.info("/healthz answers 200 again: the bootstrap job's folds work")
            self._fold_said = said
        if status is None:
            return None, None
        return {**status, "problem": None if problem is None else problem["error"]}, problem

    def _tables(self, current: dict[str, Any], gaps: list[Gap]) -> dict[str, Any]:
        """Per table: its seed, what the log covers, and the snapshot that serves it."""
        records = SeedRecords(self.reader.store)
        out: dict[str, Any] = {}
        for source in self.sources:
            seeded = records.seeded(source)
            out[source] = {
                "seeded": None if seeded is None else seeded.to_json(),
                # a seed being written now: its chunks so far, its pace and ETA
                "seeding": records.in_progress(source, self._seed_chunks),
                "seed_in_snapshot": current.get("seeds", {}).get(source),
                # A job behind the relay reads the range from the source's binlog through the
                # relay (cold read); only where the source purged it too is there a gap.
                "log": {
                    "first_scn": self.reader.meta.start_of(source),
                    "gaps": [g.to_json() for g in gaps if g.source == source],
                },
                "snapshot_scn": current.get("scn"),
            }
        return out

    async def stats(self, request: web.Request) -> web.Response:
        return json_response(200, await asyncio.to_thread(self._stats))

    async def healthz(self, request: web.Request) -> web.Response:
        _status, problem = await asyncio.to_thread(self._fold_health)
        if problem is not None:
            return json_response(503, problem)
        return json_response(200, {"status": "ok"})

    async def metrics(self, request: web.Request) -> web.Response:
        stats = await asyncio.to_thread(self._stats)
        text = metrics_text(
            "sluice_bootstrap",
            [
                ("log_max_scn", "gauge", stats["max_scn"]),
                ("snapshot_scn", "gauge", stats["snapshot_scn"] or 0),
                ("rows_served_total", "counter", self.rows_served),
                ("requests_total", "counter", self.requests),
                ("clients", "gauge", stats["clients"]),
                ("rejected_clients_total", "counter", stats["rejected_clients"]),
                ("rss_bytes", "gauge", stats["rss_bytes"]),
                # the job's folds: failures in a row, whether /healthz is 200 for them
                ("fold_failures", "gauge", (stats["fold"] or {}).get("failures", 0)),
                ("fold_healthy", "gauge", int(not (stats["fold"] or {}).get("problem"))),
                # chunks the seeds' fast path left to the row path (Seeded.fallback says why)
                (
                    "seed_fallback_chunks",
                    "gauge",
                    sum(
                        (t["seeded"] or {}).get("fallback_chunks", 0)
                        for t in stats["tables"].values()
                    ),
                ),
                ("fold_last_success_seconds", "gauge", (stats["fold"] or {}).get("ok_at") or 0),
            ],
        )
        return web.Response(text=text, content_type="text/plain")

    async def list_sources(self, request: web.Request) -> web.Response:
        await asyncio.to_thread(self.reader.refresh_meta)
        return json_response(200, {"sources": [{"source": s} for s in self.sources]})

    async def schemas(self, request: web.Request) -> web.Response:
        await asyncio.to_thread(self.reader.refresh_meta)
        source = request.match_info["source"]
        if source not in self.sources:
            raise HttpProblem(
                404, f"unknown source {source!r}; this store holds: " + ", ".join(self.sources)
            )
        body = await asyncio.to_thread(self.reader.reload_schemas)
        return json_response(200, {"source": source, "versions": body.get(source, [])})

    async def offsets(self, request: web.Request) -> web.Response:
        await asyncio.to_thread(self.reader.refresh_meta)
        req = parse_offsets(request.query, frozenset(self.sources))
        await asyncio.to_thread(self._check_since, req.since_scn, _names(req.filter.sources))

        def count() -> dict[str, Any]:
            frames = self.reader.log_windows(req.since_scn, req.filter, 1 << 62)
            windows = (f for f in frames if not isinstance(f, wire.Heartbeat))
            scn, events = wire.offset_after(windows, req.filter, req.since_scn, req.max_events)
            return {"scn": scn, "events": events}

        return json_response(200, await asyncio.to_thread(count))

    def _check_since(self, since: int, sources: list[str] | None) -> None:
        start = self.reader.meta.log_start_scn
        if since < start:
            raise HttpProblem(
                410,
                f"since_scn {since} is older than this store's log (it "
                f"starts after {start}): read the snapshot first",
                oldest_scn=start,
            )
        crossed = gaps_after(self.reader.view().gaps, since, sources)
        if crossed:
            gap = crossed[0]
            raise HttpProblem(
                410,
                f"the bootstrap log has a gap after SCN {gap.after_scn} up to "
                f"{gap.until_scn} ({gap.source}): the bootstrap job fell behind the relay and "
                "the source had purged those binlogs, so a consumer at SCN "
                f"{since} cannot catch up exactly; drop its state and start it again from "
                "SCN 0 (the snapshot)",
                gap=gap.to_json(),
                source=gap.source,
            )

    async def stream(self, request: web.Request) -> web.StreamResponse:
        await asyncio.to_thread(self.reader.refresh_meta)
        req = parse_stream(request.query, frozenset(self.sources), 8 << 20, 0)
        _no_debezium(req.debezium)
        await asyncio.to_thread(self._check_since, req.since_scn, _names(req.filter.sources))
        frames = self.reader.log_windows(req.since_scn, req.filter, req.max_bytes)
        return await self._send(request, frames, req.json)

    async def snapshot(self, request: web.Request) -> web.StreamResponse:
        await asyncio.to_thread(self.reader.refresh_meta)
        query = request.query
        current = self.reader.store.current_snapshot()
        if current is None:
            raise HttpProblem(503, "no snapshot yet: the bootstrap job has not folded the log")
        scn = _parse_snapshot_scn(query.get("snapshot_scn"), current)
        req = parse_stream({**query, "since_scn": "0"}, frozenset(self.sources), 8 << 20, 0)
        _no_debezium(req.debezium)
        after = _parse_after(query.get("after"))
        parse_partition(query.get("partition"))
        sources = list(req.sources or self.sources)
        folder = self._snapshot_folder(scn, current, after)
        behind = gaps_after((await asyncio.to_thread(self.reader.view)).gaps, scn, sources)
        if behind:
            raise HttpProblem(
                503,
                f"snapshot {scn} is older than a gap in the bootstrap log (after SCN "
                f"{behind[0].after_scn} up to {behind[0].until_scn}): retry once the "
                f"bootstrap job has seeded {behind[0].source} again and published a newer one",
            )
        frames = self.reader.snapshot_windows(
            scn, sources, req.filter, after, req.max_bytes, folder=folder
        )
        return await self._send(request, frames, req.json, {"X-Sluice-Snapshot-Scn": str(scn)})

    def _snapshot_folder(self, scn: int, current: int, after: tuple[str, int] | None) -> str:
        """The generation folder a snapshot read continues in: the one its cursor names (a
        re-seed may have republished the same SCN in a new folder meanwhile), else the
        current folder of ``scn``."""
        store = self.reader.store
        generation = 0 if after is None else max(0, after[1] >> GENERATION_SHIFT)
        folder = store.snapshot_dir(scn) if not generation else generation_dir(scn, generation)
        if (generation or scn != current) and not store.exists(folder):
            raise HttpProblem(
                410,
                f"snapshot {scn} (generation {generation or 1}) is gone; restart from "
                f"snapshot {current}",
                snapshot_scn=current,
            )
        return folder

    async def _send(
        self,
        request: web.Request,
        frames: Iterator[bytes | wire.Heartbeat],
        as_json: bool,
        headers: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        if self.clients >= self.max_clients:
            self.rejected_clients += 1
            raise HttpProblem(
                503,
                f"this server streams to {self.max_clients} clients at once (--max-clients); "
                "retry in a second",
                headers={"Retry-After": "1"},
            )
        self.requests += 1
        self.clients += 1
        try:
            return await self._write(request, frames, as_json, headers)
        finally:
            self.clients -= 1

    async def _write(
        self,
        request: web.Request,
        frames: Iterator[bytes | wire.Heartbeat],
        as_json: bool,
        headers: dict[str, str] | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/x-ndjson" if as_json else BINARY_TYPE,
                "Cache-Control": "no-store",
                **(headers or {}),
            }
        )
        await response.prepare(request)
        done = False
        try:
            while not done:
                chunk, done = await asyncio.to_thread(_next_chunk, frames, as_json, self)
                if chunk:
                    await response.write(chunk)
            await response.write_eof()
        except ConnectionError as exc:  # the client went away: its business, not an error
            log.debug("%s: the client went away (%s)", request.path_qs[:200], exc)
            if request.transport is not None:
                request.transport.abort()
        return response


def _no_debezium(options: object) -> None:
    if options is not None:
        raise HttpProblem(
            400,
            "format=debezium is served by the relay; the bootstrap server speaks binary and json",
        )


def _names(sources: frozenset[bytes] | None) -> list[str] | None:
    """A request filter's sources as names (None: every source)."""
    return None if sources is None else [s.decode() for s in sources]


def _parse_snapshot_scn(raw: str | None, current: int) -> int:
    if raw is None or raw == "":
        return current
    if not _DIGITS.fullmatch(raw) or int(raw) > MAX_SCN:
        raise HttpProblem(400, f"snapshot_scn must be an SCN (0 .. 2^63-1), got {raw[:30]!r}")
    return int(raw)


def _parse_after(raw: str | None) -> tuple[str, int] | None:
    """``SOURCE:CURSOR``, the cursor a snapshot window's ``prev_scn`` gave."""
    if not raw:
        return None
    source, _, cursor = raw.rpartition(":")
    if source and cursor == "-1":  # before the source's first row
        return source, -1
    if not source or not _DIGITS.fullmatch(cursor) or int(cursor) >= 1 << 64:
        raise HttpProblem(
            400, f"after must be SOURCE:CURSOR (the cursor a number), got {raw[:60]!r}"
        )
    return source, int(cursor)


def _next_chunk(
    frames: Iterator[bytes | wire.Heartbeat], as_json: bool, server: BootstrapServer
) -> tuple[bytes, bool]:
    """Up to ``_CHUNK`` bytes of frames (run in a thread: pyarrow and Avro work block)."""
    parts: list[bytes] = []
    size = 0
    for frame in frames:
        if isinstance(frame, wire.Heartbeat):
            if not as_json:
                parts.append(wire.encode_heartbeat(frame.scn))
            return b"".join(parts), True
        server.rows_served += wire.read_window_header(frame).n_events
        data = frame
        if as_json:
            window = decode_window(frame, server.reader.codec)
            data = "".join(
                json.dumps(e.to_json_dict(), ensure_ascii=False) + "\n" for e in window.events
            ).encode()
        parts.append(data)
        size += len(data)
        if size >= _CHUNK:
            return b"".join(parts), False
    return b"".join(parts), True
