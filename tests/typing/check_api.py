"""Type-check the public API as users write it; `make test` runs mypy (strict) on this file. Not run by pytest."""

from __future__ import annotations

from saga_runtime import (
    ApprovalRequest,
    Budget,
    PlanPolicy,
    RetryPolicy,
    SagaAdmin,
    SagaError,
    SagaExecutor,
    SagaResult,
    SagaStatus,
    SagaStore,
    Schedule,
    Step,
    StepContext,
    StepRecord,
    StepStatus,
    ToolRegistry,
    ToolSpec,
    open_store,
)

registry = ToolRegistry()


@registry.tool
class Bare:
    async def execute(self, order_id: str, amount_cents: int) -> dict[str, str]:
        return {"tx_id": order_id}

    async def compensate(self, result: dict[str, str] | None) -> None:
        return None


@registry.tool(name="ship", retry=RetryPolicy(max_attempts=3), retry_scope="step", timeout=5.0)
class WithOptions:
    def execute(self, address: str, ctx: StepContext) -> str:
        ctx.charge(cost=0.01, tokens=10)
        return ctx.idempotency_key

    def compensate(self, result: str | None, ctx: StepContext) -> None:
        return None


class NeedsClient:
    def __init__(self, client: object) -> None:
        self.client = client

    async def execute(self) -> None:
        return None


spec: ToolSpec = registry.register(NeedsClient(object()), name="needs_client", irreversible=True)
schema: dict[str, object] = registry.get("ship").args_schema
bare_cls: type[Bare] = Bare  # the decorator returns the class itself


async def use() -> None:
    executor = SagaExecutor(registry, max_concurrency=8, compensation_timeout=60.0)
    result: SagaResult = await executor.run(
        [Step(tool="Bare", args={"order_id": "A", "amount_cents": 1}, id="pay"), [{"tool": "ship", "args": {}}]],
        saga_id="order-1",
        budget=Budget(max_cost=1.0),
        policy=PlanPolicy(allowed_tools={"Bare", "ship"}, max_steps=5),
        metadata={"user": "u1"},
    )
    status: SagaStatus = result.status
    records: list[StepRecord] = result.steps
    first: StepStatus = records[0].status
    _ = (status, first, result.result_of("pay"), result.to_dict(), result.describe())
    try:
        result.raise_for_status()
    except SagaError as exc:
        _ = str(exc)
    async with open_store("memory://") as store:
        typed: SagaStore = store
        _ = await typed.get_saga("order-1")
        admin = SagaAdmin(store)
        pending: list[ApprovalRequest] = await admin.pending_approvals(limit=10)
        decided: SagaResult = await admin.approve("order-1", "pay", by="alice", note="ok")
        parked: SagaResult | None = await SagaAdmin(store, registry=registry).unpark("order-1", compensate=True)
        _ = (pending, decided, parked, await admin.list_sagas("PARKED"), await admin.verify_saga("order-1"))
    awaited = await open_store("memory://")
    await awaited.close()
    nightly: Schedule = await executor.schedule("nightly", [{"tool": "Pay", "args": {}}], cron="0 2 * * *")
    every: Schedule = await executor.schedule("digest", "send_digest", every=60.0, args={"team": "ops"}, queue="mail")
    stored: list[Schedule] = await executor.schedules()
    paused: Schedule = await executor.pause_schedule("nightly")
    resumed: Schedule = await executor.resume_schedule("nightly")
    await executor.delete_schedule("digest")
    _ = (nightly.next_tick, every.last_tick, stored, paused.paused, resumed.target, resumed.when)
