"""Schedules' timing and validation: cron ticks in a timezone across DST, intervals, and bad input storing nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import pytest
from cryptography.fernet import Fernet

from saga_runtime import DynamicSaga, PlanValidationError, SagaExecutor, Schedule, Secret, ToolRegistry
from saga_runtime._records import Timing, tick_id
from saga_runtime._schedules import Schedules
from saga_runtime._storage import MemoryStore

registry = ToolRegistry()


@registry.tool
class Report:
    async def execute(self, day: str) -> dict[str, str]:
        return {"day": day}


PLAN: list[Any] = [{"tool": "Report", "args": {"day": "today"}, "id": "report"}]


@registry.saga
async def report_fn(saga: DynamicSaga, day: str = "monday", when: Any = None) -> None:
    """A saga function a schedule names."""
    await saga.call("Report", day=day)


@registry.saga
async def send_digest(saga: DynamicSaga, team: str) -> None:
    """Another saga function a schedule names."""
    await saga.call("Report", day=team)


def utc(*parts: int) -> datetime:
    """Return an aware UTC datetime."""
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def test_a_cron_tick_falls_at_local_time_in_its_timezone() -> None:
    """'0 9 * * *' in New York is 13:00 UTC in summer and 14:00 UTC once the clocks went back."""
    timing = Timing("0 9 * * *", None, "America/New_York")
    assert timing.first_after(utc(2026, 10, 30, 12)) == utc(2026, 10, 30, 13)
    assert timing.first_after(utc(2026, 10, 31, 14)) == utc(2026, 11, 1, 14)  # EST from 1 November


def test_a_cron_time_skipped_by_spring_forward_fires_once_at_the_jump() -> None:
    """02:30 does not exist in Berlin on 29 March 2026: the tick fires at 03:00 CEST, and at 02:30 the next day."""
    timing = Timing("30 2 * * *", None, "Europe/Berlin")
    first = timing.first_after(utc(2026, 3, 28, 23))
    assert first == utc(2026, 3, 29, 1)  # 03:00 CEST
    assert timing.first_after(first) == utc(2026, 3, 30, 0, 30)  # 02:30 CEST


def test_a_fixed_cron_time_repeated_by_fall_back_fires_once() -> None:
    """01:30 happens twice in New York on 1 November 2026; a daily 01:30 job fires once that night."""
    timing = Timing("30 1 * * *", None, "America/New_York")
    first = timing.first_after(utc(2026, 11, 1, 4))
    assert first == utc(2026, 11, 1, 5, 30)  # 01:30 EDT
    assert timing.first_after(first) == utc(2026, 11, 2, 6, 30)  # 01:30 EST, the next day


def test_due_gives_the_latest_missed_cron_tick_and_the_one_after() -> None:
    """After three hours down, an every-five-minutes cron's due tick is the latest one, and the next follows it."""
    timing = Timing("*/5 * * * *", None, "UTC")
    tick, following = timing.due(utc(2026, 1, 1, 6), utc(2026, 1, 1, 9, 7, 30))
    assert (tick, following) == (utc(2026, 1, 1, 9, 5), utc(2026, 1, 1, 9, 10))
    assert timing.due(utc(2026, 1, 1, 9, 5), utc(2026, 1, 1, 9, 5)) == (utc(2026, 1, 1, 9, 5), utc(2026, 1, 1, 9, 10))


def test_due_keeps_an_interval_on_its_grid() -> None:
    """An every-60s schedule due since 10:00:00 gives, at 10:03:30, the tick of 10:03:00 and then 10:04:00."""
    timing = Timing(None, 60, "UTC")
    assert timing.due(utc(2026, 1, 1, 10), utc(2026, 1, 1, 10, 3, 30)) == (
        utc(2026, 1, 1, 10, 3),
        utc(2026, 1, 1, 10, 4),
    )


def test_whole_second_intervals_tick_on_whole_seconds() -> None:
    """every=60 from 10:00:00.250 first ticks at 10:01:01 (a whole second); every=0.5 keeps its fraction."""
    at = datetime(2026, 1, 1, 10, 0, 0, 250_000, tzinfo=UTC)
    assert Timing(None, 60, "UTC").first_after(at) == utc(2026, 1, 1, 10, 1, 1)
    assert Timing(None, 0.5, "UTC").first_after(at) == at + timedelta(seconds=0.5)


def test_cron_nicknames_are_read() -> None:
    """@hourly and @daily mean what Vixie cron means by them."""
    assert Timing("@hourly", None, "UTC").first_after(utc(2026, 1, 1, 5, 10)) == utc(2026, 1, 1, 6)
    assert Timing("@daily", None, "UTC").first_after(utc(2026, 1, 1, 5, 10)) == utc(2026, 1, 2)


