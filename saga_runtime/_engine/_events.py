"""Event hooks: what a saga does, handed as it happens to observers (logging, tracing, metrics)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from saga_runtime._exceptions import describe
from saga_runtime._records import SagaRow, StepRow, now

__all__ = ["EventKind", "LoggingHook", "SagaEvent", "SagaHook", "emit", "heard"]

logger = logging.getLogger("saga_runtime")


def heard(log: logging.Logger, level: int) -> bool:
    """Tell whether a record of `level` logged to `log` reaches a handler that does something with it.

    The library's own `NullHandler` hears nothing: with no other handler on the way up, a record would be built
    (its caller found, its time taken) for nobody, so the engine does not log it. With no handler at all, logging's
    last resort (stderr) hears it, as `logging` does.
    """
    if not log.isEnabledFor(level):
        return False
    found = False
    current: logging.Logger | None = log
    while current is not None:
        for handler in current.handlers:
            found = True
            if level >= handler.level and type(handler) is not logging.NullHandler:
                return True
        if not current.propagate:
            break
        current = current.parent
    return not found and logging.lastResort is not None and level >= logging.lastResort.level


EventKind = Literal[
    "saga_started",
    "step_started",
    "attempt_failed",
    "step_finished",
    "compensation_started",
    "compensation_finished",
    "saga_finished",
    "approval_requested",
    "approval_decided",
    "saga_queued",
    "saga_cancel_requested",
    "attempt_started",
    "charged",
    "saga_taken_over",
    "saga_resumed",
    "message_received",
    "saga_event_set",
]


@dataclass(frozen=True, slots=True)
class SagaEvent:
    """One thing a saga did. Step fields are None for saga events; `error` is set when something failed.

    `status` is the saga's status for saga events and the step's for step events; `attempt` counts attempts of
    the step (or of its compensation, for compensation events); `will_retry` tells, for a failed attempt,
    whether another attempt follows. `approval_requested` and `approval_decided` are emitted once the request
    (or the decision) is stored; `decision` ("approved" or "rejected") and `decided_by` say what was decided.
    `attempt_started` comes right before each attempt of a step runs; `charged` once per charge (a tool's
    `ctx.charge`, `saga.charge`, an LLM call), with its `cost` and `tokens`; `saga_taken_over` when recovery
    takes over a saga whose owner is gone, before driving it; `saga_resumed` when a saga function's code runs
    again over its record; `message_received` when a saga function receives a message, with its `topic`;
    `saga_event_set` when a saga sets an event (its key as `topic`). `saga_finished` carries the saga's `reason`
    (`SagaResult.end_reason`); `saga_started` the `queue` it was started from (None: not from a queue).
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
    decision: str | None = None
    decided_by: str | None = None
    cost: float | None = None
    tokens: int | None = None
    # `saga_finished`: how a saga that did not succeed ended (SagaResult.end_reason); `saga_started`: its queue.
    reason: str | None = None
    queue: str | None = None
    topic: str | None = None


@runtime_checkable
class SagaHook(Protocol):
    """Something told about every event of the executor's sagas: `SagaExecutor(hooks=[...])`.

    Called synchronously, in the event loop, as the event happens: keep it quick (hand slow work to a queue). An
    exception it raises is logged and otherwise ignored: an observer never breaks a saga.
    """

    def __call__(self, event: SagaEvent) -> None:
        """Take in one event."""


def event_of(kind: EventKind, saga: SagaRow, row: StepRow | None, fields: dict[str, Any]) -> SagaEvent:
    """Return the event of `kind` for a saga, or one of its steps."""
    if row is None:
        return SagaEvent(kind, saga.saga_id, status=saga.status.value, **fields)
    return SagaEvent(
        kind,
        saga.saga_id,
        step_id=row.step_id,
        tool_name=row.tool_name,
        group=row.group,
        idempotency_key=row.idempotency_key,
        **{"status": row.status.value, "attempt": row.attempts, **fields},
    )


def emit(hooks: tuple[SagaHook, ...], event: SagaEvent) -> None:
    """Hand `event` to every hook; log, and otherwise ignore, a hook that fails."""
    for hook in hooks:
        try:
            hook(event)
        except Exception as exc:
            logger.warning("saga %s: hook %r failed on %s: %s", event.saga_id, hook, event.kind, describe(exc))


class LoggingHook:
    """A `SagaHook` that logs every event as one line on `logger` (default: the `saga_runtime.events` logger).

    Failures (a failed attempt, a step that did not succeed, a compensation that gave up, a saga that did not
    end SUCCESS) are logged at WARNING, everything else at `level` (INFO by default). Each record carries the
    event as `record.saga_event`, for JSON formatters and log shippers.
    """

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        self.logger = logger or logging.getLogger("saga_runtime.events")
        self.level = level

    def __call__(self, event: SagaEvent) -> None:
        """Log one event."""
        failed = event.error is not None or event.status in ("FAILED", "COMPENSATION_FAILED", "COMPENSATED")
        level = logging.WARNING if failed and event.kind != "compensation_finished" else self.level
        if event.kind == "compensation_finished" and event.status == "COMPENSATION_FAILED":
            level = logging.ERROR
        if not self.logger.isEnabledFor(level):
            return
        where = f" step {event.step_id} ({event.tool_name})" if event.step_id else ""
        detail = f" attempt {event.attempt}" if event.attempt else ""
        status = f" -> {event.status}" if event.status else ""
        error = f": {event.error}" if event.error else ""
        self.logger.log(
            level,
            "saga %s%s %s%s%s%s",
            event.saga_id,
            where,
            event.kind.replace("_", " "),
            detail,
            status,
            error,
            extra={"saga_event": event},
        )
