"""The console's HTML pages: the list, a saga's timeline, the approvals inbox, the queues, the login, the forms.

Templates are Jinja2 with autoescape on: every value from a record is escaped, and none is ever marked safe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from saga_runtime._console._guard import CSRF_COOKIE, CSRF_FIELD, SESSION_COOKIE
from saga_runtime._console._http import authorized, console_of, guard_of, safe_next, same_origin
from saga_runtime._console._live import published_of
from saga_runtime._console._service import CANCELLABLE, ActionRefused
from saga_runtime._console._views import STATUSES, duration, shown_json, timeline
from saga_runtime._records import END_REASONS, SagaStatus

__all__ = ["PAGE_SIZE", "page_routes"]

PAGE_SIZE = 25
REFRESH_SECONDS = 5
_ENV = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")),
    autoescape=True,  # every template, whatever its name: record content is always escaped
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["json"] = shown_json
_ENV.filters["duration"] = duration
_ENV.filters["path"] = lambda value: quote(str(value), safe="")
_ENV.filters["when"] = lambda value: "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def _page(request: Request, template: str, code: int = 200, **context: Any) -> HTMLResponse:
    """Render a page with the CSRF token its forms carry, setting the CSRF cookie on a first visit."""
    guard = guard_of(request)
    nonce = request.cookies.get(CSRF_COOKIE) or guard.new_nonce()
    context.update(
        request=request,
        csrf=guard.csrf_token(nonce),
        csrf_field=CSRF_FIELD,
        token_set=guard.token is not None,
        logged_in=guard.token is not None and authorized(request),
        message=request.query_params.get("msg"),
        here=_here(request),
    )
    response = HTMLResponse(_ENV.get_template(template).render(**context), status_code=code)
    if nonce != request.cookies.get(CSRF_COOKIE):
        _cookie(request, response, CSRF_COOKIE, nonce)
    return response


def _here(request: Request) -> str:
    """Return the page's own address without its message, for the forms to come back to."""
    query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "msg"])
    return request.url.path + (f"?{query}" if query else "")


def _cookie(request: Request, response: Response, name: str, value: str) -> None:
    secure = request.url.scheme == "https"
    response.set_cookie(name, value, httponly=True, samesite="strict", secure=secure, path="/")


def _to_login(request: Request) -> RedirectResponse:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?{urlencode({'next': here})}", status_code=303)


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


async def sagas_page(request: Request) -> Response:
    """Show the sagas, newest first: a status filter, an id search, pages, refreshing itself."""
    if not authorized(request):
        return _to_login(request)
    params = request.query_params
    status_text = params.get("status", "").upper()
    status = SagaStatus(status_text) if status_text in STATUSES else None
    search = params.get("q", "")
    reason = params.get("reason", "") if params.get("reason", "") in END_REASONS else ""
    try:
        number = max(1, int(params.get("page", "1")))
    except ValueError:
        number = 1
    queue = params.get("queue", "")
    offset = (number - 1) * PAGE_SIZE
    summaries, more = await console_of(request).find(
        status, search, limit=PAGE_SIZE, offset=offset, queue=queue, reason=reason or None
    )
    refresh = params.get("refresh") != "0"

    def link(**change: Any) -> str:
        values = {
            "status": status.value if status else "",
            "reason": reason,
            "q": search,
            "queue": queue,
            "page": number,
            **change,
        }
        return "/?" + urlencode({k: v for k, v in values.items() if v not in ("", None, 1)})

    return _page(
        request,
        "sagas.html",
        summaries=summaries,
        status=status.value if status else "",
        statuses=STATUSES,
        reason=reason,
        reasons=END_REASONS,
        search=search,
        queue=queue,
        number=number,
        newer=link(page=number - 1) if number > 1 else None,
        older=link(page=number + 1) if more else None,
        refresh=REFRESH_SECONDS if refresh else 0,
        toggle=link(refresh="0") if refresh else link(),
    )


async def saga_page(request: Request) -> Response:
    """Show one saga's timeline: groups, steps drawn to scale, approvals, compensations and the record's verdict."""
    if not authorized(request):
        return _to_login(request)
    saga_id = request.path_params["saga_id"]
    console = console_of(request)
    found = await console.saga(saga_id)
    if found is None:
        return _page(request, "refused.html", 404, refusal=f"no saga {saga_id!r} in the store", back="/")
    view = timeline(*found)
    cancellable = view.result.status in CANCELLABLE
    published = await published_of(console.store, saga_id)  # its events and streams, followed while it runs
    return _page(
        request,
        "saga.html",
        view=view,
        saga=view.result,
        can_resume=console.can_resume,
        cancellable=cancellable,
        published=published,
    )


