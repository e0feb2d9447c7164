"""Durability through the public API (DESIGN.md invariants 1, 2, 3 and 5), on every store against real databases.

Each test drives `SagaExecutor.run()` or `executor.saga()` and reads what the store holds. Where a test needs a
database shared by two store objects or two processes, the memory store (private to its object) is left out or
shares one object.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from saga_runtime import (
    IdempotencyConflictError,
    RetryPolicy,
    SagaExecutor,
    SagaInProgressError,
    SagaStatus,
    SagaStore,
    StepContext,
    StepStatus,
    ToolRegistry,
    open_store,
)
from saga_runtime._records import SagaRow, StepRow

from .conftest import Stores

PLAN: list[Any] = [
    {"tool": "Effect", "args": {"name": "a"}, "id": "a"},
    [{"tool": "Effect", "args": {"name": "b"}, "id": "b"}, {"tool": "Effect", "args": {"name": "c"}, "id": "c"}],
]
OTHER_PLAN: list[Any] = [{"tool": "Effect", "args": {"name": "z"}, "id": "a"}]
CHAIN: list[Any] = [
    {"tool": "Effect", "args": {"name": "a"}, "id": "a"},
    {"tool": "Effect", "args": {"name": "b"}, "id": "b"},
    {"tool": "Effect", "args": {"name": "c"}, "id": "c"},
]

Hook = Callable[[str, StepContext], Awaitable[None]]
Snapshot = tuple[SagaRow, list[StepRow]]


class Crash(BaseException):
    """Stands for the process dying inside a tool: nothing after it is recorded, no compensation runs."""


class Tools:
    """A registry of test tools that record every call they get."""

    def __init__(self, *, on_execute: Hook | None = None, on_compensate: Hook | None = None) -> None:
        self.calls: list[tuple[str, str, str, int]] = []  # (phase, name, idempotency key, attempt)
        self.registry = ToolRegistry()
        calls = self.calls

        @self.registry.tool
        class Effect:
            async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
                calls.append(("do", name, ctx.idempotency_key, ctx.attempt))
                if on_execute is not None:
                    await on_execute(name, ctx)
                return {"name": name, "key": ctx.idempotency_key}

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                calls.append(("undo", ctx.args["name"], ctx.idempotency_key, ctx.attempt))
                if on_compensate is not None:
                    await on_compensate(ctx.args["name"], ctx)

        @self.registry.tool(retry=RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=False))
        class Flaky:
            async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
                calls.append(("do", name, ctx.idempotency_key, ctx.attempt))
                if on_execute is not None:
                    await on_execute(name, ctx)
                if ctx.attempt == 1:
                    raise ConnectionError("first attempt fails")
                return {"name": name}

        @self.registry.tool
        class Boom:
            async def execute(self, name: str, ctx: StepContext) -> None:
                calls.append(("do", name, ctx.idempotency_key, ctx.attempt))
                raise RuntimeError("boom")

    def count(self, phase: str = "do") -> Counter[str]:
        """Return how often each step name was executed (or compensated)."""
        return Counter(name for kind, name, _, _ in self.calls if kind == phase)


async def second_store(stores: Stores, kind: str, first: SagaStore) -> SagaStore:
    """Return another store object on the database of `first` (the memory store is private: `first` itself)."""
    return first if kind == "memory" else await stores.open(kind)


def reader(stores: Stores, kind: str, store: SagaStore) -> Callable[[str], Awaitable[Snapshot]]:
    """Return a function reading a saga's rows through a store object of its own (memory: the same one)."""

    async def read(saga_id: str) -> Snapshot:
        if kind == "memory":
            loaded = await store.load_saga(saga_id)
        else:
            async with open_store(stores.url(kind)) as own:
                loaded = await own.load_saga(saga_id)
        assert loaded is not None
        return loaded

    return read


def by_id(snapshot: Snapshot) -> dict[str, StepRow]:
    """Return a snapshot's step rows by step id."""
    return {row.step_id: row for row in snapshot[1]}


# -- idempotent saga ids ---------------------------------------------------------------------------------------


