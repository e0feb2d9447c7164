"""The HTTP rules every route shares: security headers, the Host check, who is authorized, same-origin POSTs."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from saga_runtime._console._guard import SECURITY_HEADERS, SESSION_COOKIE, Guard, is_loopback
from saga_runtime._console._service import Console

__all__ = ["SecurityMiddleware", "authorized", "console_of", "guard_of", "safe_next", "same_origin"]


class SecurityMiddleware:
    """Add the security headers to every response; on the loopback, refuse a Host that is not a loopback name.

    A page of another site can point a name it controls at 127.0.0.1 (DNS rebinding) and then read the console
    as same-origin; checking the Host header stops that.
    """

    def __init__(self, app: ASGIApp, *, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.loopback_only:
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not is_loopback(_hostname(host)):
                await _plain(send, 421, "the console answers to localhost / 127.0.0.1 only")
                return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def _hostname(host: str) -> str:
    """Return the name a Host header gives ("" when it is malformed, as "[::1" is)."""
    try:
        return urlsplit(f"//{host}").hostname or ""
    except ValueError:
        return ""


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def console_of(request: Request) -> Console:
    """Return the console the app serves (set up by its lifespan)."""
    console: Any = request.app.state.console
    return console  # type: ignore[no-any-return]


def guard_of(request: Request) -> Guard:
    """Return the app's guard: its token and per-process secret."""
    guard: Any = request.app.state.guard
    return guard  # type: ignore[no-any-return]


def authorized(request: Request) -> bool:
    """Tell whether the request carries the UI token: a Bearer header, or the session cookie of a login."""
    guard = guard_of(request)
    if guard.token is None:
        return True
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and guard.token_matches(given.strip()):
        return True
    return guard.session_matches(request.cookies.get(SESSION_COOKIE))


def same_origin(request: Request) -> bool:
    """Tell whether a POST comes from the console's own pages (or from no browser page at all)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:  # set by the browser itself, which no page can forge
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not sent by a browser page (curl, a script): the token and CSRF checks still apply
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:  # "http://[": no origin at all, refused
        return False
    return origin != "null" and netloc == request.headers.get("host", "")


def safe_next(value: str | None, default: str = "/") -> str:
    """Return `value` if it is a path of this console (never another site's address), else `default`."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    return value
