"""A step of unknown outcome is settled by its tool's `reconcile` before anything is done with it (API §15)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from saga_runtime import NOT_DONE, SagaExecutor, SagaResult, SagaStatus, StepContext, StepStatus, ToolRegistry
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaRow, StepRow, extend_head, idempotency_key, now, seal_all

from .conftest import Stores

CALLS: Counter[str] = Counter()
KEYS: list[str] = []
# What the payment provider says happened to each idempotency key (the test sets it).
PROVIDER: dict[str, Any] = {}

registry = ToolRegistry()


@registry.tool
class Pay:
    async def execute(self, amount: int, ctx: StepContext) -> dict[str, Any]:
        CALLS["execute"] += 1
        return {"tx": f"tx-{amount}"}

    async def compensate(self, result: dict[str, Any] | None, ctx: StepContext) -> None:
        CALLS[f"refund {result}"] += 1

    async def reconcile(self, amount: int, ctx: StepContext) -> Any:
        CALLS["reconcile"] += 1
        KEYS.append(ctx.idempotency_key)
        answer = PROVIDER[ctx.idempotency_key]
        if isinstance(answer, Exception):
            raise answer
        return answer


@registry.tool
class Fail:
    async def execute(self) -> None:
        raise RuntimeError("declined")


PLAN = [{"id": "pay", "tool": "Pay", "args": {"amount": 5}}, {"id": "last", "tool": "Pay", "args": {"amount": 1}}]
FAILING = [{"id": "pay", "tool": "Pay", "args": {"amount": 5}}, {"id": "fail", "tool": "Fail"}]


async def orphan(store: Any, saga_id: str, plan: list[Any], kind: str = "plan") -> None:
    """Store a saga whose owner died while its first step ran: that step's outcome is unknown."""
    started = now() - timedelta(minutes=5)
    planned = build_plan(plan, registry)
    row = StepRow(saga_id, 0, "pay", 0, "Pay", {"amount": 5}, idempotency_key(saga_id, "pay"))
    # A dynamic saga's plan hash is the head of its calls' chain.
    stored_plan, digest = (planned.to_json(), planned.digest) if kind == "plan" else (None, extend_head(None, row))
    saga = SagaRow(
        saga_id, kind, stored_plan, digest, SagaStatus.RUNNING, started, started, owner="dead",  # type: ignore[arg-type]
        lease_expires_at=started,
    )  # fmt: skip
    row.status, row.attempts, row.started_at = StepStatus.RUNNING, 1, started
    seal_all([row], None)
    assert await store.create_saga(saga, [row]) is None


def reset(saga_id: str, answer: Any) -> None:
    """Count from zero; the provider will answer `answer` for the saga's first step."""
    CALLS.clear()
    KEYS.clear()
    PROVIDER[idempotency_key(saga_id, "pay")] = answer


async def recovered(
    store: Any, saga_id: str, answer: Any, plan: list[Any] = PLAN, saga_kind: str = "plan"
) -> SagaResult:
    """Orphan a saga whose first step's outcome is unknown, let the provider say `answer`; return it recovered."""
    await orphan(store, saga_id, plan, saga_kind)
    reset(saga_id, answer)
    (done,) = await SagaExecutor(registry, store=store).recover()
    return done


async def test_recovery_asks_reconcile_and_records_a_done_step_without_running_it(stores: Stores, kind: str) -> None:
    """reconcile found the charge: the step is SUCCESS with its answer, reconciled, never executed again."""
    store = await stores.open(kind, wipe=True)
    done = await recovered(store, "found", {"tx": "tx-found"})
    assert done.status is SagaStatus.SUCCESS
    pay = done.step("pay")
    assert (pay.status, pay.result, pay.reconciled, pay.attempts) == (StepStatus.SUCCESS, {"tx": "tx-found"}, True, 1)
    assert CALLS == {"reconcile": 1, "execute": 1}  # the second step only
    assert [pay.idempotency_key] == KEYS
    stored = await store.get_saga("found")
    assert stored is not None
    assert stored.step("pay").reconciled
    assert await store.verify_saga("found")


async def test_recovery_runs_a_step_reconcile_finds_not_done_again_with_its_key(stores: Stores, kind: str) -> None:
    """NOT_DONE: the step runs again with the same idempotency key; its record is the run's, not reconciled."""
    store = await stores.open(kind, wipe=True)
    done = await recovered(store, "missing", NOT_DONE)
    assert done.status is SagaStatus.SUCCESS
    pay = done.step("pay")
    assert (pay.status, pay.result, pay.reconciled) == (StepStatus.SUCCESS, {"tx": "tx-5"}, False)
    assert CALLS == {"reconcile": 1, "execute": 2}
    assert await store.verify_saga("missing")


async def test_a_reconcile_that_raises_leaves_the_outcome_unknown_as_before(stores: Stores, kind: str) -> None:
    """reconcile raising: the step runs again with its key, as without reconcile (retried by compensation_retry)."""
    store = await stores.open(kind, wipe=True)
    done = await recovered(store, "unsure", ConnectionError("provider down"))
    assert done.status is SagaStatus.SUCCESS
    assert not done.step("pay").reconciled
    assert CALLS["execute"] == 2
    assert CALLS["reconcile"] >= 2  # the default compensation_retry tries more than once


async def test_a_dynamic_saga_compensates_a_reconciled_step_with_its_answer(stores: Stores, kind: str) -> None:
    """Recovery compensating: a step found done is undone with reconcile's answer, not with None."""
    store = await stores.open(kind, wipe=True)
    done = await recovered(store, "dyn-done", {"tx": "tx-found"}, saga_kind="dynamic")
    assert done.status is SagaStatus.COMPENSATED
    pay = done.step("pay")
    assert (pay.status, pay.result, pay.reconciled) == (StepStatus.COMPENSATED, {"tx": "tx-found"}, True)
    assert CALLS == {"reconcile": 1, "refund {'tx': 'tx-found'}": 1}
    assert await store.verify_saga("dyn-done")


async def test_a_step_found_not_done_is_cancelled_and_never_compensated(stores: Stores, kind: str) -> None:
    """Recovery compensating: NOT_DONE ends the step CANCELLED, reconciled, with no compensate call."""
    store = await stores.open(kind, wipe=True)
    done = await recovered(store, "dyn-none", NOT_DONE, saga_kind="dynamic")
    assert done.status is SagaStatus.COMPENSATED
    pay = done.step("pay")
    assert (pay.status, pay.reconciled, pay.compensated_at) == (StepStatus.CANCELLED, True, None)
    assert CALLS == {"reconcile": 1}
    assert await store.verify_saga("dyn-none")
