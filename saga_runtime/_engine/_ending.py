"""The saga's end: its terminal status recorded (write-ahead done, bounded by the store's retry window)."""

from __future__ import annotations

import logging
import math
from collections.abc import Coroutine
from datetime import datetime
from operator import attrgetter
from typing import Any

from saga_runtime._engine._cancellation import deadline, shielded, shielded_inline
from saga_runtime._engine._events import heard
from saga_runtime._engine._journal import Journal, inline_writer
from saga_runtime._engine._notices import changed
from saga_runtime._engine._transitions import TransitionError
from saga_runtime._exceptions import StoreError
from saga_runtime._records import SagaResult, SagaStatus, StepStatus, result_from_rows
from saga_runtime._storage import SagaStore

__all__ = ["final_write_bound", "write_end", "writes_pause"]

logger = logging.getLogger("saga_runtime")

# How long the engine may spend recording a saga's end, beyond the store's own retry window (`retry_for`): a
# store retrying a lost connection must be allowed its whole window, then one last try, before the end is given up.
_FINAL_WRITE_MARGIN = 10.0
# Steps that never ran: a saga holding one has not succeeded.
_NEVER_RAN = frozenset({StepStatus.PENDING, StepStatus.WAITING})
_status = attrgetter("status")
_SUCCESS = SagaStatus.SUCCESS  # (a module global: an enum class's attribute is slow to read on Python 3.11)


async def write_end(
    journal: Journal, status: SagaStatus, error: str | None, cause: str | None = None, at: datetime | None = None
) -> SagaResult:
    """Record the saga's terminal status and return its result; `error` says why it did not succeed, `cause` the
    class name of the exception that failed it, `at` a reading of the clock for its end (see `Journal.end`).

    Call it shielded (or from shielded work), unless `journal.writes_inline`: then it writes in
    the calling task while the write does not pause, and shielded from where it does.
    """
    journal.check_fence()  # another executor owns the saga: its end is not ours to record
    saga = journal.saga
    succeeded = status is _SUCCESS
    if succeeded and not _NEVER_RAN.isdisjoint(map(_status, journal.rows.values())):  # (looked for in C)
        # A bug, never a user's error: a saga that skipped a step must not say it succeeded.
        left = [row.step_id for row in journal.rows.values() if row.status in _NEVER_RAN]
        raise TransitionError(
            f"saga {saga.saga_id!r} cannot end SUCCESS: steps {left} never ran (a bug in saga_runtime: "
            "please report it)"
        )
    journal.end(status, error, cause if not succeeded else None, at)
    if not journal.writes_inline:
        await _bounded(journal, journal.flush())
    elif not journal.wrote_now():  # (written in this code, no coroutine; else refused: flush takes it from there)
        await shielded_inline(journal.flush(), lambda rest: shielded(_bounded(journal, rest)))
    changed(journal.store, saga.saga_id)  # its readers in this process stop now
    result = result_from_rows(
        saga, list(journal.rows.values()), journal.approvals, complete=True, args_shown=journal.args_shown_as_is
    )
    if journal.config.hooks:  # (no event built for no hook)
        journal.emit("saga_finished", error=saga.error, reason=result.end_reason)
    level = logging.INFO if succeeded else logging.WARNING
    if heard(logger, level):  # (a record built for nobody costs as much as a step)
        logger.log(level, "saga %s ended %s%s", saga.saga_id, status.value, f": {saga.error}" if saga.error else "")
    return result


async def _bounded(journal: Journal, write: Coroutine[Any, Any, None]) -> None:
    bound = final_write_bound(journal.store)
    with deadline(bound) as scope:  # (anyio.move_on_after's scope, without asking which event loop runs)
        await write
    if scope.cancelled_caught:
        raise StoreError(
            f"saga {journal.saga.saga_id!r} ended {journal.saga.status.value} but the store did not record it "
            f"within {bound:g}s ({journal.store.url}); check the database: recovery will finish it"
        )


def writes_pause(store: SagaStore) -> bool:
    """Tell whether a write to `store` may pause: any store that does not declare it writes inline."""
    return inline_writer(store) is None


def final_write_bound(store: SagaStore) -> float:
    """Return the seconds the write of a saga's end may take: the store's retry window (`retry_for`) and a margin."""
    retry_for = store.retry_for  # SQL stores retry a lost connection that long; memory: 0
    window = max(0.0, float(retry_for)) if math.isfinite(retry_for) else 0.0
    return window + _FINAL_WRITE_MARGIN
