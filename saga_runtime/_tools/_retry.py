"""RetryPolicy: how often, and how far apart, a failed attempt is retried."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Decide how many attempts a call gets and how long to wait between them.

    `max_attempts` counts the first try. The wait before attempt n+1 is
    `initial_interval * backoff_coefficient ** (n - 1)` seconds, capped at `max_interval`; `jitter` draws it
    from its upper half ("equal jitter"). `non_retryable` types (and subclasses) fail at once. Only
    `Exception` is retried, so cancellation always goes through.
    """

    max_attempts: int = 1
    initial_interval: float = 0.1
    backoff_coefficient: float = 2.0
    max_interval: float = 30.0
    jitter: bool = True
    non_retryable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise TypeError(f"max_attempts must be an int, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts counts the first try and must be at least 1, got {self.max_attempts}")
        if self.initial_interval < 0 or self.max_interval < 0:
            raise ValueError("initial_interval and max_interval must not be negative")
        if self.backoff_coefficient < 1:
            raise ValueError(f"backoff_coefficient must be at least 1, got {self.backoff_coefficient}")
        non_retryable = tuple(self.non_retryable)
        for kind in non_retryable:
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise TypeError(f"non_retryable holds exception types, got {kind!r}")
        object.__setattr__(self, "non_retryable", non_retryable)

    def delay(self, attempt: int) -> float:
        """Return the seconds to wait after failed attempt `attempt` (1-based)."""
        try:
            base = min(self.max_interval, self.initial_interval * self.backoff_coefficient ** (attempt - 1))
        except OverflowError:  # long past the cap
            base = self.max_interval if self.initial_interval > 0 else 0.0
        if self.jitter and base > 0:
            return base / 2 + random.uniform(0, base / 2)
        return base

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """Tell whether failed attempt `attempt`, which raised `exc`, is retried."""
        if attempt >= self.max_attempts or not isinstance(exc, Exception):
            return False
        return not isinstance(exc, self.non_retryable)


NO_RETRY = RetryPolicy()
DEFAULT_COMPENSATION_RETRY = RetryPolicy(max_attempts=3, initial_interval=0.2, max_interval=2.0)
