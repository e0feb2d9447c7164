"""StepContext: what a running tool knows of its step, and how it reports cost."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["StepContext"]


def _no_budget(cost: float, tokens: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class StepContext:
    """Describe a tool's step; injected into any parameter annotated `StepContext`.

    `idempotency_key` is stable across retries, crashes and recovery, and unique per step: pass it on (an
    idempotency header) and use it in `compensate` to find what to undo. `attempt` is 1-based, per `phase`.
    """

    saga_id: str
    step_id: str
    tool_name: str
    args: Mapping[str, Any]
    attempt: int
    idempotency_key: str
    phase: Literal["execute", "compensate", "reconcile"] = "execute"
    _charge: Callable[[float, int], None] = field(default=_no_budget, repr=False, compare=False)
    #: What the registry's lifespan yielded: the tools' shared resources.
    state: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def charge(self, cost: float = 0.0, tokens: int = 0) -> None:
        """Add cost and tokens to the saga; raise `BudgetExceededError` past a budget; sync tools may call it."""
        self._charge(cost, tokens)
