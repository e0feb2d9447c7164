"""An idle worker's one look at the store: which of its loops would find something now.

A worker that serves queues keeps several loops (queued sagas, schedules, approval deadlines, waiting sagas,
recovery). Each used to ask the store every `interval`, found nothing most of the time, and so cost the database
a transaction per loop and interval while idle. `Looks` asks once per interval (`SagaStore.due_work`, one query)
and tells only the loops that would find something; a loop also goes on when told directly (a submit, a message
or a decision heard), and by itself after `FALLBACK` seconds whatever the looks say.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import anyio

from saga_runtime._exceptions import StoreError
from saga_runtime._records import DueWork, now
from saga_runtime._storage import SagaStore, due_work_of, has

__all__ = ["FALLBACK", "Looks"]

logger = logging.getLogger("saga_runtime")

# Seconds a loop told nothing waits before it looks by itself anyway (a look that went wrong is not waited on).
FALLBACK = 30.0
_EVERY: tuple[DueWork, ...] = ("queued", "schedules", "approvals", "waiting", "orphans")


class Looks:
    """One look at the store every `interval` seconds, telling the loops listening for what it found."""

    __slots__ = ("_found", "_interval", "_looked_at", "_queues", "_store", "_told")

    def __init__(self, store: SagaStore, queues: Sequence[str], interval: float) -> None:
        self._store = store
        self._queues = tuple(queues)
        self._interval = interval
        self._told: dict[DueWork, list[Callable[[], None]]] = {}
        self._found: frozenset[DueWork] = frozenset(_EVERY)
        self._looked_at = -math.inf  # monotonic time of the last look that answered

    def listen(self, kind: DueWork, tell: Callable[[], None]) -> None:
        """Call `tell()` after each look that finds `kind` of work."""
        self._told.setdefault(kind, []).append(tell)

    def wait_for(self, told: float) -> float:
        """Return how long a loop listening here waits for a word before it looks by itself (`told`: how long it
        would wait with no looks: its interval)."""
        return max(told, FALLBACK) if math.isfinite(told) else told

    def quiet(self, kinds: tuple[DueWork, ...]) -> bool:
        """Tell whether the last look, taken within two intervals, found none of `kinds` (a round that would look
        for them may be skipped: the next look tells of what comes meanwhile)."""
        recent = anyio.current_time() - self._looked_at <= 2 * self._interval
        return recent and not self._found.intersection(kinds)

    async def run(self) -> None:
        """Look every interval until cancelled; a look that fails tells every loop (each looks for itself)."""
        while True:
            await anyio.sleep(self._interval)
            if not self._told:
                continue
            if not has(self._store, "due_work"):  # a store that cannot tell (it says so): every loop looks
                found = frozenset(_EVERY)
            else:
                found = await self._look()
            self._found = found
            for kind in found:
                for tell in self._told.get(kind, ()):
                    tell()

    async def _look(self) -> frozenset[DueWork]:
        """Ask the store once what is due; a look that fails finds everything (each loop looks for itself)."""
        try:
            found = await due_work_of(self._store).due_work(now(), self._queues)
        except StoreError as exc:
            logger.warning("looking for due work failed, every loop looks for itself: %s", exc)
            return frozenset(_EVERY)
        self._looked_at = anyio.current_time()
        return found
