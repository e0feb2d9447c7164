"""A plan is validated once per content: reuse follows what the plan holds, never which object holds it."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from cryptography.fernet import Fernet

from saga_runtime import (
    MemoryStore,
    PlanPolicy,
    PlanValidationError,
    SagaExecutor,
    Secret,
    ToolRegistry,
    UnknownToolError,
)
from saga_runtime._planning import _build, build_plan
from saga_runtime._planning._plan import _fast_plan
from saga_runtime._records import is_envelope

registry = ToolRegistry()
seen: list[Any] = []


@registry.tool
class Count:
    async def execute(self, n: int) -> int:
        seen.append(n)
        return n

    async def compensate(self, result: int | None) -> None:
        return None


@registry.tool
class Grow:
    async def execute(self, items: list[int]) -> list[int]:
        seen.append(list(items))
        items.append(0)  # a tool changing what it was handed
        return items


@registry.tool
class Login:
    async def execute(self, user: str, password: Annotated[str, Secret]) -> str:
        seen.append(password)
        return user


def _plan(*values: Any) -> list[dict[str, Any]]:
    return [{"tool": "Count", "args": {"n": value}} for value in values]


def _unbuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any validation walk fail the test: only a reused plan may be returned."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the plan was built again")

    monkeypatch.setattr(_build, "_fast_plan", refuse)
    monkeypatch.setattr(_build, "_full_plan", refuse)


async def test_a_plan_changed_in_place_between_runs_is_validated_afresh() -> None:
    """Changing a run plan's list in place makes the next run check (and run) the new content."""
    executor = SagaExecutor(registry)
    plan = _plan(1, 2)
    assert (await executor.run(plan)).ok
    plan[1]["args"]["n"] = "two"
    with pytest.raises(PlanValidationError, match="valid integer"):
        await executor.run(plan)
    plan[1]["args"]["n"] = 3
    plan.append({"tool": "Count", "args": {"n": 4}})
    seen.clear()
    result = await executor.run(plan)
    assert result.ok
    assert seen == [1, 3, 4]
    assert [step.args for step in result.steps] == [{"n": 1}, {"n": 3}, {"n": 4}]


def test_equal_plans_share_their_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two equal plans (distinct objects) are validated once; each gets arguments of its own and the same digest."""
    first = build_plan(_plan(5, 6), registry)
    _unbuilt(monkeypatch)
    second = build_plan(_plan(5, 6), registry)
    assert second == first
    assert second.digest == first.digest
    assert second.to_json() == first.to_json()
    assert second.step_args[0] is not first.step_args[0]  # what its first row and its stored JSON hold
    assert second.to_json()[0][0]["args"] is second.step_args[0]
    assert second.to_json()[0][0]["args"] is not first.to_json()[0][0]["args"]
    assert second.groups[0][0].kwargs == {"n": 5}


@pytest.mark.parametrize(
    "other",
    [
        _plan(5.0, 6),  # a float where an int was
        _plan(True, 6),  # a bool where an int was
        [{"tool": "Count", "args": {"n": 5}, "id": "a"}, {"tool": "Count", "args": {"n": 6}}],
        (*_plan(5, 6),),  # a tuple: the same plan, kept apart
    ],
)
def test_a_plan_of_other_content_is_built(other: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan that only looks like a known one (1.0 or True for 1, another key, a tuple) is built, not reused."""
    build_plan(_plan(5, 6), registry)
    walks = []
    walk = _fast_plan

    def counted(*args: Any) -> Any:
        walks.append(args[0])
        return walk(*args)

    monkeypatch.setattr(_build, "_fast_plan", counted)
    assert build_plan(other, registry).to_json() == walk(other, registry, None).to_json()  # type: ignore[union-attr]
    assert walks == [other]


def test_a_policy_and_a_new_tool_are_taken_into_account() -> None:
    """A reused plan still meets the policy given with it; a plan refused for an unknown tool runs once it exists."""
    local = ToolRegistry()
    plan = [{"tool": "Late", "args": {}}]
    with pytest.raises(UnknownToolError):
        build_plan(plan, local)

    @local.tool
    class Late:
        async def execute(self) -> None:
            return None

    assert build_plan(plan, local).steps[0].tool_name == "Late"
    with pytest.raises(PlanValidationError, match="not allowed by the plan policy"):
        build_plan(plan, local, policy=PlanPolicy(allowed_tools={"Other"}))


async def test_what_a_run_hands_out_never_changes_the_next_run() -> None:
    """A tool changing its list argument, or a caller its result's args, leaves the next run of the plan intact."""
    executor = SagaExecutor(registry)
    plan = [{"tool": "Grow", "args": {"items": [1]}}, {"tool": "Count", "args": {"n": 1}}]
    seen.clear()
    first = await executor.run(plan)
    first.steps[1].args["n"] = 99
    second = await executor.run(plan)
    assert first.ok
    assert second.ok
    assert seen == [[1], 1, [1], 1]
    assert second.steps[0].args == {"items": [1]}
    assert second.steps[1].args == {"n": 1}


async def test_sagas_of_a_reused_plan_verify() -> None:
    """The seals of sagas run from one plan content (integral floats included) verify, with and without a key."""
    for key in (None, b"signing-key"):
        executor = SagaExecutor(registry, store=MemoryStore(signing_key=key))
        for n in range(3):
            plan = [{"tool": "Count", "args": {"n": 1.0}}, {"tool": "Count", "args": {"n": 2}}]
            result = await executor.run(plan, saga_id=f"s{n}")
            assert result.ok
            assert await executor.store.verify_saga(f"s{n}")


async def test_a_secret_plan_is_encrypted_for_every_saga() -> None:
    """Each run of a plan with a secret argument stores it encrypted afresh and hands the tool the clear value."""
    executor = SagaExecutor(registry, secret_key=Fernet.generate_key())
    plan = [{"tool": "Login", "args": {"user": "ann", "password": "hunter2"}}]
    seen.clear()
    envelopes = []
    for n in range(2):
        assert (await executor.run(plan, saga_id=f"login{n}")).ok
        loaded = await executor.store.load_saga(f"login{n}")
        assert loaded is not None
        stored = loaded[1][0].args["password"]
        assert is_envelope(stored)
        envelopes.append(stored)
    assert seen == ["hunter2", "hunter2"]
    assert envelopes[0] != envelopes[1]


def test_a_registry_keeps_a_bounded_number_of_plans() -> None:
    """However many distinct plans run, a registry keeps at most a fixed number of them, the latest."""
    local = ToolRegistry()
    local.register(Count())
    for n in range(_build._KEPT + 10):
        build_plan(_plan(n), local)
    assert len(local._built_plans) == _build._KEPT
    assert next(reversed(local._built_plans.values())).plan.steps[0].args == {"n": _build._KEPT + 9}


async def test_a_stored_plan_edited_in_place_leaves_later_sagas_intact() -> None:
    """Each saga stores a plan of its own: one edited in a memory store changes no later saga of that plan."""
    store = MemoryStore()
    executor = SagaExecutor(registry, store=store)
    await executor.run(_plan(1), saga_id="first")
    store._sagas["first"].plan[0][0]["args"]["n"] = 9
    await executor.run(_plan(1), saga_id="second")
    assert store._sagas["second"].plan[0][0]["args"] == {"n": 1}
    assert await store.verify_saga("second")
    assert not await store.verify_saga("first")
