"""PlanPolicy: limits a plan must keep before anything of it runs (for plans written by a model)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["PlanPolicy"]


@dataclass(frozen=True, slots=True)
class PlanPolicy:
    """Bound what a plan may do: which tools, how many steps, how wide a group, and whether all can be undone.

    Pass it as `executor.run(plan, policy=...)`; a plan outside it is refused with every violation listed,
    before anything is stored or run. With `require_compensation`, every tool must have `compensate`, except
    tools registered `irreversible=True`, which may stand in the plan's last group (as always).
    `approval_required` names tools whose calls wait for a person's decision in runs under this policy (as if
    they were registered `approval=True`): an application gates what a model chose without changing the tools.
    """

    allowed_tools: frozenset[str] | None = None
    max_steps: int | None = None
    max_group_size: int | None = None
    require_compensation: bool = False
    approval_required: frozenset[str] | None = None

    def __init__(
        self,
        allowed_tools: Iterable[str] | None = None,
        max_steps: int | None = None,
        max_group_size: int | None = None,
        require_compensation: bool = False,
        approval_required: Iterable[str] | None = None,
    ) -> None:
        if isinstance(allowed_tools, str):
            raise TypeError("allowed_tools is a collection of tool names, not one string")
        if isinstance(approval_required, str):
            raise TypeError("approval_required is a collection of tool names, not one string")
        for label, limit in (("max_steps", max_steps), ("max_group_size", max_group_size)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
                raise ValueError(f"{label} must be a positive int or None, got {limit!r}")
        object.__setattr__(self, "allowed_tools", None if allowed_tools is None else frozenset(allowed_tools))
        object.__setattr__(self, "max_steps", max_steps)
        object.__setattr__(self, "max_group_size", max_group_size)
        object.__setattr__(self, "require_compensation", bool(require_compensation))
        gated = None if approval_required is None else frozenset(approval_required)
        object.__setattr__(self, "approval_required", gated)

    def needs_approval(self, tool_name: str) -> bool:
        """Tell whether calls of `tool_name` wait for a person's decision under this policy."""
        return self.approval_required is not None and tool_name in self.approval_required
