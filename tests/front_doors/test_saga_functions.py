"""Saga functions (API.md §18): registered code sagas, run, submitted, and resumed over their record."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from saga_runtime import (
    DynamicSaga,
    IdempotencyConflictError,
    MemoryStore,
    PlanValidationError,
    SagaError,
    SagaEvent,
    SagaExecutor,
    SagaFailedError,
    SagaStatus,
    StepContext,
    StepStatus,
    ToolRegistry,
)
from saga_runtime._records import now


class Ledger:
    """What the tools did and undid, with the idempotency keys they were called with."""

    def __init__(self) -> None:
        self.done: list[tuple[str, str]] = []
        self.undone: list[str] = []
        self.hang_once: set[str] = set()  # items whose first call hangs (a worker stopped during it)
        self.started = asyncio.Event()


def make_registry(ledger: Ledger) -> ToolRegistry:
    """Return a registry of one tool, Book, that records each booking and its cancel."""
    registry = ToolRegistry()

    @registry.tool
    class Book:
        async def execute(self, item: str, ctx: StepContext) -> dict[str, str]:
            if item in ledger.hang_once:
                ledger.hang_once.discard(item)
                ledger.started.set()
                await asyncio.sleep(60)
            ledger.done.append((item, ctx.idempotency_key))
            return {"item": item, "ref": f"R-{item}"}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            ledger.undone.append(ctx.args["item"])

    return registry


def add_trip(registry: ToolRegistry, *, version: str = "1", compatible: tuple[str, ...] = ()) -> None:
    """Register the saga function `trip`: three bookings, the last one a group of two."""

    @registry.saga(version=version, compatible=compatible)
    async def trip(saga: DynamicSaga, city: str, nights: int = 1, fail: bool = False) -> dict[str, Any]:
        hotel = await saga.call("Book", item=f"hotel-{city}")
        await saga.call("Book", item=f"flight-{city}")
        await saga.group([("Book", {"item": "car"}), ("Book", {"item": "museum"})])
        if fail:
            raise RuntimeError("changed my mind")
        return {"hotel": hotel["ref"], "nights": nights}


@pytest.fixture
def ledger() -> Ledger:
    """Return a fresh ledger."""
    return Ledger()


@pytest.fixture
def registry(ledger: Ledger) -> ToolRegistry:
    """Return the registry with Book and the `trip` saga function."""
    registry = make_registry(ledger)
    add_trip(registry)
    return registry


def trip_of(registry: ToolRegistry) -> Any:
    """Return the registered `trip` function."""
    function = registry.function("trip")
    assert function is not None
    return function.fn


async def test_a_saga_function_runs_and_its_return_value_is_the_output(registry: ToolRegistry, ledger: Ledger) -> None:
    """run(fn, args=) runs the calls as steps and returns SUCCESS with the function's return value as output."""
    executor = SagaExecutor(registry)
    result = await executor.run(trip_of(registry), args={"city": "Seoul", "nights": 3}, saga_id="t1")
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"hotel": "R-hotel-Seoul", "nights": 3}
    assert result.function == "trip"
    assert result.kind == "dynamic"
    assert [step.tool_name for step in result.steps] == ["Book"] * 4
    assert [item for item, _ in ledger.done][:2] == ["hotel-Seoul", "flight-Seoul"]
    stored = await executor.store.get_saga("t1")
    assert stored is not None
    assert stored.output == result.output
    assert await executor.store.verify_saga("t1")


async def test_a_saga_function_is_run_by_name_too(registry: ToolRegistry) -> None:
    """run("trip", args=) runs the function registered under that name."""
    result = await SagaExecutor(registry).run("trip", args={"city": "Busan"})
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"hotel": "R-hotel-Busan", "nights": 1}


async def test_bad_arguments_list_every_problem_and_store_nothing(registry: ToolRegistry, ledger: Ledger) -> None:
    """Missing, mistyped and unknown arguments are refused together with PlanValidationError; nothing is stored."""
    executor = SagaExecutor(registry)
    with pytest.raises(PlanValidationError) as caught:
        await executor.run("trip", args={"nights": "many", "colour": "red"}, saga_id="bad")
    text = "\n".join(caught.value.problems)
    assert "city" in text
    assert "nights" in text
    assert "colour" in text
    assert len(caught.value.problems) == 3
    assert await executor.store.get_saga("bad") is None
    assert ledger.done == []


