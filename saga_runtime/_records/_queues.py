"""Queues: where a submitted saga waits, the limits workers start sagas within, and an operator's pause or drain."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ACTIVE",
    "DECISION_WAKE",
    "DRAINING",
    "PAUSED",
    "QUEUE_STATES",
    "Queue",
    "QueueEntry",
    "QueueInfo",
    "QueueStanding",
    "QueueState",
    "RateLimit",
]

#: A queue's state, set by an operator and stored (no row: active). Paused and draining both start nothing new;
#: what runs goes on. A drain is the step before taking a queue out of service: it reads "drained" once idle.
QueueState = Literal["active", "paused", "draining"]
# What an idle worker's looks may find (`SagaStore.due_work`): a queued saga to start, a schedule's tick to submit,
# an approval past its deadline to reject, a waiting saga to go on with, a live saga whose lease ran out.
DueWork = Literal["queued", "schedules", "approvals", "waiting", "orphans"]
ACTIVE: QueueState = "active"
PAUSED: QueueState = "paused"
DRAINING: QueueState = "draining"
QUEUE_STATES: tuple[QueueState, ...] = (ACTIVE, PAUSED, DRAINING)
#: What a store's `queue_wakeups` passes for a decision, cancel, unpark, retry or message (no queue is so named):
#: recovery's round goes on with it; no queue needs a claim for it.
DECISION_WAKE = "\x00decision"
#: How a wakeup names the one saga a message or a decision made ready (`notify_workers(saga_wake(saga_id))`):
#: a worker goes straight to it.
SAGA_WAKE = "message:"


def saga_wake(saga_id: str) -> str:
    """Return the wakeup that tells workers the saga `saga_id` was made ready (a message, a decision)."""
    return SAGA_WAKE + saga_id


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
class QueueStanding:
    """Where a queued saga stands in its queue: the queue's state, the limits its workers last said they serve it
    with (None: not said, or none), and what those limits count now (read when the saga is read, not a claim's).

    `running`: the queue's sagas RUNNING or COMPENSATING; `key_running`: those of them sharing the saga's `key`;
    `recent`: the queue's starts within the rate window (counted up to `rate_limit`; 0 without one); `not_before`:
    the saga's earliest start.
    """

    queue: str
    state: QueueState = "active"
    key: str | None = None
    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_limit: int | None = None
    rate_per: float | None = None
    running: int = 0
    key_running: int = 0
    recent: int = 0
    not_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """Where a QUEUED saga waits: queue, key, priority (lower first) and earliest start."""

    queue: str = "default"
    key: str | None = None
    priority: int = 0
    not_before: datetime | None = None


class QueueInfo(BaseModel):
    """One queue as the store sees it: its sagas by state, its oldest queued saga, its state and known limits.

    `queued` wait to start, `running` are RUNNING or COMPENSATING, `waiting` are WAITING (a decision, a message,
    a time). `paused` / `draining`: an operator's request, obeyed by every worker (nothing new starts). The limits
    are those the last worker serving the queue was given (None: no worker said, or no such limit).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    queued: int = 0
    running: int = 0
    waiting: int = 0
    oldest_queued_at: datetime | None = None
    paused: bool = False
    draining: bool = False
    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_limit: int | None = None
    rate_per: float | None = None
    state_changed_at: datetime | None = None

    @property
    def state(self) -> str:
        """Return "paused", "draining", "drained" (a drain with nothing left running) or "active"."""
        if self.paused:
            return PAUSED
        if self.draining:
            return "drained" if self.running == 0 else DRAINING
        return ACTIVE

    def limits(self) -> str:
        """Return the known limits in words ("concurrency 20, per key 1, 100 per 1s"), or "" if none is known."""
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.key_concurrency is not None:
            parts.append(f"per key {self.key_concurrency}")
        if self.rate_limit is not None:
            parts.append(f"{self.rate_limit} per {self.rate_per:g}s")
        return ", ".join(parts)
