"""What a tool is handed is its own: changing its arguments or its compensation's result in place changes no record."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from saga_runtime import RetryPolicy, SagaExecutor, SagaStatus, StepContext, ToolRegistry


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


async def test_a_dynamic_group_result_changed_by_the_caller_changes_no_record() -> None:
    """What saga.group(join=...) returns is the caller's own: changing it changes no record, nor the refund."""
    refunds: list[Any] = []
    executor = SagaExecutor(registry_with(refunds))

    async def agent() -> None:
        async with executor.saga(saga_id="grp") as saga:
            won = await saga.group([("Charge", {"amount": 500})], join="first")
            won["amount"] = 0
            every = await saga.group([("Charge", {"amount": 70})], join="any")
            every[0]["amount"] = 0
            raise RuntimeError("the agent gives up")

    with pytest.raises(RuntimeError, match="gives up"):
        await agent()
    assert sorted(r["amount"] for r in refunds) == [70, 500]


class Order(pydantic.BaseModel):
    """An argument model holding whatever it is given."""

    charge: Any


async def test_a_ref_inside_a_model_argument_is_a_copy_of_the_earlier_result() -> None:
    """A $ref result a tool gets inside a model argument is a copy: changing it leaves the earlier refund right."""
    refunds: list[Any] = []
    registry = registry_with(refunds)

    @registry.tool
    class Discount:
        """Take 100 off the charge inside the order, in place."""

        async def execute(self, order: Order) -> int:
            order.charge["amount"] -= 100
            return int(order.charge["amount"])

    plan = [
        {"id": "c", "tool": "Charge", "args": {"amount": 500}},
        {"id": "d", "tool": "Discount", "args": {"order": {"charge": {"$ref": "c"}}}},
        {"id": "s", "tool": "Ship", "args": {}},
    ]
    result = await SagaExecutor(registry).run(plan)
    assert result.status is SagaStatus.COMPENSATED
    assert refunds == [{"tx": "t1", "amount": 500}]
    assert result.step("c").result == {"tx": "t1", "amount": 500}


class Basket(pydantic.BaseModel):
    """An argument model with a list inside."""

    items: list[int]


async def test_a_retry_is_handed_the_arguments_a_failed_attempt_changed_in_place_as_planned() -> None:
    """Each attempt gets its own copy of tuple, set and model arguments: a failed one changing them changes no retry."""
    seen: list[tuple[Any, ...]] = []
    registry = ToolRegistry()

    @registry.tool(retry=RetryPolicy(max_attempts=2, initial_interval=0.001, jitter=False))
    class Pack:
        """Change every argument in place, then fail the first attempt."""

        async def execute(self, pair: tuple[list[int], int], tags: set[str], basket: Basket) -> int:
            seen.append((([*pair[0]], pair[1]), set(tags), [*basket.items]))
            pair[0].append(99)
            tags.add("changed")
            basket.items.append(99)
            if len(seen) == 1:
                raise RuntimeError("the first attempt fails")
            return len(seen)

    plan = [{"tool": "Pack", "args": {"pair": [[1], 2], "tags": ["a"], "basket": {"items": [1]}}}]
    result = await SagaExecutor(registry).run(plan)
    assert result.status is SagaStatus.SUCCESS
    assert seen == [(([1], 2), {"a"}, [1]), (([1], 2), {"a"}, [1])]
