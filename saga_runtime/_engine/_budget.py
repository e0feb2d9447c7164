"""Budget: the cost and token caps of a saga, and the thread-safe account charges go to."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from saga_runtime._exceptions import BudgetExceededError

__all__ = ["Account", "Budget"]


@dataclass(frozen=True, slots=True)
class Budget:
    """Cap what a saga may spend: `max_cost` (in your currency) and `max_tokens`; None means no cap.

    The charge that crosses a cap raises `BudgetExceededError` in the step that made it: that step fails
    without retry and the saga compensates. Charges are stored with the saga.
    """

    max_cost: float | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_cost is not None and (isinstance(self.max_cost, bool) or not self.max_cost >= 0):
            raise ValueError(f"max_cost must be a non-negative number or None, got {self.max_cost!r}")
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 0
        ):
            raise ValueError(f"max_tokens must be a non-negative int or None, got {self.max_tokens!r}")

    def to_json(self) -> dict[str, Any]:
        """Return the budget as stored."""
        return {"max_cost": self.max_cost, "max_tokens": self.max_tokens}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Budget | None:
        """Return the budget stored as `data`, or None."""
        return None if data is None else cls(max_cost=data.get("max_cost"), max_tokens=data.get("max_tokens"))


class Account:
    """Add charges to a saga row under a lock, so parallel steps cannot jointly overshoot unnoticed."""

    def __init__(self, saga_id: str, budget: Budget | None, add: Callable[[float, int], tuple[float, int]]) -> None:
        self._saga_id = saga_id
        self._budget = budget
        self._add = add  # the journal's intent: the record has one writer
        self._lock = threading.Lock()

    def charge(self, cost: float = 0.0, tokens: int = 0) -> None:
        """Add `cost` and `tokens`; raise `BudgetExceededError` if this charge crosses a cap."""
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0:
            raise ValueError(f"cost must be a finite, non-negative number, got {cost!r}")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens must be a non-negative int, got {tokens!r}")
        with self._lock:
            spent_cost, spent_tokens = self._add(float(cost), tokens)
            budget = self._budget
            if budget is None:
                return
            over_cost = budget.max_cost is not None and spent_cost > budget.max_cost
            over_tokens = budget.max_tokens is not None and spent_tokens > budget.max_tokens
            if not (over_cost or over_tokens):
                return
            spent, cap = (
                (f"cost {spent_cost:g}", f"max_cost {budget.max_cost:g}")
                if over_cost and budget.max_cost is not None
                else (f"{spent_tokens} tokens", f"max_tokens {budget.max_tokens}")
            )
            raise BudgetExceededError(
                f"saga {self._saga_id!r} is over budget: {spent} exceeds {cap}; raise the Budget or spend less",
                saga_id=self._saga_id,
                cost=spent_cost,
                tokens=spent_tokens,
                max_cost=budget.max_cost,
                max_tokens=budget.max_tokens,
            )