async def test_a_non_json_argument_is_refused_naming_it(registry: ToolRegistry) -> None:
    """An argument that is not a JSON value is refused before anything is stored."""
    executor = SagaExecutor(registry)
    with pytest.raises(PlanValidationError, match="trip"):
        await executor.run("trip", args={"city": object()}, saga_id="odd")
    assert await executor.store.get_saga("odd") is None


async def test_an_unregistered_function_and_args_with_a_plan_are_refused(registry: ToolRegistry) -> None:
    """An unregistered function raises PlanValidationError; args= with a plan raises TypeError; nothing stored."""
    executor = SagaExecutor(registry)

    async def stray(saga: DynamicSaga) -> None:
        return None

    with pytest.raises(PlanValidationError, match="not a saga function"):
        await executor.run(stray, saga_id="stray")
    with pytest.raises(PlanValidationError, match="not a saga function"):
        await executor.submit("nobody", saga_id="nobody")
    with pytest.raises(TypeError, match="args="):
        await executor.run([{"tool": "Book", "args": {"item": "x"}}], args={"item": "x"}, saga_id="plan")
    assert await executor.store.list_sagas() == []


def test_a_name_taken_by_a_tool_or_a_saga_function_is_refused() -> None:
    """Registering a saga function under a tool's or another function's name, or a tool under a function's, fails."""
    registry = make_registry(Ledger())
    add_trip(registry)
    with pytest.raises(ValueError, match="already registered"):
        add_trip(registry)

    async def book(saga: DynamicSaga) -> None:
        return None

    with pytest.raises(ValueError, match="tool"):
        registry.saga(name="Book")(book)

    class trip:
        def execute(self) -> None:
            return None

    with pytest.raises(ValueError, match="saga function"):
        registry.register(trip())


def test_only_an_async_function_taking_the_saga_is_a_saga_function() -> None:
    """A sync function, or one without a parameter for the saga, is refused with TypeError."""
    registry = ToolRegistry()

    def sync(saga: DynamicSaga) -> None:
        return None

    async def nothing() -> None:
        return None

    with pytest.raises(TypeError, match="async def"):
        registry.saga(sync)
    with pytest.raises(TypeError, match="first parameter"):
        registry.saga(nothing)


async def test_an_exception_compensates_every_call_in_reverse(registry: ToolRegistry, ledger: Ledger) -> None:
    """An exception leaving the function undoes every call, last first; run() returns COMPENSATED, not raising."""
    executor = SagaExecutor(registry)
    result = await executor.run("trip", args={"city": "Jeju", "fail": True}, saga_id="t2")
    assert result.status is SagaStatus.COMPENSATED
    assert "changed my mind" in (result.error or "")
    assert sorted(ledger.undone[:2]) == ["car", "museum"]
    assert ledger.undone[2:] == ["flight-Jeju", "hotel-Jeju"]
    assert result.output is None
    with pytest.raises(SagaFailedError):
        result.raise_for_status()


async def test_a_return_value_that_is_not_json_fails_and_compensates(ledger: Ledger) -> None:
    """A return value that cannot be stored as JSON fails the saga, which compensates its calls."""
    registry = make_registry(ledger)

    @registry.saga
    async def odd(saga: DynamicSaga) -> Any:
        await saga.call("Book", item="a")
        return {"when": object()}

    result = await SagaExecutor(registry).run(odd, saga_id="odd")
    assert result.status is SagaStatus.COMPENSATED
    assert "ResultNotStorableError" in (result.error or "")
    assert ledger.undone == ["a"]


async def test_a_refused_call_is_named_by_its_place_in_the_saga(ledger: Ledger) -> None:
    """A call refused for its arguments is named by its place in the saga (the third call: call #3), not its group."""
    registry = make_registry(ledger)

    @registry.saga
    async def refused(saga: DynamicSaga) -> None:
        await saga.call("Book", item="a")
        await saga.call("Book", item="b")
        await saga.call("Book", colour="red")

    result = await SagaExecutor(registry).run(refused, saga_id="refused")
    assert result.status is SagaStatus.COMPENSATED
    assert "call #3 ('Book')" in (result.error or "")
    assert "call #1" not in (result.error or "")
    assert sorted(ledger.undone) == ["a", "b"]