async def test_a_finished_saga_id_returns_the_stored_result_and_calls_no_tool(stores: Stores, kind: str) -> None:
    """Running a finished saga's id again, from another executor and store object, returns its result, runs nothing."""
    tools = Tools()
    store = await stores.open(kind, wipe=True)
    first = await SagaExecutor(tools.registry, store=store).run(PLAN, saga_id="order-1")
    assert first.status is SagaStatus.SUCCESS
    calls = list(tools.calls)
    again = await SagaExecutor(tools.registry, store=await second_store(stores, kind, store)).run(
        PLAN, saga_id="order-1"
    )
    assert tools.calls == calls
    assert again == first


async def test_the_same_id_with_another_plan_conflicts(stores: Stores, kind: str) -> None:
    """A saga id reused with another plan raises IdempotencyConflictError and runs nothing, finished or not."""
    tools = Tools()
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(tools.registry, store=store)
    await executor.run(PLAN, saga_id="order-2")
    other = SagaExecutor(tools.registry, store=await second_store(stores, kind, store))
    with pytest.raises(IdempotencyConflictError) as caught:
        await other.run(OTHER_PLAN, saga_id="order-2")
    assert caught.value.saga_id == "order-2"
    assert tools.count()["z"] == 0
    stored = await store.get_saga("order-2")
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS


async def test_two_concurrent_runs_of_one_id_run_each_tool_once(stores: Stores, kind: str) -> None:
    """Two executors (two store objects) running one id at once: each tool runs once, the loser is told in progress."""
    release = asyncio.Event()

    async def wait_for_release(name: str, ctx: StepContext) -> None:
        await release.wait()

    tools = Tools(on_execute=wait_for_release)
    store = await stores.open(kind, wipe=True)
    executors = [
        SagaExecutor(tools.registry, store=store, executor_id="one"),
        SagaExecutor(tools.registry, store=await second_store(stores, kind, store), executor_id="two"),
    ]
    tasks = [asyncio.ensure_future(executor.run(PLAN, saga_id="race")) for executor in executors]
    done, _ = await asyncio.wait(tasks, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    (loser,) = done
    error = loser.exception()
    assert isinstance(error, SagaInProgressError)
    release.set()
    (winner,) = [task for task in tasks if task is not loser]
    result = await asyncio.wait_for(winner, 10)
    assert result.status is SagaStatus.SUCCESS
    assert error.owner == executors[tasks.index(winner)].executor_id
    assert error.lease_expires_at is not None
    assert error.lease_expires_at.tzinfo is not None  # aware: an app answers "retry after" with it
    assert tools.count() == {"a": 1, "b": 1, "c": 1}


RACER = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from saga_runtime import SagaExecutor, SagaInProgressError, StepContext, ToolRegistry, open_store

    url, ledger, ready, go, count = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    PLAN = json.loads(sys.argv[6])
    registry = ToolRegistry()

    @registry.tool
    class Effect:
        async def execute(self, name: str, ctx: StepContext) -> dict:
            with open(ledger, "a") as handle:
                handle.write(f"{os.getpid()} {ctx.saga_id} {name} {ctx.idempotency_key}\\n")
            await asyncio.sleep(0.01)
            return {"name": name, "key": ctx.idempotency_key}

        async def compensate(self, result, ctx: StepContext) -> None:
            with open(ledger, "a") as handle:
                handle.write(f"{os.getpid()} {ctx.saga_id} undo {ctx.idempotency_key}\\n")

    async def one(executor, saga_id):
        try:
            return (await executor.run(PLAN, saga_id=saga_id)).status.value
        except SagaInProgressError:
            return "in-progress"

    async def main():
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store)
            open(ready, "w").close()
            while not os.path.exists(go):
                await asyncio.sleep(0.002)
            outcomes = await asyncio.gather(*(one(executor, f"p-{n}") for n in range(count)))
        print(json.dumps(outcomes))

    asyncio.run(main())
    """
)


async def test_two_processes_running_the_same_sagas_run_each_tool_once(
    stores: Stores, sql_kind: str, tmp_path: Path
) -> None:
    """Two processes started together on one database run the same 12 saga ids: every tool runs exactly once."""
    store = await stores.open(sql_kind, wipe=True)
    script, ledger, go = tmp_path / "racer.py", tmp_path / "ledger.txt", tmp_path / "go"
    script.write_text(RACER)
    count = 12
    args = [str(script), stores.url(sql_kind), str(ledger)]
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            *args,
            str(tmp_path / f"ready{k}"),
            str(go),
            str(count),
            json.dumps(PLAN),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for k in range(2)
    ]
    try:
        deadline = time.monotonic() + 20
        while not all((tmp_path / f"ready{k}").exists() for k in range(2)):
            assert all(proc.returncode is None for proc in procs), "a process died before it was ready"
            assert time.monotonic() < deadline, "the processes did not start"
            await asyncio.sleep(0.01)
        go.touch()  # both processes are connected and waiting: release them at once
        outputs = [await asyncio.wait_for(proc.communicate(), 30) for proc in procs]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
    outcomes = [json.loads(out) for out, _ in outputs]
    for n in range(count):
        # Each id ended SUCCESS where it ran; the other process saw it finished or in progress.
        assert sorted([outcomes[0][n], outcomes[1][n]]) in (["SUCCESS", "SUCCESS"], ["SUCCESS", "in-progress"])
    lines = ledger.read_text().splitlines()
    keys = Counter(line.split()[3] for line in lines)
    assert len(keys) == 3 * count
    assert set(keys.values()) == {1}, "a tool ran twice"
    assert not any(" undo " in line for line in lines)
    for summary in await store.list_sagas(limit=100):
        assert summary.status is SagaStatus.SUCCESS
        assert summary.step_count == 3


async def test_a_live_owner_keeps_its_lease_while_a_step_runs_long(stores: Stores, kind: str) -> None:
    """An executor whose step runs longer than lease_timeout still owns its saga: another run of the id is refused."""
    release = asyncio.Event()

    async def first_attempt_waits(name: str, ctx: StepContext) -> None:
        if ctx.attempt == 1:
            await release.wait()

    tools = Tools(on_execute=first_attempt_waits)
    store = await stores.open(kind, wipe=True)
    owner = SagaExecutor(tools.registry, store=store, executor_id="alive", lease_timeout=0.2)
    running = asyncio.ensure_future(owner.run(CHAIN[:1], saga_id="slow"))
    try:
        await asyncio.sleep(0.5)  # the step is still running, its executor alive: its lease must be too
        other = SagaExecutor(tools.registry, store=await second_store(stores, kind, store), executor_id="other")
        with pytest.raises(SagaInProgressError):
            await other.run(CHAIN[:1], saga_id="slow")
    finally:
        release.set()
        await asyncio.wait_for(running, 10)
    assert tools.count() == {"a": 1}


async def test_a_live_dynamic_saga_keeps_its_lease_between_calls(stores: Stores, kind: str) -> None:
    """A dynamic saga idle longer than lease_timeout between calls (an agent thinking) still belongs to its owner."""
    tools = Tools()
    store = await stores.open(kind, wipe=True)
    owner = SagaExecutor(tools.registry, store=store, executor_id="alive", lease_timeout=0.2)
    other = SagaExecutor(tools.registry, store=await second_store(stores, kind, store), executor_id="other")
    async with owner.saga(saga_id="thinking") as saga:
        await saga.call("Effect", name="a")
        await asyncio.sleep(0.5)
        with pytest.raises(SagaInProgressError):
            await other.saga(saga_id="thinking").__aenter__()
        await saga.call("Effect", name="b")
    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS
    assert tools.count() == {"a": 1, "b": 1}


# -- write-ahead, visible in the database ----------------------------------------------------------------------


async def test_a_running_step_is_committed_before_its_tool_runs(stores: Stores, kind: str) -> None:
    """A tool reading the database through its own store sees its step RUNNING with its attempt and key, and
    every earlier group's outcome already committed."""
    seen: dict[tuple[str, int], Snapshot] = {}
    store = await stores.open(kind, wipe=True)
    read = reader(stores, kind, store)

    async def look(name: str, ctx: StepContext) -> None:
        seen[(name, ctx.attempt)] = await read(ctx.saga_id)

    tools = Tools(on_execute=look)
    plan = [
        {"tool": "Effect", "args": {"name": "a"}, "id": "a"},
        {"tool": "Flaky", "args": {"name": "f"}, "id": "f"},
        {"tool": "Effect", "args": {"name": "b"}, "id": "b"},
    ]
    result = await SagaExecutor(tools.registry, store=store).run(plan, saga_id="wal")
    assert result.status is SagaStatus.SUCCESS
    assert set(seen) == {("a", 1), ("f", 1), ("f", 2), ("b", 1)}
    for (name, attempt), (saga, _) in seen.items():
        row = by_id(seen[(name, attempt)])[name]
        assert saga.status is SagaStatus.RUNNING
        assert (row.status, row.attempts) == (StepStatus.RUNNING, attempt)
        assert row.idempotency_key == result.step(name).idempotency_key
        assert row.started_at is not None
        assert row.finished_at is None
    # Result before progress: the next group starts only once the last one's outcome is durable.
    a_seen_by_f = by_id(seen[("f", 1)])["a"]
    assert (a_seen_by_f.status, a_seen_by_f.result) == (StepStatus.SUCCESS, result.step("a").result)
    assert a_seen_by_f.finished_at is not None
    assert by_id(seen[("b", 1)])["f"].status is StepStatus.SUCCESS
    assert "b" not in by_id(seen[("a", 1)])  # a step's row is first written at its intent


