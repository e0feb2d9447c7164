"""The exceptions saga_runtime raises; `except SagaError` catches them all::

    SagaError
    ├── PlanValidationError        plan or call refused before anything is stored or run
    │   └── UnknownToolError       ...it names an unregistered tool
    ├── SagaFailedError            raise_for_status() on a saga not SUCCESS
    ├── IdempotencyConflictError   saga id reused with other content
    ├── SagaInProgressError        the saga is being run by someone else
    ├── LeaseLostError             another executor took the saga over
    ├── BudgetExceededError        a charge crossed the Budget
    ├── ReplayDivergenceError      a replay asked for a call not on record
    ├── ResultValidationError      a result its annotation or validate() rejects
    ├── ResultNotStorableError     a result that cannot be stored as JSON
    ├── StepFailedError            a dynamic saga's call failed
    ├── OutcomeUnknownError        a tool lost sight of its effect mid-call
    ├── TurnLimitError             no final answer within max_turns
    ├── SecretKeyError             no key, or not the right one, for a secret
    ├── ApprovalError              a decision was refused
    ├── ApprovalPendingError       a dynamic saga's call waits for a decision
    ├── ApprovalRejectedError      a dynamic saga's call was refused
    └── StoreError                 the database failed
        ├── StoreConnectionError   unreachable, or the connection was lost
        ├── StoreBusyError         locked or deadlocked; nothing written, retry
        ├── SchemaVersionError     written by a newer saga-runtime
        └── StoreFileError         the SQLite file was replaced while open

Errors carry structured fields (`saga_id`, `step_id`, `tool_name`, ...); messages say what to do next.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

__all__ = [
    "ApprovalError",
    "ApprovalPendingError",
    "ApprovalRejectedError",
    "BudgetExceededError",
    "IdempotencyConflictError",
    "LeaseLostError",
    "OutcomeUnknownError",
    "PlanValidationError",
    "ReplayDivergenceError",
    "ResultNotStorableError",
    "ResultValidationError",
    "SagaError",
    "SagaFailedError",
    "SagaInProgressError",
    "SagaNotFoundError",
    "SchemaVersionError",
    "SecretKeyError",
    "StepFailedError",
    "StoreBusyError",
    "StoreConnectionError",
    "StoreError",
    "StoreFileError",
    "TurnLimitError",
    "UnknownToolError",
]


class SagaError(Exception):
    """Base class of every error saga_runtime raises."""


class PlanValidationError(SagaError):
    """A plan or call was refused before anything was stored or run; see `problems`."""

    def __init__(self, problems: Sequence[str], *, saga_id: str | None = None) -> None:
        self.problems = list(problems)
        self.saga_id = saga_id
        count = len(self.problems)
        header = (
            "the plan was refused, nothing was stored or run"
            if count == 1
            else (f"the plan was refused ({count} problems), nothing was stored or run")
        )
        super().__init__(header + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


class UnknownToolError(PlanValidationError):
    """A plan named a tool that is not registered."""


class SagaFailedError(SagaError):
    """Raised by `SagaResult.raise_for_status()` when a saga did not end SUCCESS."""

    def __init__(
        self,
        message: str,
        *,
        saga_id: str,
        status: str,
        step_id: str | None = None,
        tool_name: str | None = None,
        attempts: int | None = None,
        errors: Sequence[str] = (),
    ) -> None:
        self.saga_id = saga_id
        self.status = status
        self.step_id = step_id
        self.tool_name = tool_name
        self.attempts = attempts
        self.errors = list(errors)
        super().__init__(message)


class IdempotencyConflictError(SagaError):
    """A saga id was reused with a different plan, or imported with different content."""

    def __init__(self, message: str, *, saga_id: str) -> None:
        self.saga_id = saga_id
        super().__init__(message)


class SagaInProgressError(SagaError):
    """The saga is running under another `owner`; its lease ends at `lease_expires_at` (for a "retry after")."""

    def __init__(
        self, message: str, *, saga_id: str, owner: str | None = None, lease_expires_at: datetime | None = None
    ) -> None:
        self.saga_id = saga_id
        self.owner = owner
        self.lease_expires_at = lease_expires_at
        super().__init__(message)


class SagaNotFoundError(SagaError, KeyError):
    """No saga of that id is stored (also a `KeyError`)."""

    def __init__(self, message: str, *, saga_id: str) -> None:
        self.saga_id = saga_id
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


class LeaseLostError(SagaError):
    """Another executor took this saga over; this one stopped without writing more."""

    def __init__(self, message: str, *, saga_id: str) -> None:
        self.saga_id = saga_id
        super().__init__(message)


class BudgetExceededError(SagaError):
    """A charge crossed the saga's budget; its step fails without retry."""

    def __init__(
        self,
        message: str,
        *,
        saga_id: str | None = None,
        cost: float = 0.0,
        tokens: int = 0,
        max_cost: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.saga_id = saga_id
        self.cost = cost
        self.tokens = tokens
        self.max_cost = max_cost
        self.max_tokens = max_tokens
        super().__init__(message)


class ReplayDivergenceError(SagaError):
    """A replayed saga made a call that differs from the record, or that was never recorded."""

    def __init__(self, message: str, *, saga_id: str, position: int | None = None) -> None:
        self.saga_id = saga_id
        self.position = position
        super().__init__(message)


class ResultValidationError(SagaError):
    """A tool's result was rejected by its return annotation or its `validate()` method."""

    def __init__(self, message: str, *, tool_name: str, step_id: str | None = None) -> None:
        self.tool_name = tool_name
        self.step_id = step_id
        super().__init__(message)


class ResultNotStorableError(SagaError):
    """A tool returned a value that cannot be stored as JSON; the step fails."""

    def __init__(self, message: str, *, tool_name: str, type_name: str) -> None:
        self.tool_name = tool_name
        self.type_name = type_name
        super().__init__(message)


class StepFailedError(SagaError):
    """A dynamic saga's call failed (`saga.call`, `saga.group`), live or re-executed from the record.

    `error_type` and `error` are the recorded failure, the same on re-execution; live, `__cause__` is the exception.
    """

    def __init__(
        self,
        message: str,
        *,
        saga_id: str,
        step_id: str,
        tool_name: str,
        attempts: int,
        error: str | None,
        error_type: str | None,
    ) -> None:
        self.saga_id = saga_id
        self.step_id = step_id
        self.tool_name = tool_name
        self.attempts = attempts
        self.error = error
        self.error_type = error_type
        super().__init__(message)


class OutcomeUnknownError(SagaError):
    """Raised by a tool whose effect may have happened; like a timeout, it is compensated with `result=None`."""


class TurnLimitError(SagaError):
    """An LLMRunner's model gave no final answer within `max_turns`."""


class SecretKeyError(SagaError):
    """A secret argument cannot be encrypted (no key) or decrypted (no key opens it)."""


class ApprovalError(SagaError):
    """A decision was refused and nothing recorded: decided already (`decision`, `decided_by`), nothing waiting,
    another `args_digest`, or the deadline passed."""

    def __init__(
        self,
        message: str,
        *,
        saga_id: str,
        step_id: str | None = None,
        decision: str | None = None,
        decided_by: str | None = None,
    ) -> None:
        self.saga_id = saga_id
        self.step_id = step_id
        self.decision = decision
        self.decided_by = decided_by
        super().__init__(message)


class ApprovalPendingError(SagaError):
    """A dynamic saga's call waits for a decision; the saga is WAITING and nothing is compensated.

    Decide with `approve()` / `reject()`, then enter the saga id again to go on.
    """

    def __init__(self, message: str, *, saga_id: str, step_id: str, tool_name: str, arguments: object) -> None:
        self.saga_id = saga_id
        self.step_id = step_id
        self.tool_name = tool_name
        self.arguments = arguments
        super().__init__(message)


class ApprovalRejectedError(SagaError):
    """A dynamic saga's call was refused (`by` a person, or "deadline"); it never ran."""

    def __init__(
        self,
        message: str,
        *,
        saga_id: str,
        step_id: str,
        tool_name: str,
        by: str | None,
        note: str | None,
    ) -> None:
        self.saga_id = saga_id
        self.step_id = step_id
        self.tool_name = tool_name
        self.by = by
        self.note = note
        super().__init__(message)


class StoreError(SagaError):
    """The store could not do what was asked; the message names the database and what to do."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        self.url = url
        super().__init__(message)


#: The longest error text recorded (a message may be a whole response body).
MAX_ERROR_CHARS = 2000


def describe(exc: BaseException) -> str:
    """Return `Type: message` as recorded: escaped so every store keeps it, at most `MAX_ERROR_CHARS` long."""
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not hide the failure it reports
        text = "(its message could not be read)"
    name = type(exc).__name__
    line = f"{name}: {text}" if text else name
    if "\x00" in line:
        line = line.replace("\x00", "\\x00")
    if not line.isascii():
        try:
            line.encode()
        except UnicodeEncodeError:
            line = line.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 1] + "…"
    return line


class StoreConnectionError(StoreError):
    """The database cannot be reached, or the connection was lost."""


class StoreBusyError(StoreError):
    """The database stayed locked, or broke a deadlock with this transaction; nothing was written, retry."""


class StoreFileError(StoreError):
    """The SQLite file was deleted or replaced while open; every later call fails. Restore it, open a new store."""


class SchemaVersionError(StoreError):
    """The database's schema is newer than this saga-runtime; upgrade saga-runtime."""

    def __init__(self, message: str, *, url: str | None = None, found: int, supported: int) -> None:
        self.found = found
        self.supported = supported
        super().__init__(message, url=url)