async def test_the_saga_id_is_the_idempotency_key(registry: ToolRegistry, ledger: Ledger) -> None:
    """The same id and arguments return the stored saga, calling no tool; other arguments raise a conflict."""
    executor = SagaExecutor(registry)
    first = await executor.run("trip", args={"city": "Seoul"}, saga_id="same")
    calls = len(ledger.done)
    again = await executor.run("trip", args={"city": "Seoul"}, saga_id="same")
    assert again.status is SagaStatus.SUCCESS
    assert again.output == first.output
    assert len(ledger.done) == calls
    with pytest.raises(IdempotencyConflictError):
        await executor.run("trip", args={"city": "Busan"}, saga_id="same")
    with pytest.raises(IdempotencyConflictError):
        await executor.run([{"tool": "Book", "args": {"item": "x"}}], saga_id="same")


async def test_a_submitted_saga_function_is_run_by_a_worker(registry: ToolRegistry) -> None:
    """submit(fn, args=) stores it QUEUED; a serving worker runs it to SUCCESS with its output."""
    executor = SagaExecutor(registry)
    handle = await executor.submit(trip_of(registry), args={"city": "Daegu"}, saga_id="queued", queue="trips")
    assert (await handle.status()) is SagaStatus.QUEUED
    worker = asyncio.create_task(executor.serve(queues=["trips"], interval=0.02))
    try:
        result = await handle.result(timeout=10)
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"hotel": "R-hotel-Daegu", "nights": 1}


async def stop_worker_mid_call(executor: SagaExecutor, ledger: Ledger, saga_id: str, **args: Any) -> None:
    """Submit `trip`, let a worker start it, and stop that worker while its flight call hangs."""
    ledger.hang_once.add(f"flight-{args['city']}")
    await executor.submit("trip", args=args, saga_id=saga_id)
    worker = asyncio.create_task(executor.serve(interval=0.02))
    await asyncio.wait_for(ledger.started.wait(), 10)
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker


async def test_an_orphaned_saga_function_is_resumed_not_compensated(registry: ToolRegistry, ledger: Ledger) -> None:
    """Recovery re-runs the function: the recorded call is served, the unknown one runs again under its key."""
    store = MemoryStore()
    events: list[SagaEvent] = []
    first = SagaExecutor(registry, store, compensation_timeout=0.2, lease_timeout=60)
    await stop_worker_mid_call(first, ledger, "resumed", city="Seoul")
    assert [item for item, _ in ledger.done] == ["hotel-Seoul"]
    stored = await store.load_saga("resumed")
    assert stored is not None
    assert [row.status for row in stored[1]] == [StepStatus.SUCCESS, StepStatus.RUNNING]
    flight_key = stored[1][1].idempotency_key

    second = SagaExecutor(registry, store, hooks=[events.append])
    (result,) = await second.recover()
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"hotel": "R-hotel-Seoul", "nights": 1}
    done = [item for item, _ in ledger.done]
    assert done.count("hotel-Seoul") == 1  # served from the record
    assert ("flight-Seoul", flight_key) in ledger.done  # run again under its own key
    assert ledger.undone == []
    assert "saga_resumed" in [event.kind for event in events]
    assert await store.verify_saga("resumed")


async def test_a_resumed_function_that_calls_otherwise_fails_and_compensates(ledger: Ledger) -> None:
    """Code that makes another call at a recorded position records ReplayDivergenceError, calls nothing more,
    and compensates what was done."""
    store = MemoryStore()
    before = make_registry(ledger)
    add_trip(before)
    await stop_worker_mid_call(SagaExecutor(before, store, compensation_timeout=0.2), ledger, "diverged", city="Rome")

    after = make_registry(ledger)

    @after.saga(name="trip")
    async def changed(saga: DynamicSaga, city: str, nights: int = 1, fail: bool = False) -> None:
        await saga.call("Book", item=f"hostel-{city}")  # the record holds hotel-<city> here
        await saga.call("Book", item="never")

    (result,) = await SagaExecutor(after, store).recover()
    assert result.status is SagaStatus.COMPENSATED
    assert "ReplayDivergenceError" in (result.error or "")
    done = [item for item, _ in ledger.done]
    assert "hostel-Rome" not in done
    assert "never" not in done
    assert "hotel-Rome" in ledger.undone


