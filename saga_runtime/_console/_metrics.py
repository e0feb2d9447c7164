"""The console's /metrics: the Prometheus metrics of its hook, in the plain text format, behind the UI token."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from saga_runtime._console._guard import TOKEN_VAR
from saga_runtime._console._http import authorized, console_of

if TYPE_CHECKING:
    from saga_runtime.metrics import PrometheusHook

__all__ = ["METRICS_HINT", "default_hook", "metrics_routes"]

METRICS_HINT = "pip install 'saga-runtime[metrics]'"


def default_hook() -> PrometheusHook | None:
    """Return a hook of the console's own, or None without the `metrics` extra."""
    try:
        from saga_runtime.metrics import PrometheusHook
    except ImportError:
        return None
    return PrometheusHook()


async def metrics(request: Request) -> Response:
    """Return the metrics in Prometheus' plain text format (the UI token as a Bearer header when one is set)."""
    if not authorized(request):
        return PlainTextResponse(
            f"the UI token is required: send Authorization: Bearer <{TOKEN_VAR}>",
            status_code=401,
            headers={"www-authenticate": "Bearer"},
        )
    hook: Any = request.app.state.metrics
    if hook is None:
        return PlainTextResponse(f"metrics need prometheus-client: {METRICS_HINT}", status_code=501)
    from saga_runtime.metrics import CONTENT_TYPE

    # The waiting sagas are read at each scrape: the console drives nothing, so no worker samples them here.
    observe = getattr(hook, "observe_waiting", None)
    if callable(observe):
        observe(await console_of(request).admin.waiting_counts())
    return Response(hook.exposition(), headers={"content-type": CONTENT_TYPE})


def metrics_routes() -> list[BaseRoute]:
    """Return the /metrics route."""
    return [Route("/metrics", metrics)]
