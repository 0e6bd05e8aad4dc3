"""The sink's HTTP face: ``/healthz``, ``/stats``, ``/metrics``; and its watcher, which asks a
relay for its newest SCN (lag) and writes checkpoints saved outside windows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import aiohttp
from aiohttp import web

from sluice.client.transport import newest_scn
from sluice.console import add_console
from sluice.core.rates import CounterHistory
from sluice.sink.group import GroupSink
from sluice.sink.sink import Sink
from sluice.web import errors_as_json, json_response, metrics_text, start_site

log = logging.getLogger(__name__)
WATCH_S = 1.0


class SinkServer:
    """``async with SinkServer(sink, host, port)``; ``port`` 0 picks a free one."""

    def __init__(self, sink: Sink | GroupSink, host: str, port: int) -> None:
        self.sink, self.host, self.port = sink, host, port
        self._runner: web.AppRunner | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.watch_error: str | None = None
        self.relay_error: str | None = None
        self.history = CounterHistory()  # events delivered over the last minutes (console)

    async def start(self) -> SinkServer:
        if self._runner is not None:
            raise RuntimeError("the sink server is already started")
        app = web.Application(middlewares=[errors_as_json])
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/metrics", self.metrics)
        add_console(app)
        self._runner = web.AppRunner(app, access_log=None)
        self.port = await start_site(self._runner, self.host, self.port)
        self.sink.console_url = f"http://{self.host}:{self.port}/ui"
        self._watcher = asyncio.create_task(self._watch(), name="sink-watch")
        self._watcher.add_done_callback(self._watch_ended)
        return self

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            # a watcher that failed was reported when it did (``_watch_ended``)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watcher
            self._watcher = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SinkServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _watch_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.watch_error = repr(task.exception())
            log.error("the sink's watcher stopped: %s", self.watch_error)

    async def _watch(self) -> None:
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                self.history.note(time.time(), self.sink.events)
                if self.sink.state == "running":  # lag means something once it delivers
                    await self._relay_max_scn(session)
                await self.sink.flush()
                await asyncio.sleep(WATCH_S)

    async def _relay_max_scn(self, session: aiohttp.ClientSession) -> None:
        """The newest SCN a relay holds (the sink's lag); when none answers, ``/stats`` says
        why (``relay_stats_error``) and the lag stays the last one known."""
        scn, problems = await newest_scn(session, self.sink.config.relays)
        if scn is not None:
            self.sink.relay_max_scn = scn
            self.relay_error = None
            return
        error = "; ".join(problems)
        if error != self.relay_error:
            log.warning("no relay answered /stats (lag unknown): %s", error)
        self.relay_error = error

    # -- handlers ----------------------------------------------------------------------------
    def _stats(self) -> dict[str, Any]:
        stats = self.sink.stats()
        stats["role"] = "sink"
        stats["throughput"] = self.history.rates(time.time())
        stats["watch_error"] = self.watch_error
        stats["relay_stats_error"] = self.relay_error
        return stats

    async def stats(self, request: web.Request) -> web.Response:
        return json_response(200, self._stats())

    async def healthz(self, request: web.Request) -> web.Response:
        stats = self._stats()
        problems = []
        if stats["state"] in ("failed", "stopped"):
            problems.append(f"sink {stats['state']}: {stats['error'] or 'stopped'}")
        if not stats["target_up"]:
            problems.append(f"target down for {stats['target_down_s']} s: {stats['target_error']}")
        if self.watch_error:
            problems.append(f"watcher stopped: {self.watch_error}")
        group = stats.get("group")
        if group is not None:  # a group member that holds nothing, and why
            if group["waiting"]:
                problems.append(f"group {group['group']}: {group['waiting']}")
            if group["coordinator_error"]:
                problems.append(f"coordinator: {group['coordinator_error']}")
        body = {"status": "ok" if not problems else "unhealthy", "problems": problems}
        body.update({k: stats[k] for k in ("state", "checkpoint_scn", "lag_scn", "lag_s")})
        return json_response(200 if not problems else 503, body)

    async def metrics(self, request: web.Request) -> web.Response:
        s = self._stats()
        lag_s = s["lag_s"] if s["lag_s"] is not None else 0
        text = metrics_text(
            "sluice_sink",
            [
                ("events_total", "counter", s["events"]),
                ("windows_total", "counter", s["windows"]),
                ("filtered_events_total", "counter", s["filtered_events"]),
                ("skipped_events_total", "counter", s["skipped_events"]),
                ("retries_total", "counter", s["retries"]),
                ("rewinds_total", "counter", s["rewinds"]),
                ("dead_letters_total", "counter", s["target_stats"].get("dead_letters", 0)),
                ("checkpoint_scn", "gauge", s["checkpoint_scn"] or 0),
                ("lag_scn", "gauge", s["lag_scn"] or 0),
                ("lag_seconds", "gauge", lag_s),
                ("events_per_second", "gauge", s["events_per_s"]),
                ("target_up", "gauge", int(s["target_up"])),
                *_group_metrics(s.get("group")),
                # the target's own counters (statements, published, duplicates, posts...)
                *(
                    (f"target_{name}", "gauge", value)
                    for name, value in sorted(s["target_stats"].items())
                    if isinstance(value, int | float) and not isinstance(value, bool)
                ),
            ],
        )
        return web.Response(text=text, content_type="text/plain")


def _group_metrics(group: dict[str, Any] | None) -> list[tuple[str, str, float]]:
    if group is None:
        return []
    lags = [h["lag_scn"] or 0 for h in group["held"].values()]
    return [
        ("group_members", "gauge", len(group["members"])),
        ("group_partitions", "gauge", group["partitions"]),
        ("group_partitions_held", "gauge", len(group["held"])),
        ("group_waiting", "gauge", int(bool(group["waiting"]))),
        ("group_session_losses_total", "counter", group["session_losses"]),
        ("group_rebalances_total", "counter", group["rebalances"]),
        ("group_max_partition_lag_scn", "gauge", max(lags, default=0)),
    ]


async def run_sink(sink: Sink | GroupSink, *, until_caught_up: bool = False) -> int:
    """The sink with its HTTP server; returns the checkpoint's SCN."""
    async with SinkServer(sink, sink.config.host, sink.config.port) as server:
        log.info("sink %s: /stats on http://%s:%d", sink.config.name, server.host, server.port)
        return await sink.run(until_caught_up=until_caught_up)