async def test_a_function_returning_before_its_recorded_calls_diverges(ledger: Ledger) -> None:
    """A resumed function that returns without making a call its record holds fails with ReplayDivergenceError."""
    store = MemoryStore()
    before = make_registry(ledger)
    add_trip(before)
    await stop_worker_mid_call(SagaExecutor(before, store, compensation_timeout=0.2), ledger, "short", city="Oslo")

    after = make_registry(ledger)

    @after.saga(name="trip")
    async def shorter(saga: DynamicSaga, city: str, nights: int = 1, fail: bool = False) -> None:
        await saga.call("Book", item=f"hotel-{city}")

    (result,) = await SagaExecutor(after, store).recover()
    assert result.status is SagaStatus.COMPENSATED
    assert "ReplayDivergenceError" in (result.error or "")


async def test_an_executor_without_the_function_leaves_it(ledger: Ledger, caplog: pytest.LogCaptureFixture) -> None:
    """A worker lacking the function (or its version) leaves the saga as it is, logged once, never parked."""
    store = MemoryStore()
    registry = make_registry(ledger)
    add_trip(registry)
    await stop_worker_mid_call(SagaExecutor(registry, store, compensation_timeout=0.2), ledger, "left", city="Nice")
    without = SagaExecutor(make_registry(ledger), store, max_recovery_attempts=1)
    newer = make_registry(ledger)
    add_trip(newer, version="2")
    with caplog.at_level(logging.WARNING, logger="saga_runtime"):
        for executor in (without, without, SagaExecutor(newer, store, max_recovery_attempts=1)):
            assert await executor.recover() == []
    stored = await store.get_saga("left")
    assert stored is not None
    assert stored.status is SagaStatus.RUNNING
    assert sum("saga function trip" in record.getMessage() for record in caplog.records) == 2  # once per worker
    compatible = make_registry(ledger)
    add_trip(compatible, version="2", compatible=("1",))
    (result,) = await SagaExecutor(compatible, store).recover()
    assert result.status is SagaStatus.SUCCESS


async def test_a_restarted_executor_takes_its_saga_functions_back(registry: ToolRegistry, ledger: Ledger) -> None:
    """An executor entered with the id that owned a live saga function resumes it at once, lease not waited for."""
    store = MemoryStore()
    await stop_worker_mid_call(SagaExecutor(registry, store, compensation_timeout=0.2), ledger, "back", city="Lyon")
    # As a process of id host-1 leaves it when killed: owned, its lease still running.
    assert await store.claim_saga("back", "host-1", now() + timedelta(minutes=5), now())
    async with SagaExecutor(registry, store, executor_id="host-1", lease_timeout=300) as executor:
        result = await executor.handle("back").result(timeout=10)
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"hotel": "R-hotel-Lyon", "nights": 1}
    assert [item for item, _ in ledger.done].count("hotel-Lyon") == 1


async def test_a_call_waiting_for_approval_resumes_the_function_once_decided(ledger: Ledger) -> None:
    """A call needing approval makes the saga WAITING; approve() re-runs the function over its record to the end."""
    registry = make_registry(ledger)

    @registry.tool(approval=True)
    class Refund:
        async def execute(self, cents: int) -> dict[str, int]:
            ledger.done.append(("refund", str(cents)))
            return {"refunded": cents}

    @registry.saga
    async def refund(saga: DynamicSaga, cents: int) -> int:
        await saga.call("Book", item="ticket")
        paid = await saga.call("Refund", cents=cents)
        return int(paid["refunded"])

    executor = SagaExecutor(registry)
    waiting = await executor.run(refund, args={"cents": 500}, saga_id="r1")
    assert waiting.status is SagaStatus.WAITING
    (request,) = waiting.pending_approvals
    result = await executor.approve("r1", request.step_id, by="ana")
    assert result.status is SagaStatus.SUCCESS
    assert result.output == 500
    assert [item for item, _ in ledger.done] == ["ticket", "refund"]


def add_napper(registry: ToolRegistry, nap: float) -> None:
    """Register `napper`: a booking, a sleep of `nap` seconds, another booking."""

    @registry.saga
    async def napper(saga: DynamicSaga) -> str:
        await saga.call("Book", item="before")
        await saga.sleep(nap)
        await saga.call("Book", item="after")
        return "rested"