async def test_a_compensation_is_committed_before_it_runs(stores: Stores, kind: str) -> None:
    """A compensation reading the database sees its attempt recorded, the saga COMPENSATING, the step not yet undone."""
    seen: dict[str, Snapshot] = {}
    store = await stores.open(kind, wipe=True)
    read = reader(stores, kind, store)

    async def look(name: str, ctx: StepContext) -> None:
        seen[name] = await read(ctx.saga_id)

    tools = Tools(on_compensate=look)
    plan = [*CHAIN[:2], {"tool": "Boom", "args": {"name": "x"}, "id": "x"}]
    result = await SagaExecutor(tools.registry, store=store).run(plan, saga_id="undo")
    assert result.status is SagaStatus.COMPENSATED
    assert tools.count("undo") == {"a": 1, "b": 1}
    for name in ("a", "b"):
        saga, _ = seen[name]
        row = by_id(seen[name])[name]
        assert saga.status is SagaStatus.COMPENSATING
        assert (row.status, row.compensation_attempts) == (StepStatus.SUCCESS, 1)
        assert by_id(seen[name])["x"].status is StepStatus.FAILED
    # Groups compensate in reverse: b's outcome is durable before a's compensation starts.
    assert by_id(seen["a"])["b"].status is StepStatus.COMPENSATED


async def test_a_reopened_store_sees_everything(stores: Stores, sql_kind: str) -> None:
    """After close(), a new store object on the same database holds every saga, step and outcome as returned."""
    tools = Tools()
    store = await stores.open(sql_kind, wipe=True)
    executor = SagaExecutor(tools.registry, store=store)
    done = await executor.run(PLAN, saga_id="kept-ok")
    undone = await executor.run([*CHAIN[:2], {"tool": "Boom", "args": {"name": "x"}, "id": "x"}], saga_id="kept-no")
    async with executor.saga(saga_id="kept-dyn") as saga:
        await saga.call("Effect", name="d")
    assert saga.result is not None
    exported = await store.export_saga("kept-no")
    await store.close()

    reopened = await stores.open(sql_kind)
    assert await reopened.get_saga("kept-ok") == done
    assert await reopened.get_saga("kept-no") == undone
    assert await reopened.get_saga("kept-dyn") == saga.result
    assert await reopened.export_saga("kept-no") == exported
    assert {s.saga_id: s.status for s in await reopened.list_sagas()} == {
        "kept-ok": SagaStatus.SUCCESS,
        "kept-no": SagaStatus.COMPENSATED,
        "kept-dyn": SagaStatus.SUCCESS,
    }
    calls = list(tools.calls)
    assert await SagaExecutor(tools.registry, store=reopened).run(PLAN, saga_id="kept-ok") == done
    assert tools.calls == calls


