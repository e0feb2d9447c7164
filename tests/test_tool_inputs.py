"""What a tool is handed is its own: changing its arguments or its compensation's result in place changes no record."""

from __future__ import annotations

from typing import Any

from saga_runtime import SagaExecutor, SagaStatus, StepContext, ToolRegistry


def registry_with(refunds: list[Any]) -> ToolRegistry:
    """Return tools that change what they are given in place, as careless tools do."""
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        """Charge an amount; the refund changes the result it is handed after recording it."""

        async def execute(self, amount: int) -> dict[str, Any]:
            return {"tx": "t1", "amount": amount}

        async def compensate(self, result: dict[str, Any]) -> None:
            refunds.append(dict(result))
            result["amount"] = 0

    @registry.tool
    class Fee:
        """Take a fee off a charge it gets by $ref, working on its argument in place."""

        async def execute(self, charge: Any, opts: Any = None) -> int:
            charge["amount"] -= 30
            if opts is not None:
                opts["express"] = int(opts["express"])  # normalises true to 1 in place
            return int(charge["amount"])

        async def compensate(self, result: int, ctx: StepContext) -> None:
            ctx.args["charge"]["amount"] = -1

    @registry.tool
    class Ship:
        """Fail, so the saga compensates."""

        async def execute(self) -> None:
            raise RuntimeError("no carrier")

    return registry


PLAN = [
    {"id": "c", "tool": "Charge", "args": {"amount": 500}},
    {"id": "f", "tool": "Fee", "args": {"charge": {"$ref": "c"}, "opts": {"express": True}}},
    {"id": "s", "tool": "Ship", "args": {}},
]


async def test_a_tool_changing_its_arguments_changes_no_record_and_refunds_stay_right() -> None:
    """A step mutating a $ref argument or its options leaves the stored result, args and seals as they were."""
    refunds: list[Any] = []
    executor = SagaExecutor(registry_with(refunds))
    result = await executor.run(PLAN, saga_id="careless")
    assert result.status is SagaStatus.COMPENSATED
    assert refunds == [{"tx": "t1", "amount": 500}]  # the charge's own result, not what Fee made of it
    stored = await executor.store.get_saga("careless")
    assert stored is not None
    assert stored.steps[0].result == {"tx": "t1", "amount": 500}
    # Stored as run: the $ref resolved to the charge's result, the options as the plan gave them.
    assert stored.steps[1].args == {"charge": {"tx": "t1", "amount": 500}, "opts": {"express": True}}
    assert await executor.store.verify_saga("careless")


async def test_a_dynamic_call_result_changed_by_the_caller_changes_no_record() -> None:
    """The value saga.call returns is the caller's own: changing it changes neither the record nor a later call."""
    refunds: list[Any] = []
    executor = SagaExecutor(registry_with(refunds))
    async with executor.saga(saga_id="dyn") as saga:
        charge = await saga.call("Charge", amount=200)
        charge["amount"] = 1
    stored = await executor.store.get_saga("dyn")
    assert stored is not None
    assert stored.steps[0].result == {"tx": "t1", "amount": 200}
    assert await executor.store.verify_saga("dyn")