async def test_a_short_sleep_waits_in_the_process(ledger: Ledger) -> None:
    """A sleep under `wait_threshold` waits in the process and the saga goes on to SUCCESS."""
    registry = make_registry(ledger)
    add_napper(registry, 0.01)
    result = await SagaExecutor(registry, wait_threshold=5).run("napper", saga_id="nap-1")
    assert result.status is SagaStatus.SUCCESS
    assert result.output == "rested"
    assert [item for item, _ in ledger.done] == ["before", "after"]


async def test_a_long_sleep_releases_the_saga_and_serve_resumes_it_when_due(ledger: Ledger) -> None:
    """A sleep over `wait_threshold` leaves the saga WAITING without lease; serve() resumes it once due."""
    registry = make_registry(ledger)
    add_napper(registry, 0.4)
    store = MemoryStore()
    executor = SagaExecutor(registry, store, wait_threshold=0.05)
    waiting = await executor.run("napper", saga_id="nap-2")
    assert waiting.status is SagaStatus.WAITING
    saga, _ = await store.load_saga("nap-2") or (None, None)
    assert saga is not None
    assert (saga.owner, saga.lease_expires_at) == (None, None)
    assert await SagaExecutor(registry, store).recover() == []  # not due yet: left as it is
    assert (await store.get_saga("nap-2")).status is SagaStatus.WAITING  # type: ignore[union-attr]
    worker = asyncio.create_task(SagaExecutor(registry, store).serve(interval=0.05))
    try:
        result = await executor.handle("nap-2").result(timeout=10)
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
    assert result.status is SagaStatus.SUCCESS
    assert result.output == "rested"
    assert [item for item, _ in ledger.done] == ["before", "after"]  # the first call served from the record


async def test_a_dynamic_saga_sleeps_in_the_process_whatever_the_length(ledger: Ledger) -> None:
    """In executor.saga() no code is registered to resume it: a long sleep stays in the process, RUNNING."""
    executor = SagaExecutor(make_registry(ledger), wait_threshold=0)
    async with executor.saga(saga_id="plain") as saga:
        await saga.call("Book", item="x")
        await saga.sleep(0.05)
        stored = await executor.store.get_saga("plain")
        assert stored is not None
        assert stored.status is SagaStatus.RUNNING
        await saga.call("Book", item="y")
    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), "5", True])
async def test_a_bad_sleep_is_refused(ledger: Ledger, seconds: Any) -> None:
    """A negative, infinite, NaN or non-number sleep raises ValueError."""
    executor = SagaExecutor(make_registry(ledger))
    with pytest.raises(ValueError, match="sleep"):
        async with executor.saga(saga_id="bad-sleep") as saga:
            await saga.sleep(seconds)


def test_wait_threshold_must_be_a_non_negative_number(registry: ToolRegistry) -> None:
    """A negative or non-number wait_threshold is refused when the executor is made."""
    for bad in (-1, "5", float("nan")):
        with pytest.raises(ValueError, match="wait_threshold"):
            SagaExecutor(registry, wait_threshold=bad)


def add_waiter(registry: ToolRegistry, timeout: float | None) -> None:
    """Register `waiter`: a booking, then a recv on "reply" (with `timeout`), then a booking of what came."""

    @registry.saga
    async def waiter(saga: DynamicSaga) -> Any:
        await saga.call("Book", item="first")
        reply = await saga.recv("reply", timeout=timeout)
        if reply is None:
            return "no reply"
        await saga.call("Book", item=f"got-{reply['n']}")
        return reply


async def test_a_message_sent_before_the_recv_is_received_once(ledger: Ledger) -> None:
    """send() before the saga waits keeps the message; recv takes the oldest, each message once, in order."""
    registry = make_registry(ledger)

    @registry.saga
    async def twice(saga: DynamicSaga) -> list[Any]:
        return [await saga.recv("reply", timeout=1), await saga.recv("reply", timeout=1)]

    executor = SagaExecutor(registry)
    await executor.submit(twice, saga_id="two")
    await executor.send("two", "reply", {"n": 1})
    await executor.send("two", "reply", {"n": 2}, idempotency_key="k2")
    await executor.send("two", "reply", {"n": 2}, idempotency_key="k2")  # a used key: stored nothing
    await executor.send("two", "other", {"n": 3})
    worker = asyncio.create_task(executor.serve(interval=0.02))
    try:
        result = await executor.handle("two").result(timeout=10)
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
    assert result.output == [{"n": 1}, {"n": 2}]


