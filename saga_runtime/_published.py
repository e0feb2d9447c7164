"""What a running saga publishes for callers and UIs: events (the latest value of a key) and streams (values in
order), read from the saga's record while it runs (API.md §18). Readers poll the store; they hold no lease."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from saga_runtime._exceptions import SagaNotFoundError
from saga_runtime._records import SagaRow, own_copy
from saga_runtime._storage import SagaStore

__all__ = ["get_event", "read_stream"]

# How often a reader looks at the record again while it waits.
_POLL = 0.1


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


async def get_event(store: SagaStore, saga_id: str, key: str, wait_for: float | None) -> Any:
    """Return the latest value the saga set for `key`, waiting up to `wait_for` seconds for a first one (and for
    the saga to be stored); else None. A saga still unknown then raises `SagaNotFoundError`."""
    wait = _seconds(wait_for)
    until = time.monotonic() + wait
    while True:
        stored = await store.load_saga(saga_id)
        left = until - time.monotonic()
        if stored is None:  # not stored yet (a run() just started): waited for within the timeout
            if left <= 0:
                raise SagaNotFoundError(f"no saga {saga_id!r} in {store.url}", saga_id=saga_id)
            await anyio.sleep(min(_POLL, left))
            continue
        saga = stored[0]
        values = [e["value"] for e in saga.history if e.get("kind") == "event" and e.get("key") == key]
        if values:
            return own_copy(values[-1])
        if left <= 0 or saga.status.is_terminal:
            return None
        await anyio.sleep(min(_POLL, left))


async def read_stream(store: SagaStore, saga_id: str, name: str, start: int) -> AsyncIterator[Any]:
    """Yield the values of the saga's stream `name` from offset `start`, in order, each once; wait for more until
    the stream is closed or the saga is terminal."""
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be an offset >= 0, got {start!r}")
    offset = start
    while True:
        saga = await _saga(store, saga_id)
        entries = [e for e in saga.history if e.get("name") == name and e.get("kind") in ("stream", "stream_closed")]
        values = [e["value"] for e in entries if e["kind"] == "stream"]
        for value in values[offset:]:
            yield own_copy(value)
        offset = max(offset, len(values))
        if saga.status.is_terminal or any(e["kind"] == "stream_closed" for e in entries):
            return
        await anyio.sleep(_POLL)
