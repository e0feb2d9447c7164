"""Times of any year, to the microsecond, come back as the instants written (PostgreSQL sends them as integers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from saga_runtime import SagaStatus
from saga_runtime._storage import SagaStore

from .conftest import as_stored, make_saga, make_steps

_FIRST = datetime.min.replace(tzinfo=UTC)
_LAST = datetime.max.replace(tzinfo=UTC)
_TIMES = [
    _FIRST,
    _FIRST + timedelta(microseconds=1),
    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # a microsecond before the epoch
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2026, 3, 29, 1, 30, 0, 123457, tzinfo=timezone(timedelta(hours=-7, minutes=-30))),
    _LAST - timedelta(microseconds=1),
    _LAST,
]


async def test_times_of_any_year_round_trip_to_the_microsecond(store: SagaStore) -> None:
    """Step and saga times from year 1 to 9999, either side of the epoch, in any offset, are stored exactly."""
    saga = make_saga("times", status=SagaStatus.SUCCESS, created_at=_TIMES[2])
    saga.finished_at = _TIMES[-1]
    steps = make_steps("times", len(_TIMES))
    for row, at in zip(steps, _TIMES, strict=True):
        row.started_at, row.finished_at, row.compensated_at = at, _TIMES[-1 - row.seq], at
        row.hash = None
    assert await store.create_saga(saga, steps[:1]) is None
    await store.save(saga, steps[1:])  # a lone write of several rows: the scalar statement
    loaded = await store.load_saga("times")
    assert loaded is not None
    stored_saga, stored_steps = loaded
    assert stored_saga == as_stored(store, saga)
    assert [(r.started_at, r.finished_at, r.compensated_at) for r in stored_steps] == [
        (at, _TIMES[-1 - seq], at) for seq, at in enumerate(_TIMES)
    ]


async def test_times_of_any_year_round_trip_in_a_write_of_many_rows(store: SagaStore) -> None:
    """A write of more rows than a scalar statement takes (PostgreSQL: JSON rows) stores every time exactly."""
    saga = make_saga("many", status=SagaStatus.SUCCESS, created_at=_TIMES[0])
    saga.finished_at = _TIMES[-1]
    steps = make_steps("many", 40)
    for row in steps:
        at = _TIMES[row.seq % len(_TIMES)]
        row.started_at, row.finished_at, row.compensated_at = at, _TIMES[-1 - row.seq % len(_TIMES)], None
        row.hash = None
    assert await store.create_saga(saga, steps) is None
    loaded = await store.load_saga("many")
    assert loaded is not None
    assert loaded[0] == as_stored(store, saga)
    assert [(r.started_at, r.finished_at, r.compensated_at) for r in loaded[1]] == [
        (r.started_at, r.finished_at, None) for r in steps
    ]
