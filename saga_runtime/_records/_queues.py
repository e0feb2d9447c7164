"""Queues: where a submitted saga waits, and the limits workers start sagas within."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

__all__ = ["Queue", "QueueEntry", "RateLimit"]


def _limit(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `limit` sagas of a queue start in any `per` seconds, across all workers."""

    limit: int
    per: float = 1.0

    def __post_init__(self) -> None:
        _limit("RateLimit.limit", self.limit)
        per = self.per
        if isinstance(per, bool) or not isinstance(per, int | float) or not math.isfinite(per) or per <= 0:
            raise ValueError(f"RateLimit.per must be a positive number of seconds, got {per!r}")


@dataclass(frozen=True, slots=True, init=False)
class Queue:
    """A named queue and its limits, across all workers of the store (give each the same).

    `concurrency` bounds its sagas RUNNING or COMPENSATING at once; `key_concurrency` those sharing a key;
    `rate_limit` how many start per window.
    """

    name: str
    concurrency: int | None
    key_concurrency: int | None
    rate_limit: RateLimit | None

    def __init__(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        key_concurrency: int | None = None,
        rate_limit: RateLimit | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or len(name.encode()) > 255 or "\x00" in name:
            raise ValueError(f"a queue name must be non-empty text of at most 255 bytes, got {name!r}")
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise TypeError(f"rate_limit must be a RateLimit, got {type(rate_limit).__name__}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "concurrency", _limit("concurrency", concurrency))
        object.__setattr__(self, "key_concurrency", _limit("key_concurrency", key_concurrency))
        object.__setattr__(self, "rate_limit", rate_limit)


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """Where a QUEUED saga waits: queue, key, priority (lower first) and earliest start."""

    queue: str = "default"
    key: str | None = None
    priority: int = 0
    not_before: datetime | None = None