async def approvals_page(request: Request) -> Response:
    """Show the steps waiting for a decision, oldest first, with approve and reject."""
    if not authorized(request):
        return _to_login(request)
    console = console_of(request)
    return _page(request, "approvals.html", requests=await console.pending(), can_resume=console.can_resume)


def _refused_form(request: Request, form: FormData, back: str) -> Response | None:
    """Refuse an action's form sent without the UI token's session (when set), or without this console's CSRF token."""
    if not authorized(request):
        refusal = "refused: actions need the UI token; log in with it first"
        return _page(request, "refused.html", 401, refusal=refusal, back=f"/login?{urlencode({'next': back})}")
    guard = guard_of(request)
    if not same_origin(request) or not guard.csrf_matches(request.cookies.get(CSRF_COOKIE), _field(form, CSRF_FIELD)):
        refusal = "refused: the form is stale or came from another site; reload the page and try again"
        return _page(request, "refused.html", 403, refusal=refusal, back=back)
    return None


async def queues_page(request: Request) -> Response:
    """Show the queues: sagas queued, running and waiting, the oldest queued, limits, and pause, resume, drain."""
    if not authorized(request):
        return _to_login(request)
    return _page(request, "queues.html", queues=await console_of(request).queues(), refresh=REFRESH_SECONDS)


async def queue_action(request: Request) -> Response:
    """Pause, resume or drain a queue from a form: the UI token (when set) and this console's CSRF token needed."""
    form = await request.form()
    back = safe_next(_field(form, "next"))
    if (refused := _refused_form(request, form, back)) is not None:
        return refused
    try:
        message = await console_of(request).queue_act(request.path_params["action"], _field(form, "queue"))
    except ActionRefused as exc:
        return _page(request, "refused.html", exc.http_status, refusal=str(exc), back=back)
    joiner = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{joiner}{urlencode({'msg': message})}", status_code=303)


async def login_page(request: Request) -> Response:
    """Ask for the UI token (GET), or check it and give a session cookie (POST)."""
    guard = guard_of(request)
    if request.method == "GET":
        return _page(request, "login.html", next=safe_next(request.query_params.get("next")))
    form = await request.form()
    target = safe_next(_field(form, "next"))
    if not same_origin(request) or not guard.csrf_matches(request.cookies.get(CSRF_COOKIE), _field(form, CSRF_FIELD)):
        return _page(request, "refused.html", 403, refusal="the form is stale: reload the page", back="/login")
    if not guard.token_matches(_field(form, "token")):
        return _page(request, "login.html", 401, next=target, failed=True)
    response = RedirectResponse(target, status_code=303)
    _cookie(request, response, SESSION_COOKIE, guard.session_value())
    return response


async def logout(request: Request) -> Response:
    """End the session (a POST with the CSRF token, so another site cannot log you out)."""
    form = await request.form()
    if not guard_of(request).csrf_matches(request.cookies.get(CSRF_COOKIE), _field(form, CSRF_FIELD)):
        return _page(request, "refused.html", 403, refusal="the form is stale: reload the page", back="/")
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


async def action(request: Request) -> Response:
    """Carry out an action from a form: the UI token (when set) and a CSRF token of this console are required."""
    form = await request.form()
    back = safe_next(_field(form, "next"))
    if (refused := _refused_form(request, form, back)) is not None:
        return refused
    try:
        outcome = await console_of(request).act(
            request.path_params["action"],
            _field(form, "saga_id"),
            step_id=_field(form, "step_id"),
            by=_field(form, "by"),
            note=_field(form, "note"),
            args_digest=_field(form, "args_digest"),
        )
    except ActionRefused as exc:
        return _page(request, "refused.html", exc.http_status, refusal=str(exc), back=back)
    joiner = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{joiner}{urlencode({'msg': outcome.message})}", status_code=303)


def page_routes() -> list[BaseRoute]:
    """Return the routes of the pages."""
    return [
        Route("/", sagas_page),
        Route("/sagas/{saga_id:path}", saga_page),
        Route("/approvals", approvals_page),
        Route("/queues", queues_page),
        Route("/queue-actions/{action}", queue_action, methods=["POST"]),
        Route("/login", login_page, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/actions/{action}", action, methods=["POST"]),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
    ]