def test_tick_ids_are_the_name_and_the_tick_in_iso_8601_utc() -> None:
    """A tick's saga id is `<name>@<ISO 8601 UTC>`, seconds unless the tick has a fraction."""
    assert tick_id("nightly", utc(2026, 3, 29, 1)) == "nightly@2026-03-29T01:00:00Z"
    assert tick_id("fast", datetime(2026, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)) == "fast@2026-01-01T00:00:00.500000Z"


@pytest.mark.parametrize(
    ("cron", "every", "timezone", "error", "text"),
    [
        ("61 * * * *", None, "UTC", ValueError, "'61 * * * *'"),
        ("* * *", None, "UTC", ValueError, "'* * *'"),
        ("0 0 30 2 *", None, "UTC", ValueError, "'0 0 30 2 *'"),
        (None, None, "UTC", ValueError, "exactly one of cron"),
        ("* * * * *", 60, "UTC", ValueError, "exactly one of cron"),
        (None, 0, "UTC", ValueError, "positive number"),
        (None, -5, "UTC", ValueError, "positive number"),
        (None, float("nan"), "UTC", ValueError, "positive number"),
        (None, True, "UTC", ValueError, "positive number"),
        (None, "60", "UTC", ValueError, "positive number"),
        (None, 1e300, "UTC", ValueError, "between a microsecond and 100 years"),
        ("* " * 200, None, "UTC", ValueError, "longer than 255 bytes"),
        ("* * * * *", None, "Mars/Olympus_Mons", ValueError, "'Mars/Olympus_Mons'"),
        ("* * * * *", None, "../etc/passwd", ValueError, "'../etc/passwd'"),
        (42, None, "UTC", TypeError, "cron must be a cron expression"),
    ],
)
def test_bad_timing_is_refused_naming_it(cron: Any, every: Any, timezone: str, error: type, text: str) -> None:
    """A bad cron expression, interval or timezone, or both or neither of cron and every, raises naming it."""
    with pytest.raises(error, match=re.escape(text)):
        Timing(cron, every, timezone)


def test_cron_without_the_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without cronsim, a cron schedule raises ImportError naming the `cron` extra; an interval needs none."""
    monkeypatch.setitem(sys.modules, "cronsim", None)
    with pytest.raises(ImportError, match=r"saga-runtime\[cron\]"):
        Timing("0 9 * * *", None, "UTC")
    assert Timing(None, 5, "UTC").every == 5.0


async def test_bad_input_to_schedule_stores_nothing() -> None:
    """Each bad option or target raises its error and stores no schedule; a bad plan lists every problem."""
    store = MemoryStore()
    executor = SagaExecutor(registry, store)
    bad: list[tuple[dict[str, Any], type[Exception]]] = [
        ({"name": "x", "fn_or_plan": PLAN, "cron": "not cron"}, ValueError),
        ({"name": "x", "fn_or_plan": PLAN, "every": 60, "timezone": "Nowhere/Land"}, ValueError),
        ({"name": "x", "fn_or_plan": PLAN}, ValueError),
        ({"name": "x", "fn_or_plan": PLAN, "every": 60, "cron": "* * * * *"}, ValueError),
        ({"name": "x", "fn_or_plan": PLAN, "every": -1}, ValueError),
        ({"name": "", "fn_or_plan": PLAN, "every": 60}, ValueError),
        ({"name": "x" * 600, "fn_or_plan": PLAN, "every": 60}, ValueError),
        ({"name": "x", "fn_or_plan": PLAN, "every": 60, "queue": ""}, ValueError),
        ({"name": "x", "fn_or_plan": PLAN, "every": 60, "args": {"day": "x"}}, TypeError),
        ({"name": "x", "fn_or_plan": 42, "every": 60}, TypeError),
        ({"name": "x", "fn_or_plan": "report_fn", "every": 60, "args": {"when": object()}}, ValueError),
        ({"name": "x", "fn_or_plan": "report_fn", "every": 60, "args": ["a"]}, TypeError),
    ]
    for options, error in bad:
        with pytest.raises(error):
            await executor.schedule(**options)
    two_problems = [{"tool": "Nope", "args": {}}, {"tool": "Report", "args": {"day": 3}}]
    with pytest.raises(PlanValidationError) as caught:
        await executor.schedule("x", two_problems, every=60)
    assert len(caught.value.problems) == 2
    with pytest.raises(PlanValidationError, match="no saga function 'ghost_fn'"):
        await executor.schedule("x", "ghost_fn", every=60)
    with pytest.raises(PlanValidationError, match="send_digest"):
        await executor.schedule("x", "send_digest", every=60, args={"team": 3})
    assert await executor.schedules() == []


async def test_a_schedule_is_stored_and_replaced_by_name() -> None:
    """schedule() stores the target and timing with its first tick to come; the same name again replaces it."""
    executor = SagaExecutor(registry, MemoryStore())
    before = datetime.now(UTC)
    first = await executor.schedule("report", PLAN, cron="0 6 * * *", timezone="Europe/Paris", queue="reports")
    assert isinstance(first, Schedule)
    assert (first.cron, first.every, first.timezone, first.queue) == ("0 6 * * *", None, "Europe/Paris", "reports")
    assert (first.last_tick, first.paused) == (None, False)
    assert first.next_tick > before
    assert (first.target, first.when) == ("plan (1 step)", "cron '0 6 * * *' (Europe/Paris)")
    second = await executor.schedule("report", "report_fn", every=30, args={"day": "monday"})
    assert await executor.schedules() == [second]
    assert (second.function, second.args, second.plan, second.cron) == ("report_fn", {"day": "monday"}, None, None)
    assert (second.target, second.when) == ("report_fn", "every 30s")


async def test_unknown_names_raise_a_key_error_naming_them() -> None:
    """Pausing, resuming or deleting a schedule nobody stored raises KeyError naming it."""
    executor = SagaExecutor(registry, MemoryStore())
    for action in (executor.pause_schedule, executor.resume_schedule, executor.delete_schedule):
        with pytest.raises(KeyError, match="no schedule 'ghost'"):
            await action("ghost")


async def test_a_saga_function_tick_is_submitted_by_name_with_its_arguments() -> None:
    """A function's tick calls submit(name, args=..., saga_id=<name>@<tick>, queue=...): the function path."""
    store = MemoryStore()
    calls: list[tuple[Any, dict[str, Any]]] = []

    async def submit(target: Any, **options: Any) -> None:
        calls.append((target, options))

    schedules = Schedules(store, registry, None, submit)
    stored = await schedules.put(
        "digest", "send_digest", cron=None, every=3600, args={"team": "ops"}, queue="mail", timezone="UTC"
    )
    tick = datetime(2026, 1, 1, 8, tzinfo=UTC)
    await store.put_schedule(replace(stored, next_tick=tick))
    moved = await schedules.submit_due()
    assert calls == [("send_digest", {"args": {"team": "ops"}, "saga_id": moved[0], "queue": "mail"})]
    tick_at = datetime.fromisoformat(moved[0].removeprefix("digest@"))
    assert tick_at <= datetime.now(UTC)
    assert (tick_at - tick) % timedelta(hours=1) == timedelta(0)  # on its grid: the latest tick, hours late


