"""recover(), serve(), parking, unpark() and retry_compensation(), on sagas whose owner is gone."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import anyio
import pytest

from saga_runtime import (
    MemoryStore,
    RetryPolicy,
    SagaExecutor,
    SagaInProgressError,
    SagaStatus,
    StepContext,
    StepStatus,
    StoreError,
    ToolRegistry,
)
from saga_runtime._records import SagaRow, StepRow, canonical_json, idempotency_key, now, seal_all


class World:
    """What the tools did, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int, str]] = []
        self.refunds_fail = False


@pytest.fixture
def world() -> World:
    """Return a fresh world."""
    return World()


@pytest.fixture
def registry(world: World) -> ToolRegistry:
    """Return tools that log their effects and undos with their idempotency keys."""
    registry = ToolRegistry()

    @registry.tool(compensation_retry=RetryPolicy(max_attempts=1))
    class Charge:
        async def execute(self, n: int, ctx: StepContext) -> dict[str, int]:
            world.log.append(("do", n, ctx.idempotency_key))
            if n < 0:
                raise ValueError("refused")
            return {"n": n}

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            if world.refunds_fail:
                raise ConnectionError("refunds are down")
            world.log.append(("undo", ctx.args["n"], ctx.idempotency_key))

    return registry


def orphan(
    store: MemoryStore,
    saga_id: str,
    statuses: list[StepStatus],
    *,
    kind: str = "plan",
    amounts: list[int] | None = None,
) -> list[StepRow]:
    """Store a saga left by a dead executor: one step per status, its lease long expired."""
    amounts = amounts or list(range(1, len(statuses) + 1))
    plan = [[{"id": f"s{i}", "tool": "Charge", "args": {"n": n}}] for i, n in enumerate(amounts)]
    started = now() - timedelta(minutes=5)
    saga = SagaRow(
        saga_id=saga_id,
        kind=kind,  # type: ignore[arg-type]
        plan=plan if kind == "plan" else None,
        plan_hash=hashlib.sha256(canonical_json(plan).encode()).hexdigest() if kind == "plan" else None,
        status=SagaStatus.RUNNING,
        created_at=started,
        updated_at=started,
        owner="dead",
        lease_expires_at=started + timedelta(seconds=30),
    )
    rows = []
    for i, (status, n) in enumerate(zip(statuses, amounts, strict=True)):
        row = StepRow(saga_id, i, f"s{i}", i, "Charge", {"n": n}, idempotency_key(saga_id, f"s{i}"), status=status)
        if status is not StepStatus.PENDING:
            row.attempts, row.started_at = 1, started
        if status is StepStatus.SUCCESS:
            row.result, row.finished_at = {"n": n}, started
        rows.append(row)
    seal_all(rows, None)
    store._sagas[saga_id] = saga
    store._steps[saga_id] = {row.step_id: row for row in rows}
    return rows


async def test_recover_resumes_a_plan_saga_forward(registry: ToolRegistry, world: World) -> None:
    """SUCCESS steps never run again; the unknown step re-runs with its key; pending steps run; SUCCESS."""
    store = MemoryStore()
    rows = orphan(store, "p", [StepStatus.SUCCESS, StepStatus.RUNNING, StepStatus.PENDING])
    results = await SagaExecutor(registry, store=store).recover()
    assert [(r.saga_id, r.status) for r in results] == [("p", SagaStatus.SUCCESS)]
    assert world.log == [("do", 2, rows[1].idempotency_key), ("do", 3, rows[2].idempotency_key)]
    assert results[0].step("s1").attempts == 2
    assert await store.verify_saga("p")


async def test_recover_compensates_a_plan_saga_that_fails_on_resume(registry: ToolRegistry, world: World) -> None:
    """A resumed plan saga whose next step fails compensates everything done, in reverse."""
    store = MemoryStore()
    rows = orphan(store, "p", [StepStatus.SUCCESS, StepStatus.RUNNING, StepStatus.PENDING], amounts=[1, 2, -3])
    (result,) = await SagaExecutor(registry, store=store).recover()
    assert result.status is SagaStatus.COMPENSATED
    assert world.log[-2:] == [("undo", 2, rows[1].idempotency_key), ("undo", 1, rows[0].idempotency_key)]


