"""The verdict of a running saga: what fails it, and what its steps left behind that decides how it ends; and the
frozen outcomes the step runner (`StepOutcome`), the compensator (`UndoOutcome`) and reconcile (`ReconcileOutcome`)
return, of which only the group runner folds a `StepOutcome` into the verdict (the other two reach it through one).
"""

from __future__ import annotations

from saga_runtime._engine._cancellation import Cancellation
from saga_runtime._records import StepRow

__all__ = [
    "DONE",
    "NOT_UNDONE",
    "RECONCILED_DONE",
    "RECONCILED_NOT_DONE",
    "STILL_UNKNOWN",
    "STUCK",
    "UNDONE",
    "ReconcileOutcome",
    "StepOutcome",
    "UndoOutcome",
    "Verdict",
]


class StepOutcome:
    """What one run of a step came to, returned by the step runner and folded into the saga's fate by the group
    runner alone (frozen). `DONE` (the step ended and nothing of it bears on the saga) is the common case.

    `fails` says why the saga fails because of the step; `error` is the exception that ended it (kept while the
    process lives: the record keeps type and message); `won`: it succeeded in a `first` group; `store_error`: a
    write-ahead record of it could not be written (the group stops, and the error goes on to the caller). A
    failing, winning or unwritable step stops its running siblings.
    """

    __slots__ = ("error", "fails", "row", "store_error", "won")

    row: StepRow | None
    fails: str | None
    error: BaseException | None
    won: bool
    store_error: BaseException | None

    def __init__(
        self,
        row: StepRow | None,
        *,
        fails: str | None = None,
        error: BaseException | None = None,
        won: bool = False,
        store_error: BaseException | None = None,
    ) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "row", row)
        setattr_(self, "fails", fails)
        setattr_(self, "error", error)
        setattr_(self, "won", won)
        setattr_(self, "store_error", store_error)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a StepOutcome is frozen: {name} cannot be set")

    @property
    def stops(self) -> bool:
        """Tell whether the step's siblings still running are cancelled: it failed the saga, won, or went unwritten."""
        return self.fails is not None or self.won or self.store_error is not None


#: A step that ended with nothing that bears on the saga (it succeeded in an `all` group, or its failure is its own).
DONE = StepOutcome(None)


class UndoOutcome:
    """What undoing one step came to, returned by the compensator (frozen): one of `UNDONE`, `NOT_UNDONE`, `STUCK`.

    `undone`: its effect was undone (else nothing ran, or the undo failed, as its record says); `stuck`: the effect
    of a refused attempt could not be undone, so the step ends failed, and its `StepOutcome` fails the saga.
    """

    __slots__ = ("stuck", "undone")

    undone: bool
    stuck: bool

    def __init__(self, *, undone: bool = False, stuck: bool = False) -> None:
        object.__setattr__(self, "undone", undone)
        object.__setattr__(self, "stuck", stuck)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"an UndoOutcome is frozen: {name} cannot be set")

    def __repr__(self) -> str:
        return "UNDONE" if self.undone else "STUCK" if self.stuck else "NOT_UNDONE"


#: The step's effect was undone.
UNDONE = UndoOutcome(undone=True)
#: Nothing was undone: nothing to undo, nothing could undo it, or the undo failed (its record says which).
NOT_UNDONE = UndoOutcome()
#: A refused attempt's effect could not be undone: the step must not run again, and it fails the saga.
STUCK = UndoOutcome(stuck=True)


class ReconcileOutcome:
    """What a step's `reconcile` said of its unknown outcome, recorded already (frozen): one of `RECONCILED_DONE`
    (the effect happened: the step is SUCCESS), `RECONCILED_NOT_DONE` (it did not), `STILL_UNKNOWN` (reconcile
    raised, or its answer was refused). `done` is True, False or None accordingly.
    """

    __slots__ = ("done",)

    done: bool | None

    def __init__(self, done: bool | None) -> None:
        object.__setattr__(self, "done", done)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a ReconcileOutcome is frozen: {name} cannot be set")

    def __repr__(self) -> str:
        return {True: "RECONCILED_DONE", False: "RECONCILED_NOT_DONE", None: "STILL_UNKNOWN"}[self.done]


