"""A live saga's events and streams on its page, updated without a reload: Server-Sent Events, one reader per saga.

Why Server-Sent Events and not a JSON endpoint each page polls: the console reads the store once per saga
followed, whatever the number of pages following it (`Live` shares one reader, `follow()`, among them), and a
page costs an open connection that carries nothing while the saga publishes nothing. Polling would cost a request
and a store read per page per period, the same answer over and over; and a page would see a value one period late
at best, where here it is sent as soon as the reader sees it. The browser's `EventSource` reconnects by itself,
saying the last entry it had (`Last-Event-ID`), so a response may end at any time (each is bounded, so a stopping
server is never held by one) and the page misses nothing and gets nothing twice. A terminal saga's stream ends
with an `end` event, and the page closes it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from saga_runtime._console._guard import TOKEN_VAR
from saga_runtime._console._http import authorized
from saga_runtime._console._views import shown_json
from saga_runtime._exceptions import SagaNotFoundError
from saga_runtime._published import follow, published
from saga_runtime._records import SagaRow, mask_secrets
from saga_runtime._storage import SagaStore

__all__ = ["Live", "PublishedView", "StreamView", "live_routes", "published_of", "published_view"]

logger = logging.getLogger("saga_runtime")

# A response lasts at most this long; the browser reconnects from the last entry it has (a stopping server is
# held no longer than this by a page following a saga).
_RESPONSE_SECONDS = 25.0
# A comment sent when nothing else was for this long: proxies keep the connection, and a gone page is noticed.
_KEEPALIVE_SECONDS = 10.0
# How soon the browser reconnects after a response ended, in milliseconds.
_RETRY_MS = 500


@dataclass(frozen=True)
class StreamView:
    """A stream as a saga's page shows it: its values in order (as indented JSON), and whether it is closed."""

    name: str
    values: list[str]
    closed: bool


@dataclass(frozen=True)
class PublishedView:
    """What a saga published, as its page shows it: each event's latest value, each stream's values."""

    events: list[tuple[str, str]]
    streams: list[StreamView]
    count: int  # the entries published: the page follows the saga from there
    live: bool  # the saga is not terminal: the page follows it


def published_view(saga: SagaRow) -> PublishedView:
    """Return the events (latest value per key, in the order first set) and streams a saga published."""
    events: dict[str, str] = {}
    streams: dict[str, tuple[list[str], bool]] = {}
    entries = published(saga)
    for entry in entries:
        if entry["kind"] == "event":
            events[entry["key"]] = shown_json(entry["value"])
        else:
            values, closed = streams.get(entry["name"], ([], False))
            if entry["kind"] == "stream":
                values.append(shown_json(entry["value"]))
            streams[entry["name"]] = (values, closed or entry["kind"] == "stream_closed")
    return PublishedView(
        events=list(events.items()),
        streams=[StreamView(name, values, closed) for name, (values, closed) in streams.items()],
        count=len(entries),
        live=not saga.status.is_terminal,
    )


async def published_of(store: SagaStore, saga_id: str) -> PublishedView | None:
    """Return what a saga published, for its page (None: not in the store)."""
    stored = await store.load_saga(saga_id)
    return None if stored is None else published_view(stored[0])


@dataclass(eq=False)
class Feed:
    """One saga as the console's reader last saw it, shared by every page following it."""

    saga_id: str
    entries: list[dict[str, Any]] = field(default_factory=list)  # as sent: secrets masked, streams' offsets
    shown_status: str | None = None  # the saga's status as last read
    over: bool = False  # terminal, gone, or the reader stopped: nothing more comes
    missing: bool = False  # the store has no such saga
    failed: bool = False  # the reader failed: the pages reconnect, for a new one
    viewers: int = 0
    first: anyio.Event = field(default_factory=anyio.Event)  # set once the store was read
    changed: anyio.Event = field(default_factory=anyio.Event)  # replaced by a new one at each change
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def update(self, saga: SagaRow) -> None:
        """Take in the saga's row: its new entries and its status."""
        entries = published(saga)
        offsets: dict[str, int] = {}
        for entry in self.entries:
            if entry["kind"] == "stream":
                offsets[entry["name"]] = entry["offset"] + 1
        for entry in entries[len(self.entries) :]:
            shaped = {k: v for k, v in entry.items() if k in ("kind", "key", "name")}
            if "value" in entry:
                shaped["value"] = mask_secrets(entry["value"])
            if entry["kind"] == "stream":
                shaped["offset"] = offsets.get(entry["name"], 0)
                offsets[entry["name"]] = shaped["offset"] + 1
            self.entries.append(shaped)
        self.shown_status = saga.status.value
        self.over = saga.status.is_terminal
        self._wake()

    def stop(self, *, missing: bool = False) -> None:
        """Note that nothing more comes (`missing`: the store has no such saga)."""
        self.over, self.missing = True, self.missing or missing
        self._wake()

    def _wake(self) -> None:
        self.first.set()
        self.changed.set()
        self.changed = anyio.Event()


