"""Times of any year, to the microsecond, come back as the instants written (PostgreSQL sends them as integers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from saga_runtime import SagaStatus
from saga_runtime._storage import SagaStore
from saga_runtime._storage._codec import RowCodec

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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FLOAT_EXACT = 1 << 53  # microseconds: PostgreSQL reads times within this of the epoch the cheaper way
_EDGES = [
    _EPOCH + timedelta(microseconds=_FLOAT_EXACT - 1),
    _EPOCH - timedelta(microseconds=_FLOAT_EXACT - 1),
    _EPOCH + timedelta(microseconds=_FLOAT_EXACT),
    _EPOCH - timedelta(microseconds=_FLOAT_EXACT),
    _EPOCH + timedelta(microseconds=_FLOAT_EXACT + 1),
    datetime(2026, 11, 29, 0, 30, 15, 999999, tzinfo=UTC),
]


async def test_times_either_side_of_where_a_float_stops_being_exact_round_trip_in_lone_writes(
    store: SagaStore,
) -> None:
    """Lone writes of times just within and just beyond 2**53 microseconds of the epoch store each exactly."""
    saga = make_saga("edges", created_at=_EDGES[-1])
    steps = make_steps("edges", len(_EDGES))
    for row, at in zip(steps, _EDGES, strict=True):
        row.started_at, row.finished_at, row.compensated_at = at, _EDGES[-1], None
        row.hash = None
    assert await store.create_saga(saga, steps[:1]) is None
    for row in steps[1:]:  # one row a write: some with every time within, some with one beyond
        await store.save(None, [row])
    saga.finished_at = _EDGES[1]
    await store.save(saga, [])
    loaded = await store.load_saga("edges")
    assert loaded is not None
    assert loaded[0] == as_stored(store, saga)
    assert [(r.started_at, r.finished_at) for r in loaded[1]] == [(at, _EDGES[-1]) for at in _EDGES]


async def test_times_either_side_of_where_a_float_stops_being_exact_round_trip_in_writes_of_many_rows(
    store: SagaStore,
) -> None:
    """Writes of more rows than a scalar statement takes, all times within 2**53 microseconds of the epoch or one
    beyond, store each exactly."""
    within = [at for at in _EDGES if abs((at - _EPOCH) // timedelta(microseconds=1)) < _FLOAT_EXACT]
    for saga_id, times in (("within", within), ("beyond", _EDGES)):
        saga = make_saga(saga_id, created_at=times[0])
        steps = make_steps(saga_id, 40)
        for row in steps:
            at = times[row.seq % len(times)]
            row.started_at, row.finished_at, row.compensated_at = at, times[-1 - row.seq % len(times)], None
            row.hash = None
        assert await store.create_saga(saga, steps) is None
        loaded = await store.load_saga(saga_id)
        assert loaded is not None
        assert loaded[0] == as_stored(store, saga)
        assert [(r.started_at, r.finished_at) for r in loaded[1]] == [(r.started_at, r.finished_at) for r in steps]


async def test_a_step_started_again_is_stored_with_its_new_start(store: SagaStore) -> None:
    """A row written again with another start (a new attempt) stores the new start, not the one written before."""
    saga = make_saga("again")
    first, other = make_steps("again", 2)
    first.started_at, other.started_at = _EDGES[-1], _EDGES[0]
    first.hash = other.hash = None
    assert await store.create_saga(saga, [first]) is None
    await store.save(None, [first, other])  # the same start object again, then another row's
    first.started_at = _EDGES[-1] + timedelta(seconds=1)  # the step started again
    await store.save(None, [first])
    await store.save(None, [other])  # the start written before the new one, written again
    loaded = await store.load_saga("again")
    assert loaded is not None
    assert [r.started_at for r in loaded[1]] == [first.started_at, _EDGES[0]]


async def test_the_first_far_step_time_of_a_process_is_stored_exactly(
    store: SagaStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone write's step time 2**53 microseconds or more from the epoch, the process's first, is stored exactly."""
    monkeypatch.setattr(RowCodec, "far_step_times", False)  # no far time made yet, as in a fresh process
    saga = make_saga("first-far", created_at=_EDGES[-1])
    first, second = make_steps("first-far", 2)
    after, before = _EDGES[4], _EPOCH - timedelta(microseconds=_FLOAT_EXACT + 1)  # no float8 holds either
    first.started_at, first.finished_at = after, None
    second.started_at, second.finished_at = _EDGES[-1], before  # a near start, then a far finish
    first.hash = second.hash = None
    assert await store.create_saga(saga, [first]) is None
    monkeypatch.setattr(RowCodec, "far_step_times", False)
    await store.save(None, [second])
    loaded = await store.load_saga("first-far")
    assert loaded is not None
    assert [(r.started_at, r.finished_at) for r in loaded[1]] == [(after, None), (_EDGES[-1], before)]