async def test_recover_compensates_a_dynamic_saga(registry: ToolRegistry, world: World) -> None:
    """A dynamic saga's code died with its process: recovery compensates what it did, unknown steps too."""
    store = MemoryStore()
    orphan(store, "d", [StepStatus.SUCCESS, StepStatus.RUNNING], kind="dynamic")
    (result,) = await SagaExecutor(registry, store=store).recover()
    assert result.status is SagaStatus.COMPENSATED
    assert [event[:2] for event in world.log] == [("undo", 2), ("undo", 1)]


async def test_a_compensating_saga_continues_without_undoing_twice(registry: ToolRegistry, world: World) -> None:
    """An interrupted compensation continues; a step already COMPENSATED is not compensated again."""
    store = MemoryStore()
    orphan(store, "c", [StepStatus.COMPENSATED, StepStatus.SUCCESS, StepStatus.FAILED], amounts=[1, 2, -3])
    store._sagas["c"].status = SagaStatus.COMPENSATING
    (result,) = await SagaExecutor(registry, store=store).recover()
    assert result.status is SagaStatus.COMPENSATED
    assert [event[:2] for event in world.log] == [("undo", 2)]


async def test_live_sagas_and_missing_tools_are_left_alone(registry: ToolRegistry, world: World) -> None:
    """Recovery takes neither a saga whose lease is alive nor one needing tools this executor lacks."""
    store = MemoryStore()
    orphan(store, "alive", [StepStatus.RUNNING])
    store._sagas["alive"].lease_expires_at = now() + timedelta(minutes=1)
    orphan(store, "foreign", [StepStatus.RUNNING])
    store._steps["foreign"]["s0"].tool_name = "Unknown"
    lapsed = store._sagas["foreign"].lease_expires_at
    assert await SagaExecutor(registry, store=store).recover() == []
    assert world.log == []
    foreign = store._sagas["foreign"]
    # Given back as it was found (its dead owner, its lapsed lease): the next takeover names who really held it.
    assert (foreign.owner, foreign.lease_expires_at, foreign.recovery_attempts) == ("dead", lapsed, 0)


async def test_two_executors_recovering_at_once_never_take_the_same_saga(registry: ToolRegistry, world: World) -> None:
    """Concurrent recover() calls split the orphans: each saga's unknown step runs exactly once more."""
    store = MemoryStore()
    for i in range(20):
        orphan(store, f"o{i}", [StepStatus.RUNNING])
    first, second = await asyncio.gather(
        SagaExecutor(registry, store=store).recover(), SagaExecutor(registry, store=store).recover()
    )
    assert sorted(r.saga_id for r in first + second) == sorted(f"o{i}" for i in range(20))
    assert len(world.log) == 20


async def test_a_saga_failing_recovery_too_often_is_parked_then_unparked(registry: ToolRegistry) -> None:
    """After max_recovery_attempts failed recoveries a saga is PARKED, visible, and unpark() makes it live."""
    store = MemoryStore()
    orphan(store, "poison", [StepStatus.RUNNING])
    store._sagas["poison"].recovery_attempts = 3  # three recoveries already died on it
    executor = SagaExecutor(registry, store=store, max_recovery_attempts=3)
    (parked,) = await executor.recover()
    assert parked.status is SagaStatus.PARKED
    assert "unpark" in (parked.error or "")
    assert [s.saga_id for s in await store.list_sagas(status="PARKED")] == ["poison"]
    assert await executor.recover() == []  # a parked saga is not retried
    await executor.unpark("poison")
    (result,) = await executor.recover()
    assert result.status is SagaStatus.SUCCESS


async def test_two_operators_unparking_at_once_unpark_once(registry: ToolRegistry) -> None:
    """Of two unpark() calls at once one makes the saga live; the other raises, naming its status now."""
    store = MemoryStore()
    orphan(store, "poison", [StepStatus.RUNNING])
    store._sagas["poison"].recovery_attempts = 3
    executor = SagaExecutor(registry, store=store, max_recovery_attempts=3)
    await executor.recover()
    outcomes = await asyncio.gather(executor.unpark("poison"), executor.unpark("poison"), return_exceptions=True)
    assert outcomes[0] is None
    assert isinstance(outcomes[1], SagaInProgressError)
    assert "is RUNNING, not PARKED" in str(outcomes[1])
    (result,) = await executor.recover()
    assert result.status is SagaStatus.SUCCESS


