"""`saga-runtime ui`: serve the web console (the `ui` extra: starlette, uvicorn, jinja2) on a store."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from saga_runtime._storage import open_store, redact_url, sagas
from saga_runtime._tools import ToolRegistry

__all__ = ["TOKEN_VAR", "UI_INSTALL_HINT", "UiError", "serve"]

TOKEN_VAR = "SAGA_RUNTIME_UI_TOKEN"  # the same name as the console's own, which needs the extra to import

UI_INSTALL_HINT = "pip install 'saga-runtime[ui]'"


class UiError(Exception):
    """The console cannot start: `usage` is True for a bad option, False for a missing extra."""

    def __init__(self, message: str, *, usage: bool) -> None:
        super().__init__(message)
        self.usage = usage


def serve(
    url: str,
    *,
    signing_key: str | None,
    registry: ToolRegistry | None,
    host: str,
    port: int,
    token: str | None,
    check: bool,
) -> None:
    """Serve the console of the store at `url` until interrupted (with `check`, only make sure it could)."""
    try:
        import jinja2  # noqa: F401  (only checking that the extra is installed)
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise UiError(
            f"the console needs {exc.name}, which is not installed: run {UI_INSTALL_HINT}", usage=False
        ) from None
    from saga_runtime._console import create_app

    try:
        app = create_app(url, registry=registry, token=token, host=host, signing_key=signing_key)
    except ValueError as exc:
        raise UiError(str(exc), usage=True) from None
    address = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    if check:
        count = asyncio.run(_count(url, signing_key))
        print(f"the console can serve {redact_url(url)} ({count} sagas on its first page) at {address}")
        return
    actions = "the UI token is required" if token else "no token: anyone on this machine may act"
    tools = "your tools run approved steps here" if registry else "decisions are recorded; a worker goes on"
    print(f"serving the console of {redact_url(url)} at {address} ({actions}; {tools}); Ctrl-C stops", flush=True)
    # A page following a live saga holds a response open: a stop waits for it no more than this.
    config: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "warning",
        "lifespan": "on",
        "timeout_graceful_shutdown": 3,
    }
    uvicorn.run(app, **config)
    sys.stdout.flush()


async def _count(url: str, signing_key: str | None) -> int:
    extra: dict[str, Any] = {} if signing_key is None else {"signing_key": signing_key}
    async with open_store(url, **extra) as store:
        return len(await sagas.list_sagas(store, limit=100))
