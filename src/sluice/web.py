"""aiohttp pieces shared by the relay and the bootstrap server: JSON answers and errors."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from sluice.core.requests import HttpProblem
from sluice.errors import ConfigError

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BINARY_TYPE = "application/x-sluice-stream"


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(body) + "\n",
        content_type="application/json",
        headers=headers,
    )


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error is a JSON body; nothing a client sends may crash the server."""
    try:
        return await handler(request)
    except HttpProblem as exc:
        return json_response(exc.status, exc.body, exc.headers)
    except web.HTTPException as exc:
        return json_response(exc.status, {"error": exc.reason})
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception as exc:
        log.exception("request %s failed", request.path_qs[:200])
        return json_response(500, {"error": f"internal error: {type(exc).__name__}"})


class RepeatedFailures(logging.Filter):
    """One line per distinct failure and interval, with a count of the repeats: a flood of the
    same error (``socket.accept() out of system resource`` when descriptors run out) must not
    fill the log."""

    def __init__(self, interval_s: float = 10.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = f"{record.name}:{record.msg}"
        now = time.monotonic()
        first, count = self._seen.get(key, (0.0, 0))
        if count and now - first < self.interval_s:
            self._seen[key] = (first, count + 1)
            return False
        if count > 1:
            record.msg = f"{record.msg} (and {count - 1} more like it in {self.interval_s:.0f} s)"
        self._seen[key] = (now, 1)
        return True  # the first of a kind keeps its traceback: the repeats add nothing


def quiet_repeated_failures() -> None:
    """Install ``RepeatedFailures`` on the loggers a crowd of clients can flood."""
    for name in ("asyncio", "aiohttp.server", "aiohttp.access"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RepeatedFailures) for f in logger.filters):
            logger.addFilter(RepeatedFailures())


class _ServerLog(logging.Logger):
    """``aiohttp.server`` as our servers log it (``AppRunner(logger=SERVER_LOG)``): a request
    that cannot be parsed (garbage, a bad header, a line too long) is one INFO line, and a
    client gone while its answer was written a DEBUG one, not aiohttp's ERROR with a
    traceback: a client's mistake is not the server's (issue 40). Any other exception stays
    an ERROR with its traceback."""

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging's name
        # Not cached: logging clears the level caches of the loggers it registered only, so
        # this one (made here, not by getLogger) kept a level computed before a setLevel
        # elsewhere (a test's caplog.set_level(INFO) found its INFO lines disabled).
        if self.manager.disable >= level:
            return False
        return level >= self.getEffectiveLevel()

    def exception(
        self,
        msg: object,
        *args: object,
        exc_info: Any = True,
        stack_info: bool = False,
        stacklevel: int = 1,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, HttpProcessingError) and exc.code < 500:
            self.info("refused a malformed request (%s): %s", _said(msg, args), exc)
        elif isinstance(exc, ConnectionError):
            self.debug("a client went away (%s): %r", _said(msg, args), exc)
        else:
            super().exception(
                msg,
                *args,
                exc_info=exc_info,
                stack_info=stack_info,
                stacklevel=stacklevel + 1,
                extra=extra,
            )


def _said(msg: object, args: tuple[object, ...]) -> str:
    try:
        return str(msg) % args if args else str(msg)
    except (TypeError, ValueError):
        return str(msg)


def _server_log() -> logging.Logger:
    """A ``_ServerLog`` named and placed like ``aiohttp.server`` (its handlers and level),
    without replacing the library's own logger."""
    logger = _ServerLog("aiohttp.server")
    logger.parent = logging.getLogger("aiohttp.server")
    logger.addFilter(RepeatedFailures())
    return logger


SERVER_LOG = _server_log()


def metrics_text(prefix: str, metrics: list[tuple[str, str, int | float]]) -> str:
    lines = []
    for name, kind, value in metrics:
        lines.append(f"# TYPE {prefix}_{name} {kind}")
        lines.append(f"{prefix}_{name} {value}")
    return "\n".join(lines) + "\n"


BACKLOG = 1024


async def start_site(runner: web.AppRunner, host: str, port: int) -> int:
    """Start listening; returns the bound port (for ``port=0``)."""
    quiet_repeated_failures()
    await runner.setup()
    # A deep accept queue: a burst of connects must not overflow it (a dropped SYN costs
    # its client a 1 s retransmit).
    site = web.TCPSite(runner, host, port, backlog=BACKLOG)
    try:
        await site.start()
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port"
        ) from None
    sockets = getattr(site._server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else port


def rss_bytes() -> int:
    """This process's resident memory now (Linux), or 0 where /proc has no answer."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
