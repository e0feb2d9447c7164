"""Event hooks: what a saga does, handed as it happens to observers (logging, tracing, metrics)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from saga_runtime._exceptions import describe
from saga_runtime._records import now

__all__ = ["EventKind", "SagaEvent", "SagaHook", "emit"]

logger = logging.getLogger("saga_runtime")

EventKind = Literal[
    "saga_started",
    "step_started",
    "attempt_failed",
    "step_finished",
    "compensation_started",
    "compensation_finished",
    "saga_finished",
]


@dataclass(frozen=True, slots=True)
class SagaEvent:
    """One thing a saga did. Step fields are None for saga events; `error` is set when something failed.

    `status` is the saga's status for saga events and the step's for step events; `attempt` counts attempts of
    the step (or of its compensation, for compensation events); `will_retry` tells, for a failed attempt,
    whether another attempt follows.
    """

    kind: EventKind
    saga_id: str
    at: datetime = field(default_factory=now)
    step_id: str | None = None
    tool_name: str | None = None
    group: int | None = None
    attempt: int | None = None
    status: str | None = None
    error: str | None = None
    idempotency_key: str | None = None
    will_retry: bool | None = None


@runtime_checkable
class SagaHook(Protocol):
    """Something told about every event of the executor's sagas: `SagaExecutor(hooks=[...])`.

    Called synchronously, in the event loop, as the event happens: keep it quick (hand slow work to a queue). An
    exception it raises is logged and otherwise ignored: an observer never breaks a saga.
    """

    def __call__(self, event: SagaEvent) -> None:
        """Take in one event."""


def emit(hooks: tuple[SagaHook, ...], event: SagaEvent) -> None:
    """Hand `event` to every hook; log, and otherwise ignore, a hook that fails."""
    for hook in hooks:
        try:
            hook(event)
        except Exception as exc:
            logger.warning("saga %s: hook %r failed on %s: %s", event.saga_id, hook, event.kind, describe(exc))
