"""How the SQLite store writes: the text of its times, and what an owner's update of a saga row leaves alone."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from saga_runtime._storage import _sqlite


def test_a_time_is_written_as_isoformat_writes_it() -> None:
    """The SQLite store's time text is isoformat(" ", "microseconds") of the UTC time, for any time of any year."""
    pick = random.Random(7)
    span = (datetime.max.replace(tzinfo=UTC) - datetime.min.replace(tzinfo=UTC)) // timedelta(microseconds=1)
    times = [datetime.min.replace(tzinfo=UTC) + timedelta(microseconds=pick.randrange(span)) for _ in range(5000)]
    times += [value.replace(second=0, microsecond=0) for value in times[:100]]
    times += [datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC), datetime(2024, 5, 17, tzinfo=UTC)]
    for value in times:
        assert _sqlite._time_text(value) == value.isoformat(" ", "microseconds")


def test_the_kept_minutes_stay_bounded() -> None:
    """The minutes' texts kept for formatting times never grow past their bound, however many minutes pass."""
    start = datetime(2030, 1, 1, tzinfo=UTC)
    for minute in range(3 * _sqlite._MINUTES_KEPT):
        value = start + timedelta(minutes=minute, seconds=minute % 60, microseconds=minute)
        assert _sqlite._time_text(value) == value.isoformat(" ", "microseconds")
        assert len(_sqlite._MINUTES) <= _sqlite._MINUTES_KEPT
