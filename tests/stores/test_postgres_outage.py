"""An outage longer than the lease (issue 15): PostgreSQL stopped under 50 running sagas for twice the lease.

The server is a private one (tests/stores/private_postgres.py): stopping the machine's shared server would break
every other test using it. Two workers share the database, as two processes would: worker A runs the 50 sagas
(`run()`, one task each) and both run `serve()`, the library's own recovery. Nobody else touches the sagas.

The tools note every call that had an effect, with the worker, the idempotency key and when it ran. Once every
saga has ended, the notes and the records must agree:

- every saga is terminal: SUCCESS, or COMPENSATED for the ones whose plan holds a step that fails by design;
- no doubled effect, except a step run again because its outcome was unknown: its earlier effect ended while the
  server was down (or just before it went, its record on the way), and every run used the step's idempotency key;
  a step's effects never outnumber its recorded attempts;
- no compensation lost: in a COMPENSATED saga every step that had an effect is compensated after its last effect,
  once (again, more only for an outcome unknown); a SUCCESS saga compensates nothing;
- a caller that got an error got a StoreError or a LeaseLostError whose message says what happened, and "taken
  over by another executor" only when worker B really took that saga.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from saga_runtime import SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store
from saga_runtime._exceptions import LeaseLostError, StoreError
from saga_runtime._storage import SagaStore

from .private_postgres import PrivatePostgres, private_postgres_or_skip

pytestmark = pytest.mark.slow

SAGAS = 50
STEPS = 10
LEASE = 2.0
OUTAGE = 2 * LEASE
STOP_AFTER = 0.3  # the server stops once this share of all steps has run
RETRY_FOR = 30.0  # the store's retries of a lost connection span the outage many times over
# An effect that ended this long before the server stopped may still have had its record on the way (a write
# batched, or waiting for a pooled connection) when the server went: its outcome was unknown too.
IN_FLIGHT = 1.0
SETTLE = 25.0  # seconds, after the restart, for every caller to return and every saga to end


@dataclass(frozen=True)
class Call:
    """One tool call that had an effect."""

    phase: str  # "execute" or "compensate"
    worker: str
    saga_id: str
    step_id: str
    key: str
    started: float
    ended: float


@dataclass
class World:
    """What the tools did, and what the test did to the server, on one monotonic clock."""

    calls: list[Call] = field(default_factory=list)
    taken_by_b: set[str] = field(default_factory=set)  # sagas worker B started driving (its recoveries)
    stopped_at: float = 0.0
    back_at: float = 0.0

    def executed(self) -> int:
        """Return how many executions had an effect so far."""
        return sum(1 for call in self.calls if call.phase == "execute")


def fails_at(index: int) -> int | None:
    """Return the step at which saga `index` fails by design (every fifth saga, at steps 0..9 in turn), or None."""
    return (index // 5) % STEPS if index % 5 == 0 else None


def plan_of(index: int) -> list[dict[str, Any]]:
    """Return saga `index`'s plan: ten steps, one after the other."""
    failing = fails_at(index)
    return [{"id": f"s{n}", "tool": "Step", "args": {"n": n, "fail": n == failing}} for n in range(STEPS)]


def registry_of(worker: str, world: World) -> ToolRegistry:
    """Return a registry whose tool notes every call with an effect in `world`, as done by `worker`."""
    registry = ToolRegistry()

    @registry.tool
    class Step:
        async def execute(self, n: int, fail: bool, ctx: StepContext) -> dict[str, int]:
            started = time.monotonic()
            await asyncio.sleep(random.uniform(0.02, 0.1))
            if fail:
                raise LookupError(f"step {n} refuses by design")
            world.calls.append(
                Call("execute", worker, ctx.saga_id, ctx.step_id, ctx.idempotency_key, started, time.monotonic())
            )
            return {"n": n}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            started = time.monotonic()
            await asyncio.sleep(random.uniform(0.02, 0.06))
            world.calls.append(
                Call("compensate", worker, ctx.saga_id, ctx.step_id, ctx.idempotency_key, started, time.monotonic())
            )

    return registry


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[PrivatePostgres]:
    """Return a PostgreSQL server of this module's own, removed at the end (skip, or fail under CI, without one)."""
    with private_postgres_or_skip() as server:
        yield server