async def test_a_recv_times_out_with_none(ledger: Ledger) -> None:
    """A recv with no message before its timeout returns None (recorded), and the code goes on."""
    registry = make_registry(ledger)
    add_waiter(registry, 0.05)
    result = await SagaExecutor(registry).run("waiter", saga_id="w-1")
    assert result.status is SagaStatus.SUCCESS
    assert result.output == "no reply"


async def test_a_long_recv_releases_the_saga_and_a_message_resumes_it(ledger: Ledger) -> None:
    """A recv longer than wait_threshold leaves the saga WAITING; a message sent wakes it under serve()."""
    registry = make_registry(ledger)
    add_waiter(registry, None)
    store = MemoryStore()
    events: list[SagaEvent] = []
    executor = SagaExecutor(registry, store, wait_threshold=0.05, hooks=[events.append])
    waiting = await executor.run("waiter", saga_id="w-2")
    assert waiting.status is SagaStatus.WAITING
    assert await executor.recover() == []  # no message: nothing to go on with
    worker = asyncio.create_task(executor.serve(interval=0.02))
    try:
        await executor.send("w-2", "reply", {"n": 7})
        result = await executor.handle("w-2").result(timeout=10)
    finally:
        worker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await worker
    assert result.status is SagaStatus.SUCCESS
    assert result.output == {"n": 7}
    assert [item for item, _ in ledger.done] == ["first", "got-7"]
    assert [event.topic for event in events if event.kind == "message_received"] == ["reply"]


async def test_send_to_an_unknown_or_finished_saga_is_refused(registry: ToolRegistry) -> None:
    """send() to an unknown or a terminal saga raises SagaError; a non-JSON message names its path; nothing stored."""
    executor = SagaExecutor(registry)
    with pytest.raises(SagaError, match="no saga"):
        await executor.send("nobody", "reply", 1)
    await executor.run("trip", args={"city": "Seoul"}, saga_id="done")
    with pytest.raises(SagaError, match="SUCCESS"):
        await executor.send("done", "reply", 1)
    await executor.submit("trip", args={"city": "Rome"}, saga_id="queued")
    with pytest.raises(TypeError, match=r"message\['items'\]\[1\]"):
        await executor.send("queued", "reply", {"items": [1, object()]})
    assert await executor.store.load_messages("queued") == []
    assert await executor.store.load_messages("done") == []


@pytest.mark.parametrize("bad", [-1, float("nan"), "5"])
async def test_a_bad_recv_timeout_is_refused(ledger: Ledger, bad: Any) -> None:
    """A negative, NaN or non-number recv timeout raises ValueError."""
    executor = SagaExecutor(make_registry(ledger))
    with pytest.raises(ValueError, match="timeout"):
        async with executor.saga(saga_id="bad-recv") as saga:
            await saga.recv("reply", timeout=bad)


async def test_a_saga_function_s_id_cannot_be_entered_as_a_dynamic_saga(registry: ToolRegistry) -> None:
    """executor.saga() with the id of a saga function's saga raises IdempotencyConflictError, driving nothing."""
    executor = SagaExecutor(registry)
    await executor.run("trip", args={"city": "Seoul"}, saga_id="fn-id")
    with pytest.raises(IdempotencyConflictError, match="saga function"):
        async with executor.saga(saga_id="fn-id"):
            pass


async def test_events_and_streams_are_read_while_the_saga_runs(ledger: Ledger) -> None:
    """set_event's latest value and a stream's values, in order, each once, are read while the saga runs and after."""
    registry = make_registry(ledger)
    go_on = asyncio.Event()

    @registry.saga
    async def progress(saga: DynamicSaga) -> str:
        await saga.set_event("status", "booking")
        for item in ("a", "b"):
            await saga.call("Book", item=item)
            await saga.write_stream("booked", {"item": item})
        await go_on.wait()  # a caller reads meanwhile
        await saga.write_stream("booked", {"item": "c"})
        await saga.close_stream("booked")
        await saga.set_event("status", "done")
        return "ok"

    executor = SagaExecutor(registry)
    running = asyncio.create_task(executor.run(progress, saga_id="p-1"))
    assert await executor.get_event("p-1", "status", timeout=10) == "booking"
    read: list[Any] = []

    async def reader() -> None:
        async for value in executor.read_stream("p-1", "booked"):
            read.append(value)
            if len(read) == 2:
                go_on.set()

    await asyncio.wait_for(reader(), 10)
    result = await running
    assert result.status is SagaStatus.SUCCESS
    assert read == [{"item": "a"}, {"item": "b"}, {"item": "c"}]
    assert [value async for value in executor.read_stream("p-1", "booked", start=2)] == [{"item": "c"}]
    assert await executor.get_event("p-1", "status") == "done"
    assert await executor.get_event("p-1", "missing", timeout=0.05) is None
    assert await executor.store.verify_saga("p-1")