async def test_retry_compensation_finishes_what_gave_up(registry: ToolRegistry, world: World) -> None:
    """A COMPENSATION_FAILED saga's failed compensations run again; COMPENSATED steps are not undone twice."""
    store = MemoryStore()
    executor = SagaExecutor(registry, store=store)
    plan = [
        {"tool": "Charge", "args": {"n": 1}},
        {"tool": "Charge", "args": {"n": 2}},
        {"tool": "Charge", "args": {"n": -1}},
    ]
    world.refunds_fail = True
    failed = await executor.run(plan, saga_id="refunds")
    assert failed.status is SagaStatus.COMPENSATION_FAILED
    assert [s.saga_id for s in await store.list_sagas(status="COMPENSATION_FAILED")] == ["refunds"]
    world.refunds_fail = False
    fixed = await executor.retry_compensation("refunds")
    assert fixed.status is SagaStatus.COMPENSATED
    assert [event[:2] for event in world.log if event[0] == "undo"] == [("undo", 2), ("undo", 1)]
    with pytest.raises(SagaInProgressError):
        await executor.retry_compensation("refunds")
    assert await store.verify_saga("refunds")


async def stop_when_late_is_done(worker: asyncio.Task[None], store: MemoryStore) -> None:
    """Wait (at most 2 s) for serve() to finish the orphan "late", cancel it, and check it ended quietly, SUCCESS."""
    for _ in range(200):
        await asyncio.sleep(0.01)
        if store._sagas["late"].status.is_terminal:
            break
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    assert store._sagas["late"].status is SagaStatus.SUCCESS


async def test_serve_recovers_then_stops_cleanly_on_cancellation(registry: ToolRegistry, world: World) -> None:
    """serve() recovers orphans round after round and ends quietly when its task is cancelled."""
    store = MemoryStore()
    executor = SagaExecutor(registry, store=store)
    worker = asyncio.create_task(executor.serve(interval=0.01))
    orphan(store, "late", [StepStatus.RUNNING])
    await stop_when_late_is_done(worker, store)


async def test_recovery_does_not_starve_behind_sagas_it_cannot_run(registry: ToolRegistry, world: World) -> None:
    """Bug: a full batch of sagas needing foreign tools hid every other orphan from recover() forever."""
    store = MemoryStore()
    for i in range(3):
        orphan(store, f"foreign{i}", [StepStatus.RUNNING])
        store._steps[f"foreign{i}"]["s0"].tool_name = "Elsewhere"
        store._sagas[f"foreign{i}"].created_at -= timedelta(hours=1)  # the oldest: claimed first
    orphan(store, "mine", [StepStatus.RUNNING])
    results = await SagaExecutor(registry, store=store).recover(limit=3)
    assert [r.saga_id for r in results] == ["mine"]
    assert all(store._sagas[f"foreign{i}"].status is SagaStatus.RUNNING for i in range(3))