async def fresh_database(server: PrivatePostgres, name: str) -> str:
    """Create an empty database on the private server; return its URL."""
    conn = await asyncpg.connect(server.url, timeout=10)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name}")
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    return server.url.rsplit("/", 1)[0] + f"/{name}"


async def wait_until_all_terminal(store: SagaStore, saga_ids: list[str], seconds: float) -> dict[str, SagaStatus]:
    """Poll the store until every saga is terminal or `seconds` pass; return their statuses."""
    deadline = time.monotonic() + seconds
    while True:
        statuses = {}
        for saga_id in saga_ids:
            loaded = await store.load_saga(saga_id)
            assert loaded is not None, f"saga {saga_id} is not in the store"
            statuses[saga_id] = loaded[0].status
        if all(status.is_terminal for status in statuses.values()) or time.monotonic() > deadline:
            return statuses
        await asyncio.sleep(0.2)


def unknown_when_repeated(world: World, calls: list[Call]) -> bool:
    """Tell whether every call but the last of one step's phase ended while its outcome could not be recorded."""
    earlier = sorted(calls, key=lambda call: call.ended)[:-1]
    return all(world.stopped_at - IN_FLIGHT <= call.ended <= world.back_at for call in earlier)


@pytest.mark.parametrize("mode", ["fast", "immediate"], ids=["clean-stop", "crash"])
async def test_an_outage_of_twice_the_lease_ends_every_saga_without_doubled_effects_or_lost_compensations(
    private_postgres: PrivatePostgres, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL stopped for 2x the lease under 50 sagas: all end, no effect doubled unless unknown, none unundone."""
    caplog.set_level(logging.WARNING, logger="saga_runtime")
    url = await fresh_database(private_postgres, f"outage_{mode}")
    world = World()
    began = time.monotonic()
    store_a = await open_store(url, retry_for=RETRY_FOR)
    store_b = await open_store(url, retry_for=RETRY_FOR)
    a = SagaExecutor(registry_of("A", world), store_a, executor_id="worker-a", lease_timeout=LEASE)

    def note_b(event: Any) -> None:
        if event.kind == "saga_started":
            world.taken_by_b.add(event.saga_id)

    b = SagaExecutor(registry_of("B", world), store_b, executor_id="worker-b", lease_timeout=LEASE, hooks=[note_b])
    saga_ids = [f"saga-{index:02d}" for index in range(SAGAS)]
    serving = [asyncio.create_task(a.serve()), asyncio.create_task(b.serve())]
    runs = [asyncio.create_task(a.run(plan_of(i), saga_id=saga_id)) for i, saga_id in enumerate(saga_ids)]
    try:
        while world.executed() < STOP_AFTER * SAGAS * STEPS:
            assert time.monotonic() - began < 20, f"only {world.executed()} steps ran before the outage"
            await asyncio.sleep(0.005)
        world.stopped_at = time.monotonic()
        await asyncio.to_thread(private_postgres.stop, mode)
        ran_before = world.executed()
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(private_postgres.start)
        world.back_at = time.monotonic()
        await asyncio.wait(runs, timeout=SETTLE)
        statuses = await wait_until_all_terminal(store_a, saga_ids, SETTLE - (time.monotonic() - world.back_at))
        stored = {saga_id: await store_a.load_saga(saga_id) for saga_id in saga_ids}
    finally:
        for task in [*runs, *serving]:
            task.cancel()
        await asyncio.gather(*runs, *serving, return_exceptions=True)
        await store_a.close()
        await store_b.close()
    took = time.monotonic() - began
    # Informative only (a log message): how many sagas this executor saw their lease run out in the outage.
    lapsed = {
        record.args[0]
        for record in caplog.records
        if isinstance(record.args, tuple)
        and record.args
        and "lease ran out while the store was unreachable" in record.msg
    }

    # A caller's outcome: its result, its error, or its task if it never returned.
    outcomes = {
        saga_id: task.exception() if task.done() and not task.cancelled() else task
        for saga_id, task in zip(saga_ids, runs, strict=True)
    }
    problems: list[str] = []
    # The outage must be what this test is for: longer than twice the lease, with sagas running across it.
    down = world.back_at - world.stopped_at
    spanning = {c.saga_id for c in world.calls if c.ended < world.stopped_at} & {
        c.saga_id for c in world.calls if c.started > world.back_at
    }
    if down < OUTAGE or not spanning:
        problems.append(f"the server was down {down:.1f}s, {len(spanning)} sagas ran across: not the outage meant")
    errors = {saga_id: exc for saga_id, exc in outcomes.items() if isinstance(exc, BaseException)}
    unfinished = [saga_id for saga_id, outcome in outcomes.items() if isinstance(outcome, asyncio.Task)]
    problems += [f"{saga_id}: its caller never returned" for saga_id in unfinished]

    # Every saga terminal, with the status its plan calls for.
    for index, saga_id in enumerate(saga_ids):
        expected = SagaStatus.SUCCESS if fails_at(index) is None else SagaStatus.COMPENSATED
        if statuses[saga_id] is not expected:
            problems.append(f"{saga_id}: {statuses[saga_id].value}, expected {expected.value}")

    # Effects against records.
    by_step: dict[tuple[str, str, str], list[Call]] = defaultdict(list)
    for call in world.calls:
        by_step[call.phase, call.saga_id, call.step_id].append(call)
    repeats = {"execute": 0, "compensate": 0}
    for saga_id in saga_ids:
        snapshot = stored[saga_id]
        assert snapshot is not None
        saga, rows = snapshot
        for row in rows:
            executed = by_step["execute", saga_id, row.step_id]
            compensated = by_step["compensate", saga_id, row.step_id]
            where = f"{saga_id}/{row.step_id} ({row.status.value}, {row.attempts} attempts)"
            for phase, calls in (("execute", executed), ("compensate", compensated)):
                if {call.key for call in calls} - {row.idempotency_key}:
                    problems.append(f"{where}: {phase} ran with another idempotency key than {row.idempotency_key}")
                if len(calls) > 1:
                    repeats[phase] += len(calls) - 1
                    if not unknown_when_repeated(world, calls):
                        times = [(c.worker, round(c.started - began, 2), round(c.ended - began, 2)) for c in calls]
                        problems.append(f"{where}: {phase} ran {len(calls)} times, its outcome known: {times}")
            if len(executed) > row.attempts:
                problems.append(f"{where}: {len(executed)} effects, more than its recorded attempts")
            if saga.status is SagaStatus.SUCCESS and compensated:
                problems.append(f"{where}: compensated in a saga that succeeded")
            if saga.status is SagaStatus.COMPENSATED:
                if executed and not compensated:
                    problems.append(f"{where}: had an effect and was never compensated")
                elif executed and max(c.ended for c in compensated) < max(c.ended for c in executed):
                    problems.append(f"{where}: its last effect came after its compensation")
                elif compensated and not executed:
                    problems.append(f"{where}: compensated without ever having had an effect")

    # What the callers were told.
    messages = []
    for saga_id, exc in errors.items():
        text = str(exc)
        messages.append(f"{saga_id}: {type(exc).__name__}: {text}")
        if not isinstance(exc, StoreError | LeaseLostError):
            problems.append(f"{saga_id}: its caller got {type(exc).__name__}, not a StoreError or LeaseLostError")
        elif saga_id not in text and not (isinstance(exc, StoreError) and exc.url and exc.url in text):
            problems.append(f"{saga_id}: its caller's error names neither the saga nor the store: {text}")
        if "taken over" in text and saga_id not in world.taken_by_b:
            problems.append(f"{saga_id}: its caller was told of a takeover, but no other executor took it: {text}")

    terminal = sum(status.is_terminal for status in statuses.values())
    succeeded = sum(status is SagaStatus.SUCCESS for status in statuses.values())
    report = (
        f"{mode} stop: {SAGAS} sagas of {STEPS} steps, lease {LEASE:g}s, server down {down:.1f}s after {ran_before} "
        f"steps, {len(spanning)} sagas running across it, {len(lapsed)} leases ran out in it; {terminal}/{SAGAS} "
        f"terminal ({succeeded} SUCCESS); {len(errors)} callers got errors; {len(world.taken_by_b)} sagas taken "
        f"over by worker B; repeats with the same key: {repeats['execute']} executions, "
        f"{repeats['compensate']} compensations; {took:.1f}s in all"
    )
    details = "\n".join(["callers' errors:", *messages] if messages else ["no caller got an error"])
    assert not problems, report + "\n" + "\n".join(problems) + "\n" + details
    print("\n" + report + "\n" + details)
