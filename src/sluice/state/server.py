"""The state service's HTTP face.

- ``GET /state/{db.table}?COL=VALUE[&COL2=VALUE2][&min_scn=N&timeout_ms=T]``: the key's
  current row ``{"source", "key", "row", "scn", "ts_ms", "store_scn"}`` (``scn``/``ts_ms``: the
  window that wrote it; ``store_scn``: what the whole store reflects); 404 with ``store_scn``
  when the key has no row; ``min_scn`` waits (up to ``timeout_ms``, default 5000) until the
  store reflects SCN N first, else 504 saying where it stands (read your writes).
- ``POST /state/{db.table}`` with ``{"keys": [{COL: VALUE...}, ...], "min_scn": N,
  "timeout_ms": T}``: ``{"rows": [row or null, ...], "store_scn"}`` in the keys' order.
- ``/healthz``, ``/stats``, ``/metrics``, and the console at ``/ui``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp
from aiohttp import web

from sluice.console import add_console
from sluice.core.requests import HttpProblem
from sluice.state.group import StateGroup
from sluice.state.service import StateConfig, StateService
from sluice.state.store import key_text
from sluice.web import errors_as_json, json_response, metrics_text, start_site

log = logging.getLogger(__name__)
FORWARDED = "X-Sluice-Forwarded-By"  # a lookup forwarded once is not forwarded again
WAIT_MS = 5000
MAX_WAIT_MS = 300_000
MAX_KEYS = 10_000


class StateServer:
    """``async with StateServer(service, host, port)``; ``port`` 0 picks a free one. With a
    ``group``, ``service`` is None and each lookup goes to the partition's service here, or
    is forwarded to the member that holds it."""

    def __init__(
        self,
        service: StateService | None,
        host: str,
        port: int,
        group: StateGroup | None = None,
        config: StateConfig | None = None,
    ) -> None:
        self.service, self.group, self.host, self.port = service, group, host, port
        self.config = config or (service.config if service is not None else None)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.lookups = self.misses = self.waits_timed_out = self.forwarded = 0

    async def start(self) -> StateServer:
        app = web.Application(middlewares=[errors_as_json])
        app.router.add_get("/state/owner", self.owner)
        app.router.add_get("/state/{source}", self.get)
        app.router.add_post("/state/{source}", self.multi_get)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/metrics", self.metrics)
        add_console(app)
        self._runner = web.AppRunner(app, access_log=None)
        self.port = await start_site(self._runner, self.host, self.port)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=330))
        return self

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> StateServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- lookups -------------------------------------------------------------------------------
    async def get(self, request: web.Request) -> web.Response:
        source = self._source(request)
        query = dict(request.query)
        min_scn, timeout = query.pop("min_scn", None), query.pop("timeout_ms", None)
        key = self._key(source, query)
        service = self._local(source, key)
        if service is None:
            return await self._forward(request, source, key)
        await self._wait(service, min_scn, timeout)
        return self._answer(service, source, key)

    async def owner(self, request: web.Request) -> web.Response:
        """Which partition a key is in, and which member holds it."""
        query = dict(request.query)
        source = query.pop("source", "")
        if not source:
            raise HttpProblem(400, "name the table: /state/owner?source=DB.TABLE&COLUMN=VALUE")
        key = self._key(source, query)
        if self.group is None:
            return json_response(200, {"partition": None, "member": None, "here": True})
        partition = self.group.partition_of(key_text(key))
        member = self.group.owner(partition)
        return json_response(200, {
            "partition": partition, "member": None if member is None else member["id"],
            "url": None if member is None else member.get("url"),
            "here": partition in self.group.services,
        })  # fmt: skip

    def _local(self, source: str, key: dict[str, Any]) -> StateService | None:
        if self.group is None:
            assert self.service is not None
            return self.service
        return self.group.services.get(self.group.partition_of(key_text(key)))

    async def _forward(
        self, request: web.Request, source: str, key: dict[str, Any]
    ) -> web.Response:
        """To the partition's owner, else (it does not answer) its standbys in turn; once: a
        forwarded lookup that finds no copy here either is 503 (the partition is moving)."""
        assert self.group is not None and self._session is not None
        partition = self.group.partition_of(key_text(key))
        urls = [m.get("url") for m in self.group.holders(partition)]
        urls = [u for u in urls if u and u != self.group.url]
        if request.headers.get(FORWARDED) or not urls:
            raise HttpProblem(503, f"partition {partition} of {source} is moving between "
                              "members; try again", partition=partition)  # fmt: skip
        failures = []
        for url in urls:
            self.forwarded += 1
            try:
                headers = {FORWARDED: self.group.url}
                async with self._session.get(f"{url}{request.path_qs}", headers=headers) as resp:
                    body = await resp.read()
                    return web.Response(status=resp.status, body=body,
                                        content_type="application/json")  # fmt: skip
            except (aiohttp.ClientError, TimeoutError) as exc:
                failures.append(f"{url}: {type(exc).__name__}")
        raise HttpProblem(
            503,
            f"no member holding partition {partition} answered ({'; '.join(failures)}); try again",
            partition=partition,
        )

    async def multi_get(self, request: web.Request) -> web.Response:
        source = self._source(request)
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise HttpProblem(400, 'the body must be JSON: {"keys": [{...}, ...]}') from None
        keys = body.get("keys") if isinstance(body, dict) else None
        if not isinstance(keys, list) or not all(isinstance(k, dict) for k in keys):
            raise HttpProblem(400, 'the body must be {"keys": [{COLUMN: VALUE, ...}, ...]}')
        if len(keys) > MAX_KEYS:
            raise HttpProblem(400, f"at most {MAX_KEYS} keys per request, got {len(keys)}")
        if self.group is not None:  # each key where its partition is
            return await self._multi_group(request, source, keys, body)
        assert self.service is not None
        min_scn, timeout = body.get("min_scn"), body.get("timeout_ms")
        await self._wait(self.service, None if min_scn is None else str(min_scn),
                         None if timeout is None else str(timeout))  # fmt: skip
        reader, rows = self.service.reader, []
        for key in keys:
            self._check_columns(source, key)
            found = reader.get(source, key_text(key))
            self.lookups += 1
            rows.append(None if found is None else found.row)
        return json_response(200, {"rows": rows, "store_scn": self.service.store_scn})

    async def _multi_group(
        self, request: web.Request, source: str, keys: list[dict[str, Any]], body: dict[str, Any]
    ) -> web.Response:
        rows: list[Any] = []
        for key in keys:
            params = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in key.items()}
            params.update({k: str(body[k]) for k in ("min_scn", "timeout_ms") if k in body})
            sub = request.clone(rel_url=request.rel_url.with_query(params))
            answer = await self.get(sub)
            rows.append(
                json.loads(answer.text or "{}").get("row") if answer.status == 200 else None
            )
            if answer.status not in (200, 404):
                return answer
        return json_response(200, {"rows": rows})

    def _answer(self, service: StateService, source: str, key: dict[str, Any]) -> web.Response:
        self.lookups += 1
        found = service.reader.get(source, key_text(key))
        store_scn = service.store_scn
        if found is None:
            self.misses += 1
            return json_response(404, {"error": f"{source} has no row with key {key_text(key)}",
                                       "key": key, "store_scn": store_scn})  # fmt: skip
        return json_response(200, {"source": source, "key": key, "row": found.row,
                                   "scn": found.scn, "ts_ms": found.ts_ms,
                                   "store_scn": store_scn})  # fmt: skip

    def _source(self, request: web.Request) -> str:
        source = request.match_info["source"]
        assert self.config is not None
        followed = self.config.sources
        if followed and source not in followed:
            raise HttpProblem(404, f"this store does not follow {source!r}; it follows: "
                              + ", ".join(followed))  # fmt: skip
        return source

    def _key(self, source: str, query: dict[str, str]) -> dict[str, Any]:
        """The key from query parameters, typed as the source's key columns are."""
        if not query:
            raise HttpProblem(400, f"name the key: /state/{source}?COLUMN=VALUE[&COLUMN=VALUE]")
        types = self._types(source) or {}
        key = {name: _typed(value, types.get(name)) for name, value in query.items()}
        self._check_columns(source, key)
        return key

    def _types(self, source: str) -> dict[str, str] | None:
        """The key's columns and JSON types, from any store here that has the table."""
        services = [self.service] if self.service is not None else []
        if self.group is not None:
            services = list(self.group.services.values())
        for service in services:
            types = service.reader.key_columns(source)
            if types is not None:
                return types
        return None

    def _check_columns(self, source: str, key: dict[str, Any]) -> None:
        types = self._types(source)
        if types is not None and set(key) != set(types):
            raise HttpProblem(400, f"{source}'s key is {', '.join(sorted(types))}; "
                              f"got {', '.join(sorted(key)) or 'nothing'}")  # fmt: skip

    async def _wait(
        self, service: StateService, min_scn: str | None, timeout_ms: str | None
    ) -> None:
        if min_scn is None:
            return
        scn, wait = _int(min_scn, "min_scn"), _int(timeout_ms or str(WAIT_MS), "timeout_ms")
        if not 0 <= wait <= MAX_WAIT_MS:
            raise HttpProblem(400, f"timeout_ms must be 0..{MAX_WAIT_MS}, got {wait}")
        if not await service.wait_scn(scn, wait / 1000):
            self.waits_timed_out += 1
            raise HttpProblem(
                504,
                f"the store reflects SCN {service.store_scn}, not yet {scn}, after "
                f"{wait} ms ({service.phase}); try again or raise timeout_ms",
                store_scn=service.store_scn,
            )

    # -- operations ----------------------------------------------------------------------------
    def _stats(self) -> dict[str, Any]:
        if self.service is not None:
            stats = self.service.stats()
        else:
            assert self.group is not None and self.config is not None
            parts = [s.stats() for s in self.group.services.values()]
            scns = [p["store_scn"] for p in parts]
            keys: dict[str, int] = {}
            for part in parts:
                for table, n in part["keys"].items():
                    keys[table] = keys.get(table, 0) + n
            # a member holding no partition (more members than partitions) is idle, not
            # restoring: it answers by forwarding
            phase = "idle" if not parts else "online" if None not in scns else "restoring"
            stats = {
                "name": self.config.name, "role": "state", "store": str(self.config.store),
                "phase": phase,
                "store_scn": min(scns) if parts and None not in scns else None,
                "checkpoint": None, "keys": keys,
                **{k: self.group.past[k] + sum(p[k] for p in parts)
                   for k in ("windows", "changes", "events")},
                "keyless_skipped": sorted({t for p in parts for t in p["keyless_skipped"]}),
                "relays": list(self.config.relays), "bootstrap": self.config.bootstrap,
                "error": next((p["error"] for p in parts if p["error"]), None),
                "group": self.group.stats(),
            }  # fmt: skip
        stats.update(lookups=self.lookups, misses=self.misses, forwarded=self.forwarded,
                     waits_timed_out=self.waits_timed_out)  # fmt: skip
        return stats

    async def stats(self, request: web.Request) -> web.Response:
        return json_response(200, self._stats())

    async def healthz(self, request: web.Request) -> web.Response:
        stats = self._stats()
        problems = [f"stopped: {stats['error']}"] if stats["error"] else []
        if stats["store_scn"] is None and stats["phase"] != "idle":
            problems.append(f"restoring ({stats['phase']}): no SCN reflected yet")
        group = stats.get("group")
        if group is not None:  # as a sink group member says it
            if group["waiting"]:
                problems.append(f"group {group['group']}: {group['waiting']}")
            if group["coordinator_error"]:
                problems.append(f"coordinator: {group['coordinator_error']}")
        body = {"status": "ok" if not problems else "unhealthy", "problems": problems,
                "store_scn": stats["store_scn"], "phase": stats["phase"]}  # fmt: skip
        return json_response(200 if not problems else 503, body)

    async def metrics(self, request: web.Request) -> web.Response:
        s = self._stats()
        text = metrics_text("sluice_state", [
            ("lookups_total", "counter", s["lookups"]),
            ("misses_total", "counter", s["misses"]),
            ("waits_timed_out_total", "counter", s["waits_timed_out"]),
            ("windows_total", "counter", s["windows"]),
            ("changes_total", "counter", s["changes"]),
            ("store_scn", "gauge", s["store_scn"] or 0),
            ("keys", "gauge", sum(s["keys"].values())),
        ])  # fmt: skip
        return web.Response(text=text, content_type="text/plain")


def _typed(value: str, kind: str | None) -> Any:
    """A query parameter as the key column's JSON value (a number, text, a boolean)."""
    if kind == "string":
        return value
    if kind == "bool":
        return value.lower() in ("1", "true")
    try:
        parsed = json.loads(value)
    except ValueError:
        if kind == "number":
            raise HttpProblem(400, f"{value[:40]!r} is not a number") from None
        return value
    return parsed if kind != "number" or isinstance(parsed, int | float) else value


def _int(raw: str, name: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise HttpProblem(400, f"{name} must be an integer, got {raw[:40]!r}") from None
