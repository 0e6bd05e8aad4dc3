"""aiohttp pieces shared by the relay and the bootstrap server: JSON answers and errors."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sluice.core.requests import HttpProblem
from sluice.errors import ConfigError

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BINARY_TYPE = "application/x-sluice-stream"


def json_response(status: int, body: Any) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(body) + "\n", content_type="application/json"
    )


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error is a JSON body; nothing a client sends may crash the server."""
    try:
        return await handler(request)
    except HttpProblem as exc:
        return json_response(exc.status, exc.body)
    except web.HTTPException as exc:
        return json_response(exc.status, {"error": exc.reason})
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as exc:
        log.exception("request %s failed", request.path_qs[:200])
        return json_response(500, {"error": f"internal error: {type(exc).__name__}"})


def metrics_text(prefix: str, metrics: list[tuple[str, str, int | float]]) -> str:
    lines = []
    for name, kind, value in metrics:
        lines.append(f"# TYPE {prefix}_{name} {kind}")
        lines.append(f"{prefix}_{name} {value}")
    return "\n".join(lines) + "\n"


async def start_site(runner: web.AppRunner, host: str, port: int) -> int:
    """Start listening; returns the bound port (for ``port=0``)."""
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port"
        ) from None
    sockets = getattr(site._server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else port