RECONCILED_DONE = ReconcileOutcome(True)
RECONCILED_NOT_DONE = ReconcileOutcome(False)
STILL_UNKNOWN = ReconcileOutcome(None)


class Verdict:
    """What decides how a saga goes on and ends, written by the group runner (folding each step's `StepOutcome`) and
    the engine's front doors (`fail`, `halt`, `forgive`); the step runner and compensator only read it.

    `reason` is why the saga fails (None while it may still succeed); `culprit` the step that failed it.
    `errors` keeps the exception that ended each failed step in this process (the record keeps type and message);
    `winners` holds the step that won each `first` race.
    An operator's cancel is the saga's `Cancellation`'s (read here as `halted`): `halt` fails the saga for it.
    """

    __slots__ = (
        "_cause",
        "cancellation",
        "culprit",
        "errors",
        "failed",
        "reason",
        "store_error",
        "winners",
    )

    def __init__(self, cancellation: Cancellation) -> None:
        self.cancellation = cancellation
        self.reason: str | None = None
        # Whether a step failed in a way that fails the saga (`reason` is set): read at every step.
        self.failed = False
        self.culprit: str | None = None
        self.errors: dict[str, BaseException] = {}
        self.winners: dict[int, str] = {}
        # A write-ahead record that could not be written: the group stops, and the error goes on to the caller.
        self.store_error: BaseException | None = None
        self._cause: str | None = None  # the class name of what failed it, given by a front door

    @property
    def cause(self) -> str | None:
        """Return the class name of the exception that failed the saga, if known ("CancelledError": its caller
        left, nothing failed it), read once at its end.
        """
        if self._cause is not None:
            return self._cause
        if self.culprit is not None and self.culprit in self.errors:
            return type(self.errors[self.culprit]).__name__
        return "CancelledError" if self.reason is None else None

    def fail(self, row: StepRow, error: str) -> None:
        """Fail the saga because of `row` (the first reason stands)."""
        if self.reason is None:
            self.reason = f"step {row.step_id!r} ({row.tool_name}) failed: {error}"
            self.culprit = row.step_id
            self.failed = True

    def fail_with(self, reason: str, cause: BaseException | None = None) -> None:
        """Fail the saga for a reason no single step gives (the first reason stands); `cause`: the exception."""
        if self.reason is None:
            self.reason = reason
            self.failed = True
            if cause is not None:  # a failed call's own error type (StepFailedError carries it), else its class
                error_type = getattr(cause, "error_type", None)
                self._cause = error_type if isinstance(error_type, str) else type(cause).__name__

    @property
    def halted(self) -> str | None:
        """Return why an operator cancelled the saga (None while not): its cancellation's."""
        return self.cancellation.halted

    def halt(self, reason: str) -> None:
        """Fail the saga for an operator's cancel, and cancel the calls running now."""
        self.fail_with(reason)
        self.cancellation.halt(reason)

    def forgive(self) -> None:
        """Forget the failure (a dynamic saga's code decides itself whether a failed call ends the saga); an
        operator's cancel is not the code's to forget."""
        if self.cancellation.halted is None:
            self.reason = None
            self.failed = False

    def why_cancelled(self, row: StepRow) -> str:
        """Say why a running step was cancelled: an operator's cancel, a race won, a failed sibling, the caller."""
        halted = self.cancellation.halted
        if halted:
            return halted
        if row.group in self.winners:
            return f"step {self.winners[row.group]!r} won the race"
        if self.culprit:
            return f"step {self.culprit!r} failed"
        return "the caller was cancelled"
