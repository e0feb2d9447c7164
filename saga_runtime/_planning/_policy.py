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
    """

    allowed_tools: frozenset[str] | None = None
    max_steps: int | None = None
    max_group_size: int | None = None
    require_compensation: bool = False

    def __init__(
        self,
        allowed_tools: Iterable[str] | None = None,
        max_steps: int | None = None,
        max_group_size: int | None = None,
        require_compensation: bool = False,
    ) -> None:
        if isinstance(allowed_tools, str):
            raise TypeError("allowed_tools is a collection of tool names, not one string")
        for label, limit in (("max_steps", max_steps), ("max_group_size", max_group_size)):
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
                raise ValueError(f"{label} must be a positive int or None, got {limit!r}")
        object.__setattr__(self, "allowed_tools", None if allowed_tools is None else frozenset(allowed_tools))
        object.__setattr__(self, "max_steps", max_steps)
        object.__setattr__(self, "max_group_size", max_group_size)
        object.__setattr__(self, "require_compensation", bool(require_compensation))