class Live:
    """The sagas the console's pages follow: one reader of the store per saga, started by its first page and
    stopped with its last (or when the saga is terminal), in the console's task group."""

    def __init__(self, store: SagaStore, tasks: TaskGroup) -> None:
        self.store = store
        self.tasks = tasks
        self.feeds: dict[str, Feed] = {}

    @asynccontextmanager
    async def feed(self, saga_id: str) -> AsyncIterator[Feed]:
        """Follow a saga for as long as the context lasts."""
        feed = self.feeds.get(saga_id)
        if feed is None:
            feed = self.feeds[saga_id] = Feed(saga_id)
            self.tasks.start_soon(self._read, feed)
        feed.viewers += 1
        try:
            yield feed
        finally:
            feed.viewers -= 1
            if feed.viewers == 0:  # the last page left: its reader stops, a later page starts another
                if self.feeds.get(saga_id) is feed:
                    del self.feeds[saga_id]
                feed.scope.cancel()

    async def _read(self, feed: Feed) -> None:
        try:
            with feed.scope:
                async for saga in follow(self.store, feed.saga_id):
                    feed.update(saga)
        except SagaNotFoundError:
            feed.stop(missing=True)
        except Exception:  # the store failed: the pages' responses end, and they reconnect for a new reader
            logger.warning("the console stopped following saga %s", feed.saga_id, exc_info=True)
            feed.failed = True
        finally:
            if self.feeds.get(feed.saga_id) is feed:
                del self.feeds[feed.saga_id]
            feed.stop()


def live_of(request: Request) -> Live:
    """Return the app's followed sagas (set up by its lifespan)."""
    live: Any = request.app.state.live
    return live  # type: ignore[no-any-return]


def _after(request: Request) -> int:
    """Return the entries the page has: the browser's Last-Event-ID on a reconnection, else `after`, else 0."""
    given = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        return max(0, int(given))
    except ValueError:
        return 0


def _message(data: dict[str, Any], *, event: str | None = None, entry_id: int | None = None) -> str:
    text = json.dumps(data, ensure_ascii=False, default=str)  # one line: JSON escapes every newline
    lines = ([f"event: {event}"] if event else []) + ([f"id: {entry_id}"] if entry_id is not None else [])
    return "\n".join([*lines, f"data: {text}"]) + "\n\n"


async def follow_saga(request: Request) -> Response:
    """Stream a saga's events and stream values as Server-Sent Events, from the entry the page has, until the
    saga is terminal or unknown (an `end` event) or the response's time is up (the browser reconnects)."""
    if not authorized(request):
        return JSONResponse(
            {"error": f"the UI token is required: send Authorization: Bearer <{TOKEN_VAR}>"}, status_code=401
        )
    saga_id = request.path_params["saga_id"]
    after = _after(request)
    live = live_of(request)

    async def body() -> AsyncIterator[str]:
        # Joined here, not before the response: left in `finally` however the response ends.
        async with live.feed(saga_id) as feed:
            yield f"retry: {_RETRY_MS}\n\n"
            await feed.first.wait()
            sent = min(after, len(feed.entries))
            status: str | None = None  # the status last sent
            until = anyio.current_time() + _RESPONSE_SECONDS
            while True:
                changed = feed.changed  # taken before reading: a change meanwhile sets it
                for number in range(sent, len(feed.entries)):
                    yield _message(feed.entries[number], entry_id=number + 1)
                sent = len(feed.entries)
                if feed.shown_status != status:
                    status = feed.shown_status
                    yield _message({"status": status}, event="status")
                if feed.over:
                    if not feed.failed:
                        yield _message({"status": feed.shown_status, "missing": feed.missing}, event="end")
                    return
                left = until - anyio.current_time()
                if left <= 0:
                    return
                with anyio.move_on_after(min(_KEEPALIVE_SECONDS, left)):
                    await changed.wait()
                if not changed.is_set():
                    yield ": keep-alive\n\n"

    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


def live_routes() -> list[BaseRoute]:
    """Return the route that streams a saga's events and streams."""
    return [Route("/api/follow/{saga_id:path}", follow_saga)]