async def test_a_secret_argument_is_stored_encrypted_and_reaches_the_tool_at_each_tick() -> None:
    """A plan's secret is kept encrypted in the schedule row, and the tick's saga hands the tool its value."""
    secrets = ToolRegistry()
    seen: list[str] = []

    @secrets.tool
    class Pay:
        async def execute(self, token: Annotated[str, Secret]) -> dict[str, bool]:
            seen.append(token)
            return {"paid": True}

    store = MemoryStore()
    executor = SagaExecutor(secrets, store, secret_key=Fernet.generate_key())
    stored = await executor.schedule("pay", [{"tool": "Pay", "args": {"token": "s3cret"}}], every=3600)
    assert stored.plan is not None
    assert "s3cret" not in json.dumps(stored.plan)
    due = replace(stored, next_tick=stored.next_tick - timedelta(hours=1))
    await store.put_schedule(due)
    worker = asyncio.create_task(executor.serve(interval=0.02))
    try:
        async with asyncio.timeout(30):
            while not await store.list_sagas(status="SUCCESS"):  # noqa: ASYNC110 (polling the store)
                await asyncio.sleep(0.02)
    finally:
        worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    assert seen == ["s3cret"]
    assert [s.saga_id for s in await store.list_sagas()] == [tick_id("pay", due.next_tick)]


async def test_a_worker_without_the_plans_tools_leaves_the_tick_to_one_that_has_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker lacking the plan's tool logs once and leaves the schedule due; a worker with it submits the tick."""
    store = MemoryStore()
    owner = SagaExecutor(registry, store)
    stored = await owner.schedule("report", PLAN, every=3600)
    due = replace(stored, next_tick=stored.next_tick - timedelta(hours=1, seconds=5))  # due 4-5 s ago
    await store.put_schedule(due)
    lacking = Schedules(store, ToolRegistry(), None, SagaExecutor(ToolRegistry(), store).submit)
    with caplog.at_level("WARNING", logger="saga_runtime"):
        assert await lacking.submit_due() == []
        assert await lacking.submit_due() == []
    warnings = [record.getMessage() for record in caplog.records if "schedule 'report'" in record.getMessage()]
    assert len(warnings) == 1
    assert "Report" in warnings[0]
    assert "left for another worker" in warnings[0]
    assert await store.list_sagas() == []
    assert (await owner.schedules())[0].next_tick == due.next_tick
    able = Schedules(store, registry, None, owner.submit)
    assert await able.submit_due() == [tick_id("report", due.next_tick)]
