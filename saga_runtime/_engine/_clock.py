"""The lease clock: how long this process may still act on a saga's lease, by its own monotonic clock.

The store decides who owns a saga; this clock only says how long ago this process last heard the store say it was
this executor. A lease is confirmed by every owner-conditional write of the saga row and every renewal, each
counted from the moment it was sent (not answered), so the clock never overstates what is left: a process frozen
or cut off from the store for longer than the lease finds it run out, and starts no tool on it.
"""

from __future__ import annotations

import time
from datetime import datetime

from saga_runtime._records import now

__all__ = ["LeaseClock"]


class LeaseClock:
    """Until when (monotonic seconds) this process holds a saga's lease, as far as it knows."""

    __slots__ = ("timeout", "until")

    def __init__(self, timeout: float, expires: datetime | None) -> None:
        self.timeout = timeout
        # Converted once from the stored expiry (set just before the claim or creation that granted it).
        self.until = None if expires is None else time.monotonic() + (expires - now()).total_seconds()

    @staticmethod
    def mark() -> float:
        """Return the moment a write or renewal that may confirm the lease is sent."""
        return time.monotonic()

    def confirmed(self, sent: float) -> None:
        """Note that the store confirmed the lease, extended for `timeout`, by a request sent at `sent`."""
        self.until = sent + self.timeout

    def left(self) -> float:
        """Return the seconds of lease left (infinite when this process holds no lease)."""
        return float("inf") if self.until is None else self.until - time.monotonic()
