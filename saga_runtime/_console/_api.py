"""The console's JSON API under /api/: the same sagas, timelines and approvals as the pages, and the same actions.

Reads need the UI token when one is set (a Bearer header, or the session cookie of a login). Actions need it
as a Bearer header, and a JSON body: a browser page of another site can send neither without the console's
consent (a CORS preflight it never grants), so the API needs no CSRF token.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from saga_runtime._console._guard import TOKEN_VAR
from saga_runtime._console._http import authorized, console_of, guard_of, same_origin
from saga_runtime._console._openapi import openapi
from saga_runtime._console._service import ActionRefused
from saga_runtime._console._views import STATUSES, approval_data, result_data, summary_data
from saga_runtime._records import END_REASONS, SagaStatus

__all__ = ["api_routes"]

_MAX_LIMIT = 500


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _refused_read(request: Request) -> JSONResponse | None:
    if authorized(request):
        return None
    return _error(f"the UI token is required: send Authorization: Bearer <{TOKEN_VAR}>", 401)


def _int(value: str | None, default: int, low: int, high: int) -> int:
    try:
        return min(high, max(low, int(value))) if value is not None else default
    except ValueError:
        return default


async def list_sagas(request: Request) -> Response:
    """Return a page of sagas, newest first (status, reason, q, limit, offset)."""
    if (refused := _refused_read(request)) is not None:
        return refused
    params = request.query_params
    status_text = params.get("status", "").upper()
    if status_text and status_text not in STATUSES:
        return _error(f"unknown status {status_text!r}: use one of {', '.join(STATUSES)}", 400)
    reason = params.get("reason") or None
    if reason is not None and reason not in END_REASONS:
        return _error(f"unknown reason {reason!r}: use one of {', '.join(END_REASONS)}", 400)
    limit = _int(params.get("limit"), 50, 1, _MAX_LIMIT)
    offset = _int(params.get("offset"), 0, 0, 10**9)
    found, more = await console_of(request).find(
        SagaStatus(status_text) if status_text else None,
        params.get("q", ""),
        limit=limit,
        offset=offset,
        reason=reason,
    )
    return JSONResponse({"sagas": [summary_data(s) for s in found], "more": more, "limit": limit, "offset": offset})


async def get_saga(request: Request) -> Response:
    """Return a saga's whole record, secrets masked, and whether its hash chain verifies."""
    if (refused := _refused_read(request)) is not None:
        return refused
    saga_id = request.path_params["saga_id"]
    found = await console_of(request).saga(saga_id)
    if found is None:
        return _error(f"no saga {saga_id!r} in the store", 404)
    return JSONResponse(result_data(*found))


async def list_approvals(request: Request) -> Response:
    """Return the requests waiting for a decision, oldest first, across sagas."""
    if (refused := _refused_read(request)) is not None:
        return refused
    limit = _int(request.query_params.get("limit"), 100, 1, _MAX_LIMIT)
    return JSONResponse({"approvals": [approval_data(r) for r in await console_of(request).pending(limit)]})


async def list_queues(request: Request) -> Response:
    """Return every queue: its sagas by state, the oldest queued, paused or draining, the known limits."""
    if (refused := _refused_read(request)) is not None:
        return refused
    queues = await console_of(request).queues()
    return JSONResponse({"queues": [{**q.model_dump(mode="json"), "state": q.state} for q in queues]})


def _refused_action(request: Request) -> JSONResponse | None:
    """Refuse an action without the token (as a Bearer header), a JSON body, or from a page of another site."""
    guard = guard_of(request)
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if guard.token is not None and not (scheme.lower() == "bearer" and guard.token_matches(given.strip())):
        return _error(f"actions need the UI token: send Authorization: Bearer <{TOKEN_VAR}>", 401)
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        return _error("send the action as a JSON body (Content-Type: application/json)", 415)
    if not same_origin(request):
        return _error("refused: the request came from a page of another site", 403)
    return None


async def queue_act(request: Request) -> Response:
    """Pause, resume or drain the queue a JSON body names: {"queue": NAME}."""
    if (refused := _refused_action(request)) is not None:
        return refused
    try:
        body: Any = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return _error("the body is not JSON", 400)
    if not isinstance(body, dict) or not isinstance(body.get("queue"), str):
        return _error('the body is a JSON object naming the queue: {"queue": NAME}', 400)
    try:
        message = await console_of(request).queue_act(request.path_params["action"], body["queue"])
    except ActionRefused as exc:
        return _error(str(exc), exc.http_status)
    [info] = [q for q in await console_of(request).queues() if q.name == body["queue"]]
    return JSONResponse({"message": message, "queue": {**info.model_dump(mode="json"), "state": info.state}})


async def act(request: Request) -> Response:
    """Carry out an action named in the path, with a JSON body: saga_id, and step_id, by, note, args_digest."""
    if (refused := _refused_action(request)) is not None:
        return refused
    try:
        body: Any = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # nested past the parser's limit
        return _error("the body is not JSON", 400)
    if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values() if v is not None):
        return _error("the body is a JSON object of strings: saga_id, step_id, by, note, args_digest", 400)
    fields = {k: body.get(k) or "" for k in ("saga_id", "step_id", "by", "note", "args_digest")}
    try:
        outcome = await console_of(request).act(request.path_params["action"], **fields)
    except ActionRefused as exc:
        return _error(str(exc), exc.http_status)
    saga = None
    if outcome.result is not None:
        found = await console_of(request).saga(outcome.result.saga_id)
        saga = None if found is None else result_data(*found)
    return JSONResponse({"message": outcome.message, "saga": saga})


async def openapi_document(request: Request) -> Response:
    """Return the OpenAPI description of this API."""
    return JSONResponse(openapi())


def api_routes() -> list[BaseRoute]:
    """Return the routes of the JSON API."""
    return [
        Route("/api/openapi.json", openapi_document),
        Route("/api/sagas", list_sagas),
        Route("/api/sagas/{saga_id:path}", get_saga),
        Route("/api/approvals", list_approvals),
        Route("/api/actions/{action}", act, methods=["POST"]),
        Route("/api/queues", list_queues),
        Route("/api/queue-actions/{action}", queue_act, methods=["POST"]),
    ]
