"""The web console at ``/ui``: one page for a relay, a bootstrap server and a sink.

The page is static (``static/``: HTML, CSS and vanilla JavaScript, no build step, no CDN)
and reads its own server's ``/stats`` and ``/healthz`` every second; what it shows depends
on the ``role`` that ``/stats`` names. It is read-only and holds no secrets: ``/stats``
gives URLs without passwords.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from aiohttp import web

_TYPES = {
    "index.html": "text/html",
    "console.js": "text/javascript",
    "console.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
_HEADERS = {
    "Cache-Control": "no-cache",
    # Only this server's own files and answers: no inline script, no other origin
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def add_console(app: web.Application) -> None:
    app.router.add_get("/ui", _to_page)
    app.router.add_get("/ui/", _page)
    app.router.add_get("/ui/{name}", _asset)


@cache
def _read(name: str) -> bytes:
    return (files("sluice.console") / "static" / name).read_bytes()


async def _to_page(request: web.Request) -> web.StreamResponse:
    # The page's relative links start from /ui/; relative, so a proxy's path prefix holds
    return web.Response(status=302, headers={"Location": "ui/"})


async def _page(request: web.Request) -> web.Response:
    return _answer("index.html")


async def _asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in _TYPES:
        raise web.HTTPNotFound(reason=f"no console file {name[:100]!r}")
    return _answer(name)


def _answer(name: str) -> web.Response:
    return web.Response(body=_read(name), content_type=_TYPES[name], headers=_HEADERS)
