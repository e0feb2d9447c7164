"""Which of a saga's steps this executor's tools cannot resume: missing, of a version they do not accept, or
recorded under an accepted older version with arguments the new code refuses.
"""

from __future__ import annotations

from typing import Any

from saga_runtime._records import (
    SagaRow,
    StepRow,
    StepStatus,
    WaitingKind,
    function_of,
    has_envelope,
    now,
    waiting_note,
    with_unstarted,
)
from saga_runtime._tools import ToolRegistry, ToolSpec

__all__ = ["unfit", "unfit_note", "unfit_tools"]

# Steps nothing will run or undo again: their tool's version no longer matters.
_SETTLED = frozenset({StepStatus.COMPENSATED, StepStatus.REJECTED})
# Steps a resumed saga may still run forward, whose arguments the tool must accept.
_FORWARD = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.CANCELLED, StepStatus.WAITING})


def unfit_tools(registry: ToolRegistry, saga: SagaRow, rows: list[StepRow]) -> list[str]:
    """Return, sorted, each tool of the saga's steps this registry lacks or cannot resume, saying why (and a saga
    function's saga: the function, when it lacks it, or its version, or the recorded arguments do not fit)."""
    return [text for _, text in unfit(registry, saga, rows)]


def unfit(registry: ToolRegistry, saga: SagaRow, rows: list[StepRow]) -> list[tuple[WaitingKind, str]]:
    """Return, sorted, what this registry lacks to resume the saga: a "tool" it has not, or a "version" it does
    not accept (or whose arguments it refuses), each with the text saying so.
    """
    found: set[tuple[WaitingKind, str]] = set()
    recorded = function_of(saga.plan) if saga.kind == "dynamic" else None
    if recorded is not None:  # a saga function's saga: the function, its version, its recorded arguments
        name, version, args = recorded
        function = registry.function(name)
        if function is None:
            found.add(("tool", f"saga function {name}"))
        elif not function.accepts(version):
            found.add(
                (
                    "version",
                    f"saga function {name} (recorded under version {version!r}; this executor's version "
                    f"{function.version!r} accepts {[function.version, *function.compatible]})",
                )
            )
        elif problems := function.check_args(args)[0]:
            found.add(("version", f"saga function {name} (its recorded arguments do not fit: {problems})"))
    for row in with_unstarted(saga, rows):
        spec = registry.find(row.tool_name)
        if spec is None:
            found.add(("tool", row.tool_name))
        elif row.status in _SETTLED:
            continue
        elif not spec.accepts(row.tool_version):
            found.add(
                (
                    "version",
                    f"{row.tool_name} (steps recorded under version {row.tool_version!r}; this executor's version "
                    f"{spec.version!r} accepts {[spec.version, *spec.compatible]})",
                )
            )
        elif row.tool_version != spec.version and row.status in _FORWARD:
            problems = _args_problems(spec, row.args)
            if problems:
                found.add(
                    (
                        "version",
                        f"{row.tool_name} (arguments recorded under version {row.tool_version!r} do not fit "
                        f"version {spec.version!r}: {'; '.join(problems)})",
                    )
                )
    return sorted(found, key=lambda item: item[1])


def unfit_note(lacking: list[tuple[WaitingKind, str]], *, by: str) -> dict[str, Any]:
    """Return the waiting note of a saga this executor (`by`) cannot run for what it lacks (see `unfit`)."""
    tools = [text for kind, text in lacking if kind == "tool"]
    if tools:
        detail = f"a worker that has the tool(s) {', '.join(tools)}"
        return waiting_note("tool", detail, by=by, at=now())
    versions = "; ".join(text for _, text in lacking)
    return waiting_note("version", f"a worker whose tool version accepts: {versions}", by=by, at=now())


def _args_problems(spec: ToolSpec, args: Any) -> list[str]:
    """Return what the tool refuses in recorded arguments (a `$ref` or an encrypted secret is checked later)."""
    if not isinstance(args, dict):
        return ["the arguments are not a dict"]
    deferred = frozenset(name for name, value in args.items() if _opaque(value))
    return spec.check_args(args, deferred=deferred)


def _opaque(value: Any) -> bool:
    """Tell whether an argument's value is known only when its step runs: a `$ref`, or an encrypted secret."""
    if isinstance(value, dict):
        return "$ref" in value or has_envelope(value) or any(_opaque(item) for item in value.values())
    if isinstance(value, list):
        return any(_opaque(item) for item in value)
    return isinstance(value, str) and has_envelope(value)