async def test_200_concurrent_sagas_all_finish_with_complete_records(stores: Stores, kind: str) -> None:
    """200 sagas run at once on one store all end SUCCESS, every step SUCCESS once, with times and results."""
    tools = Tools()
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(tools.registry, store=store)
    ids = [f"many-{n:03d}" for n in range(200)]
    results = await asyncio.gather(*(executor.run(PLAN, saga_id=saga_id) for saga_id in ids))
    assert all(result.status is SagaStatus.SUCCESS for result in results)
    assert len(tools.calls) == 600
    assert len({key for _, _, key, _ in tools.calls}) == 600
    summaries = await store.list_sagas(limit=500)
    assert sorted(s.saga_id for s in summaries) == ids
    assert all(s.status is SagaStatus.SUCCESS and s.step_count == 3 for s in summaries)
    for saga_id in ids[::20]:
        stored = await store.get_saga(saga_id)
        assert stored is not None
        assert stored.finished_at is not None
        for record in stored.steps:
            assert record.status is StepStatus.SUCCESS
            assert record.attempts == 1
            assert record.started_at is not None
            assert record.finished_at is not None
            assert record.started_at <= record.finished_at
            assert record.result == {"name": record.args["name"], "key": record.idempotency_key}


# -- crashes: a dead owner's saga ------------------------------------------------------------------------------


async def test_an_unfinished_dynamic_saga_reentered_serves_its_recorded_calls(stores: Stores, sql_kind: str) -> None:
    """A dynamic saga whose process died, re-entered by a restarted executor (same id), repeats no recorded call."""
    tools = Tools()
    crashed = await stores.open(sql_kind, wipe=True)

    async def until_the_crash() -> tuple[Any, list[Any]]:
        saga = SagaExecutor(tools.registry, store=crashed, executor_id="host-1").saga(saga_id="agent")
        await saga.__aenter__()
        first = await saga.call("Effect", name="a")
        group = await saga.group([("Effect", {"name": "b"}), ("Effect", {"name": "c"})])
        return first, group  # the process "dies" here: the block is never left

    first, group = await asyncio.create_task(until_the_crash())
    await crashed.close()  # and its connections die with it: nothing more is written

    restarted = await stores.open(sql_kind)
    intruder = SagaExecutor(tools.registry, store=restarted, executor_id="host-2")
    with pytest.raises(SagaInProgressError):
        await intruder.saga(saga_id="agent").__aenter__()  # the lease of host-1 still runs
    executor = SagaExecutor(tools.registry, store=restarted, executor_id="host-1")
    async with executor.saga(saga_id="agent") as again:
        assert await again.call("Effect", name="a") == first
        assert await again.group([("Effect", {"name": "b"}), ("Effect", {"name": "c"})]) == group
        assert tools.count() == {"a": 1, "b": 1, "c": 1}
        await again.call("Effect", name="d")
    assert tools.count() == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert again.result is not None
    assert again.result.status is SagaStatus.SUCCESS
    assert [record.status for record in again.result.steps] == [StepStatus.SUCCESS] * 4


