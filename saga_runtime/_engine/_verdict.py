"""The verdict of a running saga: what fails it, and what its steps left behind that decides how it ends."""

from __future__ import annotations

from saga_runtime._records import StepRow

__all__ = ["Verdict"]


class Verdict:
    """What the engine's parts learn as a saga runs, and read to decide how it goes on.

    `reason` is why the saga fails (None while it may still succeed); `culprit` the step that failed it.
    `errors` keeps the exception that ended each failed step in this process (the record keeps type and message);
    `stuck` holds steps whose refused result could not be undone; `winners` the step that won each `first` race.
    """

    __slots__ = ("culprit", "errors", "reason", "store_error", "stuck", "winners")

    def __init__(self) -> None:
        self.reason: str | None = None
        self.culprit: str | None = None
        self.errors: dict[str, BaseException] = {}
        self.stuck: set[str] = set()
        self.winners: dict[int, str] = {}
        # A write-ahead record that could not be written: the group stops, and the error goes on to the caller.
        self.store_error: BaseException | None = None

    @property
    def failed(self) -> bool:
        """Tell whether a step failed in a way that fails the saga."""
        return self.reason is not None

    def fail(self, row: StepRow, error: str) -> None:
        """Fail the saga because of `row` (the first reason stands)."""
        if self.reason is None:
            self.reason = f"step {row.step_id!r} ({row.tool_name}) failed: {error}"
            self.culprit = row.step_id

    def fail_with(self, reason: str) -> None:
        """Fail the saga for a reason no single step gives (the first reason stands)."""
        if self.reason is None:
            self.reason = reason

    def forgive(self) -> None:
        """Forget the failure (a dynamic saga's code decides itself whether a failed call ends the saga)."""
        self.reason = None

    def why_cancelled(self, row: StepRow) -> str:
        """Say why a running step was cancelled: a race won, a sibling failed, or the caller left."""
        if row.group in self.winners:
            return f"step {self.winners[row.group]!r} won the race"
        if self.culprit:
            return f"step {self.culprit!r} failed"
        return "the caller was cancelled"
