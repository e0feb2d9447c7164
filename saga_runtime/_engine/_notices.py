"""In-process notices that a saga published something, ended or was made due, so readers in this process wake at
once.

A reader (`executor.get_event`, `read_stream`, the console following a saga, an MCP call reporting progress, a
parent's step waiting for its WAITING child) watches `(store URL, saga id)` before it reads the store, and waits on
its watch between reads. The engine calls `changed()` once a publication, a saga's end, or what may make a waiting
saga go on (a message, a decision, a cancel request) is durable. Readers in other processes are never told: they keep
polling the store, which stays the truth (a notice carries no data, and a spurious one costs one read).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from saga_runtime._storage import SagaStore

__all__ = ["Watch", "changed", "watching"]


class Watch:
    """One reader's watch of a saga: set by `changed()` from any thread, cleared by each `wait()`."""

    __slots__ = ("_event", "_loop")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def wake(self) -> None:
        """Wake the reader, from its own loop or from another thread's."""
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is self._loop:
            self._event.set()
            return
        with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, seconds: float) -> bool:
        """Wait until the saga changed since the last wait (or the watch began), at most `seconds`; tell whether
        it did (False: the time ran out, the caller reads the store anyway)."""
        if not self._event.is_set():
            with anyio.move_on_after(max(0.0, seconds)):
                await self._event.wait()
        woken = self._event.is_set()
        self._event.clear()
        return woken


# Watches by (store URL, saga id). Readers of several threads add and remove theirs under the lock; `changed()`
# reads without it (a set's copy by list() is atomic under the GIL), so a writer never waits for a reader.
_watches: dict[tuple[str, str], set[Watch]] = {}
_lock = threading.Lock()


@contextmanager
def watching(url: str, saga_id: str) -> Iterator[Watch]:
    """Watch a saga of the store at `url` (enter before the first read, so no change falls between read and wait)."""
    key = (url, saga_id)
    watch = Watch()
    with _lock:
        _watches.setdefault(key, set()).add(watch)
    try:
        yield watch
    finally:
        with _lock:
            watches = _watches.get(key)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del _watches[key]


def changed(store: SagaStore, saga_id: str) -> None:
    """Tell this process's readers of a saga of `store` that it published something, ended or may go on (nothing
    to do, and no URL built, while no reader watches any saga)."""
    if not _watches:
        return
    watches = _watches.get((store.url, saga_id))
    if watches:
        for watch in list(watches):
            watch.wake()
