"""A small async client of a Confluent-compatible schema registry (Sluice's own, or
Confluent's): register a schema under a subject and get its id, read a schema by id. Only the
documented endpoints (``POST /subjects/{s}/versions``, ``GET /schemas/ids/{id}``).

``async with RegistryClient(url) as registry: schema_id = await registry.register(subject,
avro_schema)``. Ids are cached by (subject, schema text); a registry that cannot be reached or
fails (5xx) is ``RegistryUnavailable`` (retriable), one that refuses (4xx) ``SchemaRejected``
naming the subject and the registry's message. Credentials in the URL
(``https://KEY:SECRET@host``) are sent as HTTP basic auth and never appear in errors.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import aiohttp

from sluice.core.component import AsyncComponent
from sluice.errors import ConfigError, RegistryUnavailable, SchemaRejected

__all__ = ["RegistryClient"]

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPT = (
    "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, application/json"
)


class RegistryClient(AsyncComponent):
    """One registry's client; ``stop()`` closes its HTTP session (safe twice)."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"a schema registry URL is http(s)://HOST[:PORT], got {url!r}")
        self._headers = {"Accept": ACCEPT}
        if parts.username:  # Confluent Cloud's API key and secret: HTTP basic auth
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        self.url = urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, str] = {}

    async def start(self) -> RegistryClient:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                headers=self._headers,
            )
        return self

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def register(self, subject: str, schema: dict[str, Any] | list[Any] | str) -> int:
        """The id of ``schema`` (an Avro schema as parsed JSON: a primitive is its name,
        ``"int"``) under ``subject``, registering it when the registry does not hold it there
        yet. Cached: the registry is asked once per subject and schema."""
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
        cached = self._ids.get((subject, text))
        if cached is not None:
            return cached
        path = f"/subjects/{quote(subject, safe='')}/versions"
        body = await self._call("POST", path, subject, {"schema": text})
        try:
            schema_id = int(body["id"])
        except (KeyError, TypeError, ValueError):
            raise RegistryUnavailable(
                f"schema registry {self.url}: no id in its answer for subject {subject!r}"
            ) from None
        self._ids[(subject, text)] = schema_id
        self._schemas.setdefault(schema_id, text)
        return schema_id

    async def schema(self, schema_id: int) -> str:
        """The text of the schema with this id."""
        text = self._schemas.get(schema_id)
        if text is None:
            body = await self._call("GET", f"/schemas/ids/{int(schema_id)}", None, None)
            text = str(body.get("schema", "")) if isinstance(body, dict) else ""
            self._schemas[schema_id] = text
        return text

    async def _call(self, method: str, path: str, subject: str | None, body: Any) -> Any:
        await self.start()
        assert self._session is not None
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": CONTENT_TYPE} if body is not None else None
        try:
            async with self._session.request(
                method, self.url + path, data=data, headers=headers
            ) as response:
                text = await response.text()
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise RegistryUnavailable(
                f"schema registry {self.url} unreachable: {type(exc).__name__} {exc}".rstrip()
            ) from None
        try:
            answer = json.loads(text) if text else {}
        except ValueError:
            answer = {"message": text[:200]}
        if status < 300:
            return answer
        message = answer.get("message") if isinstance(answer, dict) else None
        code = answer.get("error_code") if isinstance(answer, dict) else None
        about = f" for subject {subject!r}" if subject is not None else ""
        said = f"{message or f'HTTP {status}'}" + (f" (error {code})" if code else "")
        if 400 <= status < 500:
            raise SchemaRejected(
                f"schema registry {self.url} refused {method} {path}{about}: {said}",
                subject=subject,
                error_code=code if isinstance(code, int) else None,
            )
        raise RegistryUnavailable(f"schema registry {self.url} failed{about}: {said}")