async def test_run_resumes_a_plan_saga_left_running_by_a_dead_executor(stores: Stores, kind: str) -> None:
    """run() of a saga whose owner died mid-step waits out its lease, then resumes: SUCCESS steps never run again,
    the step with an unknown outcome runs again with its idempotency key."""
    crash = True

    async def die_in_b(name: str, ctx: StepContext) -> None:
        if name == "b" and crash:
            raise Crash

    tools = Tools(on_execute=die_in_b)
    store = await stores.open(kind, wipe=True)
    dead = SagaExecutor(tools.registry, store=store, executor_id="dead", lease_timeout=0.3)
    with pytest.raises(Crash):
        await dead.run(CHAIN, saga_id="orphan")
    crash = False
    left = await store.load_saga("orphan")
    assert left is not None
    assert (left[0].status, left[0].owner) == (SagaStatus.RUNNING, "dead")
    assert [row.status for row in left[1]] == [StepStatus.SUCCESS, StepStatus.RUNNING]  # c has no row: never started

    alive = SagaExecutor(tools.registry, store=await second_store(stores, kind, store), executor_id="alive")
    with pytest.raises(SagaInProgressError):
        await alive.run(CHAIN, saga_id="orphan")  # the dead owner's lease has not run out yet
    assert left[0].lease_expires_at is not None
    await asyncio.sleep(max(0.0, (left[0].lease_expires_at - left[0].updated_at).total_seconds()) + 0.05)
    result = await alive.run(CHAIN, saga_id="orphan")
    assert result.status is SagaStatus.SUCCESS
    assert tools.count() == {"a": 1, "b": 2, "c": 1}
    b_keys = [(key, attempt) for _, name, key, attempt in tools.calls if name == "b"]
    assert b_keys == [(result.step("b").idempotency_key, 1), (result.step("b").idempotency_key, 2)]
    assert (result.step("a").attempts, result.step("b").attempts, result.step("c").attempts) == (1, 2, 1)
    assert tools.count("undo") == {}


CRASHER = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from saga_runtime import SagaExecutor, StepContext, ToolRegistry, open_store

    url, ledger, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    registry = ToolRegistry()

    @registry.tool
    class Effect:
        async def execute(self, name: str, ctx: StepContext) -> dict:
            with open(ledger, "a") as handle:
                handle.write(f"do {name} {ctx.idempotency_key} {ctx.attempt}\\n")
            if name == "b":
                os._exit(137)  # killed mid-step: its effect may have happened, its outcome is never recorded
            return {"name": name, "key": ctx.idempotency_key}

        async def compensate(self, result, ctx: StepContext) -> None:
            with open(ledger, "a") as handle:
                handle.write(f"undo {ctx.args['name']} {ctx.idempotency_key} {ctx.attempt}\\n")

    async def main():
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store, executor_id="dead", lease_timeout=0.5)
            await executor.run(plan, saga_id="killed")

    asyncio.run(main())
    """
)


async def test_run_resumes_a_plan_saga_whose_process_was_killed(stores: Stores, sql_kind: str, tmp_path: Path) -> None:
    """A process killed (os._exit) inside step b: once its lease expires, run() in another process resumes the saga,
    never re-running a, re-running b with its original idempotency key."""
    store = await stores.open(sql_kind, wipe=True)
    script, ledger = tmp_path / "crasher.py", tmp_path / "ledger.txt"
    script.write_text(CRASHER)
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(script), stores.url(sql_kind), str(ledger), json.dumps(CHAIN)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 137, proc.stderr

    async def log(name: str, ctx: StepContext) -> None:
        with ledger.open("a") as handle:
            handle.write(f"do {name} {ctx.idempotency_key} {ctx.attempt}\n")

    tools = Tools(on_execute=log)
    left = await store.load_saga("killed")
    assert left is not None
    assert [row.status for row in left[1]] == [StepStatus.SUCCESS, StepStatus.RUNNING]  # c has no row: never started
    assert left[0].lease_expires_at is not None
    executor = SagaExecutor(tools.registry, store=store, executor_id="survivor")
    while True:
        try:
            result = await executor.run(CHAIN, saga_id="killed")
            break
        except SagaInProgressError:
            await asyncio.sleep(0.05)  # the dead process's lease runs out within half a second
    assert result.status is SagaStatus.SUCCESS
    key = result.step("b").idempotency_key
    lines = ledger.read_text().splitlines()
    assert lines == [
        f"do a {result.step('a').idempotency_key} 1",
        f"do b {key} 1",
        f"do b {key} 2",
        f"do c {result.step('c').idempotency_key} 1",
    ]
