"""The web console: a front door that shows a store's sagas to people and lets an operator act on them.

`create_app()` returns a Starlette (ASGI) app; `saga-runtime ui` serves it with uvicorn. Its libraries (starlette,
uvicorn, jinja2) come with the `ui` extra, so nothing imports this package but the `ui` command and its tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from saga_runtime._admin import SagaAdmin
from saga_runtime._console._api import api_routes
from saga_runtime._console._guard import TOKEN_VAR, Guard, is_loopback
from saga_runtime._console._http import SecurityMiddleware
from saga_runtime._console._live import Live, live_routes
from saga_runtime._console._metrics import default_hook, metrics_routes
from saga_runtime._console._pages import page_routes
from saga_runtime._console._service import Console
from saga_runtime._storage import SagaStore, open_store
from saga_runtime._tools import ToolRegistry

if TYPE_CHECKING:
    from saga_runtime.metrics import PrometheusHook

__all__ = ["INSTALL_HINT", "TOKEN_VAR", "create_app", "is_loopback"]

INSTALL_HINT = "pip install 'saga-runtime[ui]'"


def create_app(
    store: SagaStore | str,
    *,
    registry: ToolRegistry | None = None,
    token: str | None = None,
    host: str = "127.0.0.1",
    signing_key: str | None = None,
    secret_key: str | None = None,
    metrics: PrometheusHook | None = None,
) -> Starlette:
    """Return the console app for a store (an open one, or a URL the app opens and closes with its lifespan).

    `registry`: your tools; with them a decided approval goes on with its saga here, and a compensation can be
    retried. `token`: required for every page, API call and action when set. `host`: where it will listen; beyond
    the loopback a token is required (`ValueError` without one), and on the loopback only loopback Host headers
    are answered. `metrics`: the `PrometheusHook` whose metrics `/metrics` serves (behind the token when one is
    set), e.g. the one your app's executor has; by default one of the console's own, counting what its actions
    run (without the `metrics` extra, `/metrics` answers 501).
    """
    guard = Guard(token)
    if not is_loopback(host) and token is None:
        raise ValueError(
            f"the console refuses to listen on {host!r}, beyond the loopback, without a token: set {TOKEN_VAR} "
            "or --token"
        )
    hook = metrics if metrics is not None else default_hook()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            opened = store
            if isinstance(opened, str):
                extra: dict[str, Any] = {} if signing_key is None else {"signing_key": signing_key}
                opened = await stack.enter_async_context(open_store(opened, **extra))
            hooks = () if hook is None else (hook,)
            admin = SagaAdmin(opened, registry=registry, secret_key=secret_key, hooks=hooks)
            stack.push_async_callback(admin.aclose)  # the tools' lifespan, if an action entered it
            app.state.console = Console(opened, admin, can_resume=registry is not None)
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)  # first out: the readers of followed sagas stop
            app.state.live = Live(opened, tasks)
            yield

    app = Starlette(
        routes=[
            *page_routes(),
            *live_routes(),
            *api_routes(),
            *metrics_routes(),
            Mount("/static", StaticFiles(directory=Path(__file__).with_name("static")), name="static"),
        ],
        middleware=[Middleware(SecurityMiddleware, loopback_only=is_loopback(host))],
        lifespan=lifespan,
    )
    app.state.guard = guard
    app.state.metrics = hook
    return app
