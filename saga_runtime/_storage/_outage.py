"""One WARNING when a store's database stops answering, one when it answers again: an outage, not every retry.

Each retry of a lost connection is logged at DEBUG; a process with three workers' worth of operations retrying
through a 50-second outage otherwise prints hundreds of lines saying the same thing.
"""

from __future__ import annotations

import logging
import time

__all__ = ["Outage"]

logger = logging.getLogger("saga_runtime")


class Outage:
    """The state of one store's connection: answering, or lost since a moment, with its retries counted."""

    __slots__ = ("__weakref__", "_failed", "_retries", "_since", "_url")

    def __init__(self, url: str) -> None:
        self._url = url
        self._since: float | None = None  # time.monotonic() of the first lost connection, while it lasts
        self._retries = 0
        self._failed = 0

    @property
    def down(self) -> bool:
        """Tell whether the store's operations lose their connections now (no operation has succeeded since)."""
        return self._since is not None

    def retry(self, what: str, error: BaseException, number: int, delay: float) -> None:
        """Note that `what` lost its connection and is tried again after `delay` seconds (retry `number`)."""
        self.lost(what, error)
        logger.debug("%s lost its connection, retry %d in %.2fs: %s", what, number, delay, error)

    def lost(self, what: str, error: BaseException) -> None:
        """Note that `what` could not reach the database; the first time since it last answered, say so."""
        self._retries += 1
        if self._since is None:
            self._since = time.monotonic()
            logger.warning(
                "%s unreachable (%s: %s); retrying quietly until it answers again", self._url, what, _first_line(error)
            )

    def gave_up(self) -> None:
        """Note an operation that stopped retrying (its error is raised to its caller)."""
        self._failed += 1

    def answered(self) -> None:
        """Note an operation that succeeded: if the connection was lost, say it is back, and for how long it was out."""
        if self._since is None:
            return
        took = time.monotonic() - self._since
        logger.warning(
            "%s answers again after %.1fs (%d failed tries, %d operations gave up)",
            self._url,
            took,
            self._retries,
            self._failed,
        )
        self._since, self._retries, self._failed = None, 0, 0


def _first_line(error: BaseException) -> str:
    text = str(error).splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"
