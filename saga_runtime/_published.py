"""What a running saga publishes for callers and UIs: events (the latest value of a key) and streams (values in
order), read from the saga's record while it runs (API.md §18). Readers hold no lease: a writer in this process
wakes them at once (`_engine._notices`); otherwise they find changes by reading the store, less often while idle."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import Any

from saga_runtime._engine._notices import watching
from saga_runtime._exceptions import SagaNotFoundError
from saga_runtime._records import SagaRow, SagaStatus, own_copy
from saga_runtime._storage import SagaStore

__all__ = ["PUBLISHED_KINDS", "follow", "get_event", "published", "read_stream"]

#: The kinds of history entries a saga publishes for readers.
PUBLISHED_KINDS = frozenset({"event", "stream", "stream_closed"})
_STREAM_KINDS = frozenset({"stream", "stream_closed"})

# A reader waits for a notice from this process's writer (`watching`), and reads the store at the latest after a
# pause that starts short and doubles while nothing changes: a saga run by another process is seen within
# `_MOST_PAUSE`, and an idle reader reads about once a second, not ten times.
_FIRST_PAUSE = 0.1
_MOST_PAUSE = 1.0


def _next_pause(pause: float, woken: bool) -> float:
    """Return the pause before the next read: short after a notice, else twice the last one, up to the most."""
    return _FIRST_PAUSE if woken else min(pause * 2, _MOST_PAUSE)


async def _saga(store: SagaStore, saga_id: str) -> SagaRow:
    stored = await store.load_saga(saga_id)
    if stored is None:
        raise SagaNotFoundError(f"no saga {saga_id!r} in {store.url}", saga_id=saga_id)
    return stored[0]


def _seconds(timeout: float | None) -> float:
    given: object = timeout
    if given is None:
        return 0.0
    if isinstance(given, bool) or not isinstance(given, int | float) or math.isnan(given) or given < 0:
        raise ValueError(f"timeout must be None or seconds >= 0, got {timeout!r}")
    return float(given)


def published(saga: SagaRow) -> list[dict[str, Any]]:
    """Return what a saga published, in the order it did: its events set, stream values and streams closed."""
    return [entry for entry in saga.history if entry.get("kind") in PUBLISHED_KINDS]


async def get_event(store: SagaStore, saga_id: str, key: str, wait_for: float | None) -> Any:
    """Return the latest value the saga set for `key`, waiting up to `wait_for` seconds for a first one (and for
    the saga to be stored); else None. A saga still unknown then raises `SagaNotFoundError`."""
    wait = _seconds(wait_for)
    until = time.monotonic() + wait
    pause = _FIRST_PAUSE
    with watching(store.url, saga_id) as watch:
        while True:
            stored = await store.load_saga(saga_id)
            left = until - time.monotonic()
            if stored is None:  # not stored yet (a run() just started): waited for within the timeout
                if left <= 0:
                    raise SagaNotFoundError(f"no saga {saga_id!r} in {store.url}", saga_id=saga_id)
            else:
                saga = stored[0]
                values = [e["value"] for e in saga.history if e.get("kind") == "event" and e.get("key") == key]
                if values:
                    return own_copy(values[-1])
                if left <= 0 or saga.status.is_terminal:
                    return None
            pause = _next_pause(pause, await watch.wait(min(pause, left)))


async def read_stream(store: SagaStore, saga_id: str, name: str, start: int) -> AsyncIterator[Any]:
    """Yield the values of the saga's stream `name` from offset `start`, in order, each once; wait for more until
    the stream is closed or the saga is terminal."""
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be an offset >= 0, got {start!r}")
    offset = start
    pause = _FIRST_PAUSE
    with watching(store.url, saga_id) as watch:
        while True:
            saga = await _saga(store, saga_id)
            entries = [e for e in saga.history if e.get("name") == name and e.get("kind") in _STREAM_KINDS]
            values = [e["value"] for e in entries if e["kind"] == "stream"]
            for value in values[offset:]:
                yield own_copy(value)
            if len(values) > offset:  # something came: look again soon
                pause = _FIRST_PAUSE
            offset = max(offset, len(values))
            if saga.status.is_terminal or any(e["kind"] == "stream_closed" for e in entries):
                return
            pause = _next_pause(pause, await watch.wait(pause))


async def follow(store: SagaStore, saga_id: str) -> AsyncIterator[SagaRow]:
    """Yield the saga's row as stored now, then again each time what it published or its status changed, until
    it is terminal (its last row yielded); raise `SagaNotFoundError` if the store has no such saga."""
    pause = _FIRST_PAUSE
    seen: tuple[int, SagaStatus] | None = None
    with watching(store.url, saga_id) as watch:
        while True:
            saga = await _saga(store, saga_id)
            now = (len(published(saga)), saga.status)
            if now != seen:
                seen, pause = now, _FIRST_PAUSE  # something came: look again soon
                yield saga
                if saga.status.is_terminal:
                    return
            pause = _next_pause(pause, await watch.wait(pause))
