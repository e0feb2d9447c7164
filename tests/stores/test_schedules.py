"""Schedules on every store: the store's primitives, and workers submitting each tick once (API.md §18)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from saga_runtime import SagaExecutor, SagaStatus, SagaStore, Schedule, ToolRegistry
from saga_runtime._records import tick_id

from .conftest import Stores, local_clock

T0 = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def make_schedule(name: str, **fields: Any) -> Schedule:
    """Return a schedule row with every field set (`fields` override)."""
    row = Schedule(
        name=name,
        plan=[[{"id": "a", "tool": "Effect", "args": {"name": "ünïcødé ✓", "n": 0.1 + 0.2}}]],
        function=None,
        args=None,
        cron="30 2 * * *",
        every=None,
        timezone="Europe/Berlin",
        queue="reports",
        next_tick=T0,
        last_tick=T0 - timedelta(days=1, microseconds=1),
        paused=False,
    )
    return replace(row, **fields)


# -- the store's primitives ---------------------------------------------------------------------------------------


async def test_a_schedule_round_trips_and_is_replaced_by_name(store: SagaStore) -> None:
    """put_schedule stores every field as given; the same name again replaces the row whole."""
    plan_row = make_schedule("nightly")
    function_row = make_schedule(
        "digest", plan=None, function="send_digest", args={"team": "ops", "n": [1, 2.5]}, cron=None, every=0.25
    )
    await store.put_schedule(plan_row)
    await store.put_schedule(function_row)
    assert await store.load_schedules() == [function_row, plan_row]  # by name
    assert await store.load_schedules("nightly") == [plan_row]
    assert await store.load_schedules("nope") == []
    replaced = make_schedule("nightly", cron=None, every=60.0, timezone="UTC", last_tick=None, paused=True)
    await store.put_schedule(replaced)
    assert await store.load_schedules("nightly") == [replaced]


async def test_due_schedules_are_the_unpaused_ones_not_after_now_earliest_first(store: SagaStore) -> None:
    """due_schedules returns the unpaused schedules whose next tick has come, earliest first, at most `limit`."""
    now = datetime.now(UTC)
    await store.put_schedule(make_schedule("late", next_tick=now - timedelta(hours=1)))
    await store.put_schedule(make_schedule("later", next_tick=now - timedelta(minutes=1)))
    await store.put_schedule(make_schedule("paused", next_tick=now - timedelta(hours=2), paused=True))
    await store.put_schedule(make_schedule("future", next_tick=now + timedelta(hours=1)))
    at, due = await store.due_schedules(now, 10)
    assert [s.name for s in due] == ["late", "later"]
    assert abs(at - now) < timedelta(minutes=1)
    _, first = await store.due_schedules(now, 1)
    assert [s.name for s in first] == ["late"]


async def test_due_is_judged_on_the_database_clock(store: SagaStore) -> None:
    """A worker whose clock runs an hour ahead sees a schedule due in ten minutes as due only on memory and SQLite
    (one machine's clock); PostgreSQL and MySQL/MariaDB judge on their own clock, so nothing fires early."""
    now = datetime.now(UTC)
    await store.put_schedule(make_schedule("soon", next_tick=now + timedelta(minutes=10)))
    at, due = await store.due_schedules(now + timedelta(hours=1), 10)
    if local_clock(store):
        assert [s.name for s in due] == ["soon"]
    else:
        assert due == []
        await store.put_schedule(make_schedule("soon", next_tick=now - timedelta(seconds=1)))
        at, due = await store.due_schedules(now + timedelta(hours=1), 10)
        assert [s.name for s in due] == ["soon"]
        assert abs(at - now) < timedelta(minutes=1)  # the database's time, not the skewed one


async def test_advancing_a_tick_is_one_conditional_update(store: SagaStore) -> None:
    """Of many advances of the same tick at once exactly one wins; a stale or paused schedule is left as it is."""
    await store.put_schedule(make_schedule("nightly"))
    following = T0 + timedelta(days=1)
    won = await asyncio.gather(*(store.advance_schedule("nightly", T0, following, T0) for _ in range(8)))
    assert sorted(won) == [False] * 7 + [True]
    [moved] = await store.load_schedules("nightly")
    assert (moved.next_tick, moved.last_tick) == (following, T0)
    assert not await store.advance_schedule("nightly", T0, following + timedelta(days=1), T0)  # stale
    assert await store.pause_schedule("nightly")
    assert not await store.advance_schedule("nightly", following, following + timedelta(days=1), following)
    assert not await store.advance_schedule("ghost", T0, following, T0)


async def test_pause_resume_and_delete(store: SagaStore) -> None:
    """Pause keeps the next tick; resume sets it only when paused; each says whether the schedule exists."""
    await store.put_schedule(make_schedule("nightly"))
    assert await store.pause_schedule("nightly")
    assert await store.pause_schedule("nightly")  # paused already: unchanged, still there
    assert (await store.load_schedules("nightly"))[0].paused
    later = T0 + timedelta(days=3)
    assert await store.resume_schedule("nightly", later)
    [resumed] = await store.load_schedules("nightly")
    assert (resumed.paused, resumed.next_tick) == (False, later)
    assert await store.resume_schedule("nightly", T0)  # running: its next tick stays
    assert (await store.load_schedules("nightly"))[0].next_tick == later
    assert not await store.pause_schedule("ghost")
    assert not await store.resume_schedule("ghost", T0)
    assert await store.delete_schedule("nightly")
    assert not await store.delete_schedule("nightly")
    assert await store.load_schedules() == []


# -- workers ------------------------------------------------------------------------------------------------------


class Ledger:
    """A tool that notes each call's name."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.registry = ToolRegistry()
        ledger = self

        @self.registry.tool
        class Effect:
            async def execute(self, name: str) -> dict[str, str]:
                ledger.calls.append(name)
                return {"name": name}


def plan(name: str) -> list[Any]:
    """Return a one-step plan noting `name`."""
    return [{"tool": "Effect", "args": {"name": name}, "id": "only"}]


@asynccontextmanager
async def workers(*executors: SagaExecutor) -> AsyncIterator[None]:
    """Run `serve()` of each executor in a task for the block, then stop them."""
    tasks = [asyncio.create_task(executor.serve(interval=0.02)) for executor in executors]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def wait_for(condition: Any) -> None:
    """Poll the async `condition` until it holds, for 30 seconds at most (a generous bound: a busy machine)."""
    async with asyncio.timeout(30):
        while not await condition():  # noqa: ASYNC110 (the store is polled: no event to wait on)
            await asyncio.sleep(0.02)


async def backdate(store: SagaStore, name: str, by: timedelta) -> Schedule:
    """Move a schedule's next tick `by` into the past, as if every worker had been down since; return it."""
    [schedule] = await store.load_schedules(name)
    moved = replace(schedule, next_tick=schedule.next_tick - by)
    await store.put_schedule(moved)
    return moved


async def test_a_due_tick_is_submitted_once_under_its_tick_id_and_runs(store: SagaStore) -> None:
    """serve() submits the due tick's saga as <name>@<tick>, runs it, and moves the schedule to its next tick."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    await executor.schedule("hourly", plan("hourly"), every=3600)
    due = await backdate(store, "hourly", timedelta(hours=1))
    saga_id = tick_id("hourly", due.next_tick)
    assert saga_id.startswith("hourly@") and saga_id.endswith("Z")  # noqa: PT018
    async with workers(executor):
        await wait_for(lambda: _last_tick(store, "hourly"))
        result = await executor.handle(saga_id).result(timeout=30)
    assert result.status is SagaStatus.SUCCESS
    assert ledger.calls == ["hourly"]
    [after] = await executor.schedules()
    assert after.last_tick == due.next_tick
    assert after.next_tick == due.next_tick + timedelta(hours=1)
    assert after.next_tick > datetime.now(UTC)


async def test_after_downtime_only_the_latest_missed_tick_is_submitted(store: SagaStore) -> None:
    """A cron schedule missed for five hours submits one saga, for its latest tick, then waits for the next."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    await executor.schedule("often", plan("often"), cron="*/10 * * * *")
    down = await backdate(store, "often", timedelta(hours=5))
    async with workers(executor):
        await wait_for(lambda: _last_tick(store, "often"))
        [after] = await executor.schedules()
        assert after.last_tick is not None
        await executor.handle(tick_id("often", after.last_tick)).result(timeout=30)
    assert after.last_tick >= down.next_tick + timedelta(hours=4, minutes=50)  # the latest, not the first missed
    assert after.last_tick <= datetime.now(UTC) < after.next_tick
    assert after.next_tick - after.last_tick == timedelta(minutes=10)
    assert [s.saga_id for s in await store.list_sagas()] == [tick_id("often", after.last_tick)]
    assert ledger.calls == ["often"]


async def _last_tick(store: SagaStore, name: str) -> bool:
    return (await store.load_schedules(name))[0].last_tick is not None


async def test_a_paused_schedule_submits_nothing_and_resuming_skips_the_missed_ticks(store: SagaStore) -> None:
    """While paused nothing is submitted, however late; resumed, it waits for its next tick to come."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    await executor.schedule("quiet", plan("quiet"), every=600)
    await backdate(store, "quiet", timedelta(hours=2))
    paused = await executor.pause_schedule("quiet")
    assert paused.paused
    async with workers(executor):
        await asyncio.sleep(0.3)  # several rounds of the worker
        assert await store.list_sagas() == []
        resumed = await executor.resume_schedule("quiet")
        await asyncio.sleep(0.3)
    assert not resumed.paused
    assert resumed.next_tick > datetime.now(UTC)  # the ticks missed while paused are not fired
    assert await store.list_sagas() == []
    assert ledger.calls == []
    await executor.delete_schedule("quiet")
    assert await executor.schedules() == []


async def test_three_workers_submit_each_tick_exactly_once(stores: Stores, kind: str) -> None:
    """Three workers serving one store at once submit one saga per due tick, each run once, none skipped."""
    first = await stores.open(kind, wipe=True)
    others = [first, first] if kind == "memory" else [await stores.open(kind, stores.url(kind)) for _ in range(2)]
    ledger = Ledger()
    executors = [SagaExecutor(ledger.registry, store) for store in (first, *others)]
    names = [f"s{index:02}" for index in range(12)]
    ticks = {}
    for name in names:
        await executors[0].schedule(name, plan(name), every=3600)
        ticks[name] = (await backdate(first, name, timedelta(hours=1))).next_tick
    expected = sorted(tick_id(name, tick) for name, tick in ticks.items())

    async def all_moved() -> bool:
        return all(s.last_tick is not None for s in await first.load_schedules())

    async with AsyncExitStack() as stack:
        await stack.enter_async_context(workers(*executors))
        await wait_for(all_moved)
        for saga_id in expected:
            assert (await executors[0].handle(saga_id).result(timeout=30)).status is SagaStatus.SUCCESS
    assert sorted(s.saga_id for s in await first.list_sagas(limit=100)) == expected
    assert sorted(ledger.calls) == names  # each tick's saga ran once
    assert {s.name: s.last_tick for s in await first.load_schedules()} == ticks


async def test_a_tick_submitted_by_a_worker_that_did_not_move_the_schedule_is_not_submitted_twice(
    store: SagaStore,
) -> None:
    """A worker that submitted a tick and died before moving the schedule on leaves it due: the next worker's
    submit of the same tick id stores nothing new, and moves the schedule on."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    await executor.schedule("once", plan("once"), every=3600)
    due = await backdate(store, "once", timedelta(hours=1))
    saga_id = tick_id("once", due.next_tick)
    await executor.submit(plan("once"), saga_id=saga_id, queue="default")  # the dead worker's submit
    async with workers(executor):
        await wait_for(lambda: _last_tick(store, "once"))
        await executor.handle(saga_id).result(timeout=30)
    assert [s.saga_id for s in await store.list_sagas()] == [saga_id]
    assert ledger.calls == ["once"]


async def test_a_tick_whose_id_holds_another_plan_counts_as_submitted(store: SagaStore) -> None:
    """A tick whose saga id is stored with another plan (the schedule was replaced in between) is not submitted
    again, and the schedule moves on."""
    ledger = Ledger()
    executor = SagaExecutor(ledger.registry, store)
    await executor.schedule("swap", plan("swap"), every=3600)
    due = await backdate(store, "swap", timedelta(hours=1))
    saga_id = tick_id("swap", due.next_tick)
    await executor.submit(plan("another plan"), saga_id=saga_id)
    async with workers(executor):
        await wait_for(lambda: _last_tick(store, "swap"))
        await executor.handle(saga_id).result(timeout=30)
    assert ledger.calls == ["another plan"]
