"""``sluice registry``: a schema registry speaking the part of Confluent's REST API that Kafka
serializers and deserializers use (confluent-kafka's ``SchemaRegistryClient``, Java's
``KafkaAvroSerializer``, Debezium through AvroConverter), over ``store.SchemaStore``.

Routes: ``GET /subjects``, ``GET /subjects/{s}/versions``, ``GET|DELETE /subjects/{s}``,
``POST /subjects/{s}`` (lookup), ``POST /subjects/{s}/versions`` (register),
``GET /subjects/{s}/versions/{v|latest}`` and its ``/schema``, ``GET /schemas/ids/{id}`` and
its ``/schema``, ``/subjects``, ``/versions``, ``GET /schemas/types``,
``GET|PUT|DELETE /config`` and ``/config/{s}``, ``GET /mode``. Answers and errors are
``application/vnd.schemaregistry.v1+json``, errors in Confluent's form
(``{"error_code": 40401, "message": "Subject 'x' not found."}``). Avro only, no references;
compatibility levels are kept, not enforced.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from aiohttp import web

from sluice.core.component import AsyncComponent
from sluice.registry.store import (
    RegistryProblem,
    SchemaStore,
    invalid_schema,
    parse_version,
    schema_not_found,
)
from sluice.web import SERVER_LOG, Handler, start_site

__all__ = ["CONTENT_TYPE", "RegistryServer", "registry_app"]

log = logging.getLogger(__name__)
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_STORE: web.AppKey[SchemaStore] = web.AppKey("store", SchemaStore)


def _answer(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(body, ensure_ascii=False), content_type=CONTENT_TYPE
    )


@web.middleware
async def _confluent_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error in Confluent's body form; nothing a client sends crashes the server."""
    try:
        return await handler(request)
    except RegistryProblem as exc:
        return _answer(exc.body(), exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _answer({"error_code": exc.status, "message": exc.reason}, exc.status)
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as exc:
        log.exception("request %s failed", request.path_qs[:200])
        return _answer({"error_code": 50001, "message": f"Error in the backend data store: "
                        f"{type(exc).__name__}"}, 500)  # fmt: skip


def _store(request: web.Request) -> SchemaStore:
    return request.app[_STORE]


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


def _schema_id(request: web.Request) -> int:
    try:
        return int(request.match_info["id"])
    except ValueError:
        raise schema_not_found() from None


async def _schema_text(request: web.Request) -> str:
    """The ``schema`` of a register or lookup body (Avro only, no references)."""
    try:
        body = await request.json()
    except ValueError:
        raise RegistryProblem(400, 400, "Request body is not JSON") from None
    if not isinstance(body, dict):
        raise invalid_schema("Request body must be a JSON object with a 'schema'")
    kind = body.get("schemaType") or "AVRO"
    if str(kind).upper() != "AVRO":
        raise invalid_schema(f"Sluice's registry serves Avro schemas only, not {kind}")
    if body.get("references"):
        raise invalid_schema("Sluice's registry does not support schema references")
    text = body.get("schema")
    if not isinstance(text, str):
        raise invalid_schema("Empty schema")
    return text


# -- handlers --------------------------------------------------------------------------------
async def root(_request: web.Request) -> web.Response:
    return _answer({})


async def subjects(request: web.Request) -> web.Response:
    return _answer(_store(request).subjects(deleted=_flag(request, "deleted")))


async def versions(request: web.Request) -> web.Response:
    found = _store(request).versions(request.match_info["subject"], _flag(request, "deleted"))
    return _answer([v.version for v in found])


async def version(request: web.Request) -> web.Response:
    number = parse_version(request.match_info["version"])
    return _answer(_store(request).version(request.match_info["subject"], number).to_json())


async def version_schema(request: web.Request) -> web.Response:
    number = parse_version(request.match_info["version"])
    found = _store(request).version(request.match_info["subject"], number)
    return web.Response(text=found.schema, content_type=CONTENT_TYPE)


async def register(request: web.Request) -> web.Response:
    text = await _schema_text(request)
    found = _store(request).register(request.match_info["subject"], text)
    return _answer({"id": found.id})


async def lookup(request: web.Request) -> web.Response:
    text = await _schema_text(request)
    return _answer(_store(request).lookup(request.match_info["subject"], text).to_json())


async def delete_subject(request: web.Request) -> web.Response:
    store = _store(request)
    return _answer(store.delete_subject(request.match_info["subject"], _flag(request, "permanent")))


async def schema_by_id(request: web.Request) -> web.Response:
    return _answer({"schema": _store(request).schema(_schema_id(request))})


async def schema_text_by_id(request: web.Request) -> web.Response:
    text = _store(request).schema(_schema_id(request))
    return web.Response(text=text, content_type=CONTENT_TYPE)


async def subjects_by_id(request: web.Request) -> web.Response:
    store, schema_id = _store(request), _schema_id(request)
    store.schema(schema_id)
    uses = store.uses(schema_id, _flag(request, "deleted"))
    return _answer(sorted({subject for subject, _ in uses}))


async def versions_by_id(request: web.Request) -> web.Response:
    store, schema_id = _store(request), _schema_id(request)
    store.schema(schema_id)
    uses = store.uses(schema_id, _flag(request, "deleted"))
    return _answer([{"subject": s, "version": v} for s, v in uses])


async def schema_types(_request: web.Request) -> web.Response:
    return _answer(["AVRO"])


def _config_subject(request: web.Request) -> str | None:
    return request.match_info.get("subject")


async def get_config(request: web.Request) -> web.Response:
    level = _store(request).level(_config_subject(request), _flag(request, "defaultToGlobal"))
    return _answer({"compatibilityLevel": level})


async def put_config(request: web.Request) -> web.Response:
    try:
        body = await request.json()
    except ValueError:
        raise RegistryProblem(400, 400, "Request body is not JSON") from None
    level = body.get("compatibility") if isinstance(body, dict) else None
    stored = _store(request).set_level(level, _config_subject(request))
    return _answer({"compatibility": stored})


async def delete_config(request: web.Request) -> web.Response:
    return _answer({"compatibilityLevel": _store(request).clear_level(_config_subject(request))})


async def mode(_request: web.Request) -> web.Response:
    return _answer({"mode": "READWRITE"})


def registry_app(store: SchemaStore) -> web.Application:
    """The registry's aiohttp application over ``store``."""
    app = web.Application(middlewares=[_confluent_errors])
    app[_STORE] = store
    r = app.router
    r.add_get("/", root)
    r.add_get("/subjects", subjects)
    r.add_post("/subjects/{subject}", lookup)
    r.add_delete("/subjects/{subject}", delete_subject)
    r.add_get("/subjects/{subject}/versions", versions)
    r.add_post("/subjects/{subject}/versions", register)
    r.add_get("/subjects/{subject}/versions/{version}", version)
    r.add_get("/subjects/{subject}/versions/{version}/schema", version_schema)
    r.add_get("/schemas/types", schema_types)
    r.add_get("/schemas/ids/{id}", schema_by_id)
    r.add_get("/schemas/ids/{id}/schema", schema_text_by_id)
    r.add_get("/schemas/ids/{id}/subjects", subjects_by_id)
    r.add_get("/schemas/ids/{id}/versions", versions_by_id)
    for path in ("/config", "/config/{subject}"):
        r.add_get(path, get_config)
        r.add_put(path, put_config)
        r.add_delete(path, delete_config)
    r.add_get("/mode", mode)
    return app


class RegistryServer(AsyncComponent):
    """``async with RegistryServer(data_dir, port=0) as server:``; ``server.port``. The store
    is opened (and its directory locked) by ``start()`` and closed by ``stop()``."""

    def __init__(self, data_dir: Path | None, host: str = "127.0.0.1", port: int = 8081) -> None:
        self.data_dir, self.host, self.port = data_dir, host, port
        self.store: SchemaStore | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> RegistryServer:
        if self._runner is not None:
            raise RuntimeError("the registry is already started")
        self.store = SchemaStore(self.data_dir)
        self._runner = web.AppRunner(
            registry_app(self.store),
            access_log=None,
            logger=SERVER_LOG,
            handle_signals=False,
            shutdown_timeout=5,
        )
        try:
            self.port = await start_site(self._runner, self.host, self.port)
        except BaseException:
            await self.stop()
            raise
        log.info("schema registry on %s (data in %s)", self.url, self.data_dir or "memory")
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.store is not None:
            self.store.close()
            self.store = None