async def test_serve_survives_a_round_that_fails_unexpectedly(
    registry: ToolRegistry, world: World, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve() logs a round that raised something other than a StoreError, and goes on recovering next round."""
    store = MemoryStore()
    executor = SagaExecutor(registry, store=store)
    real_claim = store.claim_expired
    calls = 0

    async def flaky_claim(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug in one round")
        return await real_claim(*args, **kwargs)

    monkeypatch.setattr(store, "claim_expired", flaky_claim)
    orphan(store, "late", [StepStatus.RUNNING])
    worker = asyncio.create_task(executor.serve(interval=0.01))
    await stop_when_late_is_done(worker, store)
    assert "a bug in one round" in caplog.text


def always_failing(calls: list[int]) -> ToolRegistry:
    """Return a registry whose Charge fails every attempt, allowed three attempts, logging each attempt number."""
    registry = ToolRegistry()

    @registry.tool(retry=RetryPolicy(max_attempts=3, initial_interval=0.001, jitter=False))
    class Charge:
        async def execute(self, n: int, ctx: StepContext) -> None:
            calls.append(ctx.attempt)
            raise ConnectionError("the provider is down")

    return registry


@pytest.mark.parametrize(("recorded", "expected"), [(1, [2, 3]), (3, [4])], ids=["budget-left", "budget-spent"])
async def test_the_retry_budget_spans_recoveries(recorded: int, expected: list[int]) -> None:
    """Bug: each recovery granted max_attempts afresh; recorded attempts now count (one unknown one still re-runs)."""
    calls: list[int] = []
    store = MemoryStore()
    rows = orphan(store, "budget", [StepStatus.RUNNING])
    rows[0].attempts = recorded  # died during attempt `recorded` of 3: its outcome is unknown
    seal_all(rows, None)
    (result,) = await SagaExecutor(always_failing(calls), store=store).recover()
    # The unknown attempt runs again with its key (even when that makes a fourth); retries stop at the policy's 3.
    assert calls == expected
    assert result.status is SagaStatus.COMPENSATED
    assert result.step("s0").attempts == expected[-1]


class PoisonStore(MemoryStore):
    """A memory store that fails every write of step rows: each recovery of a saga fails before its tools run."""

    def __init__(self) -> None:
        super().__init__()
        self.failed_writes = 0

    async def save(
        self,
        saga: SagaRow | None,
        steps: Sequence[StepRow],
        *,
        owner: str | None = None,
        reseal: bool = True,
        lease: bool = True,
    ) -> None:
        if steps:
            self.failed_writes += 1
            raise StoreError("the disk is full", url=self.url)
        await super().save(saga, steps, owner=owner, reseal=reseal, lease=lease)


async def test_a_saga_is_parked_exactly_when_its_failed_recoveries_reach_max_recovery_attempts(
    registry: ToolRegistry,
) -> None:
    """max_recovery_attempts=2: two recoveries drive the saga and fail; the third parks it, saying it failed 2 times."""
    store = PoisonStore()
    orphan(store, "poison", [StepStatus.RUNNING])
    executor = SagaExecutor(registry, store=store, max_recovery_attempts=2)
    for claim in (1, 2):
        assert await executor.recover() == []
        assert (store.failed_writes, store._sagas["poison"].status) == (claim, SagaStatus.RUNNING)
        store._sagas["poison"].lease_expires_at = now() - timedelta(seconds=1)  # this recovery's worker is gone
    (parked,) = await executor.recover()
    assert parked.status is SagaStatus.PARKED
    assert store.failed_writes == 2  # the third claim did not drive it again
    assert (parked.error or "").startswith("parked: recovery failed 2 times")
    assert store._sagas["poison"].recovery_attempts == 2  # the two that started driving it; parking counts none


async def test_a_step_whose_attempt_was_running_after_a_refused_undo_never_lets_the_saga_succeed(
    registry: ToolRegistry, world: World
) -> None:
    """Bug: a step undone on recovery (its refused attempt's undo counted) was skipped and the saga ended SUCCESS."""
    store = MemoryStore()
    rows = orphan(store, "undone", [StepStatus.SUCCESS, StepStatus.RUNNING, StepStatus.PENDING])
    # Attempt 1 of s1 returned a refused result and was undone at once; attempt 2 was running at the crash.
    rows[1].attempts, rows[1].compensation_attempts = 2, 1
    seal_all(rows, None)
    results = await SagaExecutor(registry, store=store).recover()
    assert [r.status for r in results] == [SagaStatus.COMPENSATED]
    assert ("do", 3, rows[2].idempotency_key) not in world.log  # the saga did not go on without s1
    assert [entry[:2] for entry in world.log] == [("undo", 2), ("undo", 1)]
    assert await store.verify_saga("undone")


async def test_recover_drives_its_sagas_concurrently_within_its_bound() -> None:
    """recover() drives the orphans it claimed at once, never more than recovery_concurrency of them together."""
    from saga_runtime._planning import build_plan
    from saga_runtime._records import SagaRow, StepRow, StepStatus, idempotency_key, now, seal_all

    running = 0
    most = 0
    registry = ToolRegistry()

    @registry.tool
    class Slow:
        async def execute(self, ctx: StepContext) -> str:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await anyio.sleep(0.2)
            running -= 1
            return ctx.saga_id

    store = MemoryStore()
    planned = build_plan([{"id": "s", "tool": "Slow"}], registry)
    started = now() - timedelta(minutes=1)
    for n in range(10):
        saga = SagaRow(
            f"orphan-{n}",
            "plan",
            planned.to_json(),
            planned.digest,
            SagaStatus.RUNNING,
            started,
            started,
            owner="dead",
            lease_expires_at=started,
        )
        row = StepRow(saga.saga_id, 0, "s", 0, "Slow", {}, idempotency_key(saga.saga_id, "s"))
        row.status, row.attempts, row.started_at = StepStatus.RUNNING, 1, started
        seal_all([row], None)
        await store.create_saga(saga, [row])
    executor = SagaExecutor(registry, store=store, recovery_concurrency=4)
    clock = anyio.current_time()
    results = await executor.recover()
    elapsed = anyio.current_time() - clock
    assert [r.saga_id for r in results] == [f"orphan-{n}" for n in range(10)]  # in the order claimed
    assert all(r.status is SagaStatus.SUCCESS for r in results)
    assert most == 4
    assert elapsed < 10 * 0.2  # generous: sequential would take 2 s