async def test_a_resumed_saga_function_publishes_each_event_once(ledger: Ledger) -> None:
    """Events and stream values recorded before a crash are not written again when the function is resumed."""
    store = MemoryStore()
    registry = make_registry(ledger)

    @registry.saga
    async def tells(saga: DynamicSaga, city: str) -> int:
        await saga.write_stream("log", "start")
        await saga.call("Book", item=f"hotel-{city}")
        await saga.call("Book", item=f"flight-{city}")
        await saga.write_stream("log", "end")
        return 1

    ledger.hang_once.add("flight-Pisa")
    first = SagaExecutor(registry, store, compensation_timeout=0.2)
    await first.submit("tells", args={"city": "Pisa"}, saga_id="tells")
    worker = asyncio.create_task(first.serve(interval=0.02))
    await asyncio.wait_for(ledger.started.wait(), 10)
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    (result,) = await SagaExecutor(registry, store).recover()
    assert result.status is SagaStatus.SUCCESS
    assert [value async for value in first.read_stream("tells", "log")] == ["start", "end"]


async def test_a_non_json_event_value_is_refused_naming_its_path(ledger: Ledger) -> None:
    """set_event with a value that is not JSON raises TypeError naming the part that is not; nothing recorded."""
    executor = SagaExecutor(make_registry(ledger))
    with pytest.raises(TypeError, match=r"value\['when'\]"):
        async with executor.saga(saga_id="ev") as saga:
            await saga.set_event("status", {"when": object()})
    assert await executor.get_event("ev", "status") is None


async def test_a_decision_recorded_without_resuming_is_gone_on_with_by_recovery(ledger: Ledger) -> None:
    """approve(resume=False) only records the decision; the next recover() resumes the saga function to its end."""
    registry = make_registry(ledger)

    @registry.tool(approval=True)
    class Payout:
        async def execute(self, cents: int) -> int:
            return cents

    @registry.saga
    async def pays(saga: DynamicSaga) -> int:
        await saga.call("Book", item="claim")
        return int(await saga.call("Payout", cents=70))

    executor = SagaExecutor(registry)
    waiting = await executor.run(pays, saga_id="pays")
    (request,) = waiting.pending_approvals
    decided = await executor.approve("pays", request.step_id, by="ana", resume=False)
    assert decided.status is SagaStatus.WAITING
    (result,) = await executor.recover()
    assert result.status is SagaStatus.SUCCESS
    assert result.output == 70
    assert [item for item, _ in ledger.done] == ["claim"]


def test_a_saga_function_argument_pydantic_cannot_check_is_refused_at_registration() -> None:
    """An argument annotated with a type pydantic cannot validate is refused with TypeError naming the function."""
    registry = ToolRegistry()

    class Connection:  # not a JSON value
        pass

    async def uses(saga: DynamicSaga, conn: Connection) -> None:
        return None

    with pytest.raises(TypeError, match="uses"):
        registry.saga(uses)
    assert registry.function("uses") is None


async def test_running_a_stopped_workers_saga_id_again_resumes_it_and_logs_who_left_it(
    registry: ToolRegistry, ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    """run() of a stopped worker's saga id resumes it, and the log says who left it (not the executor resuming it)."""
    store = MemoryStore()
    first = SagaExecutor(registry, store, compensation_timeout=0.2, lease_timeout=0.2, executor_id="left-worker")
    await stop_worker_mid_call(first, ledger, "again", city="Oslo")
    await asyncio.sleep(0.4)  # its lease runs out
    second = SagaExecutor(registry, store, executor_id="new-worker")
    with caplog.at_level(logging.INFO, logger="saga_runtime"):
        result = await second.run("trip", args={"city": "Oslo"}, saga_id="again")
    assert result.status is SagaStatus.SUCCESS
    resumed = [record.getMessage() for record in caplog.records if "resuming where" in record.getMessage()]
    assert resumed == ["saga again: resuming where its last owner, who released it, left it"]
