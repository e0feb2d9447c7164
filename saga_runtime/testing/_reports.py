"""What the crash-point harness reports: crash points, tool calls, and a report per point and per run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from saga_runtime._records import SagaResult, SagaStatus

__all__ = ["Action", "CrashPoint", "CrashReport", "InjectedFailure", "Outcome", "PointReport", "Process", "ToolCall"]

Action = Literal["execute", "compensate"]
Process = Literal["run", "recovery"]
Outcome = Literal["returned", "raised", "cancelled", "interrupted"]


class InjectedFailure(RuntimeError):
    """The failure `fail_step=` puts in place of a step's `execute`: the tool is not called."""


@dataclass(frozen=True, slots=True)
class CrashPoint:
    """Where a run is killed: `when` ("before" or "after") the `occurrence`-th call of a step's `action`."""

    when: Literal["before", "after"]
    action: Action
    step_id: str
    occurrence: int = 1

    @property
    def name(self) -> str:
        """Return a short unique name, e.g. `after-execute-charge`."""
        suffix = f"-{self.occurrence}" if self.occurrence != 1 else ""
        return f"{self.when}-{self.action}-{self.step_id}{suffix}"

    def describe(self) -> str:
        """Return the point in words."""
        nth = f" (call {self.occurrence})" if self.occurrence != 1 else ""
        if self.action == "execute":
            if self.when == "before":
                return f"before step {self.step_id!r} executes{nth}"
            return f"after step {self.step_id!r} executed{nth}, before its outcome is recorded"
        if self.when == "before":
            return f"during compensation, before step {self.step_id!r} is compensated{nth}"
        return f"during compensation, after step {self.step_id!r} was compensated{nth}, before that is recorded"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One `execute` or `compensate` call: `process` "run" or "recovery"; `outcome` "returned", "raised",
    "cancelled" or "interrupted"."""

    action: Action
    tool_name: str
    step_id: str
    idempotency_key: str
    attempt: int
    process: Process
    outcome: Outcome
    error: str | None = None

    def __str__(self) -> str:
        return f"{self.process}:{self.action}({self.step_id})={self.outcome}"


@dataclass(frozen=True)
class PointReport:
    """One crash point: the records at the crash, the final result, the calls, the problems."""

    point: CrashPoint
    saga_id: str
    crashed: bool
    at_crash: SagaResult | None
    result: SagaResult | None
    calls: tuple[ToolCall, ...]
    problems: tuple[str, ...]

    @property
    def status(self) -> SagaStatus | None:
        """Return the saga's status after recovery (None if it is not in the store)."""
        return None if self.result is None else self.result.status

    @property
    def ok(self) -> bool:
        """Tell whether the run was killed at the point and recovery broke no invariant."""
        return not self.problems

    def calls_of(
        self, step_id: str | None = None, *, action: Action | None = None, process: Process | None = None
    ) -> list[ToolCall]:
        """Return the calls of one step (or all), optionally only of one action or one process."""
        return [
            call
            for call in self.calls
            if (step_id is None or call.step_id == step_id)
            and (action is None or call.action == action)
            and (process is None or call.process == process)
        ]

    def by_tool(self) -> dict[str, list[ToolCall]]:
        """Return the calls grouped by tool name, in order."""
        grouped: dict[str, list[ToolCall]] = {}
        for call in self.calls:
            grouped.setdefault(call.tool_name, []).append(call)
        return grouped

    def __str__(self) -> str:
        status = "missing" if self.status is None else self.status.value
        calls = " ".join(str(call) for call in self.calls) or "no calls"
        line = f"{'ok  ' if self.ok else 'FAIL'} {self.point.name}: {status}; {calls}"
        return "\n".join([line, *(f"       - {problem}" for problem in self.problems)])


@dataclass(frozen=True)
class CrashReport:
    """The report of `check_crash_points`: the probe run (`baseline`) and a `PointReport` per point."""

    baseline: SagaResult
    baseline_calls: tuple[ToolCall, ...]
    points: tuple[PointReport, ...]

    @property
    def ok(self) -> bool:
        """Tell whether every point held every invariant."""
        return all(point.ok for point in self.points)

    @property
    def problems(self) -> list[str]:
        """Return every problem, prefixed by its point's name."""
        return [f"{point.point.name}: {problem}" for point in self.points for problem in point.problems]

    def point(self, name: str) -> PointReport:
        """Return the report of the point called `name` (see `CrashPoint.name`)."""
        for report in self.points:
            if report.point.name == name:
                return report
        raise KeyError(f"no crash point {name!r} (points: {[p.point.name for p in self.points]})")

    def assert_ok(self) -> CrashReport:
        """Return the report if every invariant held; raise `AssertionError` listing the broken ones otherwise."""
        if not self.ok:
            raise AssertionError(f"{len(self.problems)} crash-safety problem(s):\n" + "\n".join(self.problems))
        return self

    def __str__(self) -> str:
        head = f"probe run: {self.baseline.status.value}; {len(self.points)} crash points"
        return "\n".join([head, *(str(point) for point in self.points)])
