"""Plans: their shapes, step ids, `$ref`s, groups, PlanPolicy and the irreversible rule."""

from typing import Any

import pytest

from saga_runtime import (
    PlanPolicy,
    PlanValidationError,
    SagaExecutor,
    SagaStatus,
    Step,
    StepContext,
    StepStatus,
    ToolRegistry,
)

Calls = list[tuple[str, str, dict[str, Any]]]


def make_registry(calls: Calls) -> ToolRegistry:
    """Return a registry of tools that record (tool, step id, arguments) in `calls`."""
    registry = ToolRegistry()

    @registry.tool
    class Echo:
        """Return what it was given."""

        async def execute(self, ctx: StepContext, value: Any = None) -> Any:
            calls.append(("Echo", ctx.step_id, {"value": value}))
            return value

        async def compensate(self, result: Any, ctx: StepContext) -> None:
            calls.append(("undo Echo", ctx.step_id, {"result": result}))

    @registry.tool
    class Sum:
        async def execute(self, numbers: list[int], ctx: StepContext) -> int:
            calls.append(("Sum", ctx.step_id, {"numbers": numbers}))
            return sum(numbers)

        async def compensate(self, result: int, ctx: StepContext) -> None:
            calls.append(("undo Sum", ctx.step_id, {"result": result}))

    @registry.tool
    class Read:
        """Read-only: nothing to undo."""

        def execute(self, ctx: StepContext) -> str:
            calls.append(("Read", ctx.step_id, {}))
            return "data"

    @registry.tool(irreversible=True)
    class Send:
        def execute(self, to: str, ctx: StepContext) -> None:
            calls.append(("Send", ctx.step_id, {"to": to}))

    return registry


@pytest.fixture
def calls() -> Calls:
    """Return the list the tools record their calls in."""
    return []


@pytest.fixture
def executor(calls: Calls) -> SagaExecutor:
    """Return an executor over the recording tools."""
    return SagaExecutor(make_registry(calls))


def forward(calls: Calls) -> list[tuple[str, str, dict[str, Any]]]:
    """Return the execute calls (not the compensations) in the order they happened."""
    return [call for call in calls if not call[0].startswith("undo")]


async def refused(executor: SagaExecutor, plan: Any, **kwargs: Any) -> list[str]:
    """Run a plan that must be refused; return its problems after checking that nothing ran or was stored."""
    with pytest.raises(PlanValidationError) as info:
        await executor.run(plan, **kwargs)
    assert await executor.store.list_sagas() == []
    return info.value.problems


# -- shapes --------------------------------------------------------------------------------------------------------


async def test_plan_of_dicts_runs_in_order(executor: SagaExecutor, calls: Calls) -> None:
    """A list of step dicts runs one step per group, in order."""
    result = await executor.run(
        [{"tool": "Echo", "args": {"value": 1}, "id": "a"}, {"tool": "Echo", "args": {"value": 2}, "id": "b"}]
    )
    assert result.status is SagaStatus.SUCCESS
    assert calls == [("Echo", "a", {"value": 1}), ("Echo", "b", {"value": 2})]
    assert [(s.step_id, s.group) for s in result.steps] == [("a", 0), ("b", 1)]


async def test_plan_of_step_objects_runs(executor: SagaExecutor, calls: Calls) -> None:
    """Step(tool=..., args=..., id=...) objects stand where dicts do; args and id may be left out."""
    result = await executor.run([Step(tool="Echo", args={"value": "x"}, id="s1"), Step(tool="Read")])
    assert result.status is SagaStatus.SUCCESS
    assert calls[0] == ("Echo", "s1", {"value": "x"})
    assert calls[1][0] == "Read"
    assert result.steps[0].step_id == "s1"
    assert result.steps[1].group == 1


async def test_groups_as_lists_run_their_steps_concurrently(executor: SagaExecutor, calls: Calls) -> None:
    """A list inside the plan is a group: its steps share a group index and all run before the next group."""
    result = await executor.run(
        [
            [{"tool": "Echo", "args": {"value": 1}, "id": "a"}, {"tool": "Echo", "args": {"value": 2}, "id": "b"}],
            [{"tool": "Read", "id": "c"}],
        ]
    )
    assert result.status is SagaStatus.SUCCESS
    assert {call[1] for call in calls[:2]} == {"a", "b"}
    assert calls[2] == ("Read", "c", {})
    assert [(s.step_id, s.group) for s in result.steps] == [("a", 0), ("b", 0), ("c", 1)]


async def test_mixed_plan_of_dicts_step_objects_and_groups(executor: SagaExecutor, calls: Calls) -> None:
    """Dicts, Step objects and groups mixing both may stand side by side in one plan."""
    result = await executor.run(
        [
            {"tool": "Echo", "args": {"value": 0}, "id": "d"},
            [Step(tool="Echo", args={"value": 1}, id="s"), {"tool": "Read", "id": "r"}],
            Step(tool="Sum", args={"numbers": [1, 2]}, id="sum"),
        ]
    )
    assert result.status is SagaStatus.SUCCESS
    assert [(s.step_id, s.group, s.status) for s in result.steps] == [
        ("d", 0, StepStatus.SUCCESS),
        ("s", 1, StepStatus.SUCCESS),
        ("r", 1, StepStatus.SUCCESS),
        ("sum", 2, StepStatus.SUCCESS),
    ]
    assert result.result_of("sum") == 3


async def test_step_record_group_is_the_zero_based_group_index(executor: SagaExecutor) -> None:
    """StepRecord.group is the 0-based index of the step's group in the plan."""
    result = await executor.run(
        [
            {"tool": "Read", "id": "g0"},
            [{"tool": "Read", "id": "g1a"}, {"tool": "Read", "id": "g1b"}, {"tool": "Read", "id": "g1c"}],
            [{"tool": "Read", "id": "g2"}],
            {"tool": "Read", "id": "g3"},
        ]
    )
    assert {s.step_id: s.group for s in result.steps} == {"g0": 0, "g1a": 1, "g1b": 1, "g1c": 1, "g2": 2, "g3": 3}


# -- step ids ------------------------------------------------------------------------------------------------------


async def test_explicit_ids_are_kept(executor: SagaExecutor, calls: Calls) -> None:
    """A step's explicit id is its step_id in the record and in its StepContext."""
    result = await executor.run([[{"tool": "Read", "id": "load-user"}, {"tool": "Read", "id": "load_cart"}]])
    assert [s.step_id for s in result.steps] == ["load-user", "load_cart"]
    assert sorted(call[1] for call in calls) == ["load-user", "load_cart"]


async def test_generated_ids_are_stable_and_unique(calls: Calls) -> None:
    """Steps without an id get generated ids: unique in the plan, and the same for the same plan every time."""
    plan = [{"tool": "Read"}, [{"tool": "Read"}, {"tool": "Echo"}, {"tool": "Read"}], {"tool": "Echo"}]
    first = await SagaExecutor(make_registry(calls)).run(plan)
    second = await SagaExecutor(make_registry(calls)).run(plan)
    ids = [s.step_id for s in first.steps]
    assert len(set(ids)) == len(ids) == 5
    assert all(step_id and "." not in step_id for step_id in ids)
    assert [s.step_id for s in second.steps] == ids
    assert calls[0][1] == ids[0]
    assert {call[1] for call in calls[1:4]} == set(ids[1:4])
    assert calls[4][1] == ids[4]


async def test_generated_ids_do_not_collide_with_explicit_ids(executor: SagaExecutor, calls: Calls) -> None:
    """An explicit id equal to the id a step would be generated does not make two steps share an id."""
    generated = [s.step_id for s in (await executor.run([{"tool": "Read"}, {"tool": "Read"}])).steps]
    # Give the first step, explicitly, the id the second one was generated; the second needs another one.
    result = await executor.run([{"tool": "Read", "id": generated[1]}, {"tool": "Read"}])
    ids = [s.step_id for s in result.steps]
    assert ids[0] == generated[1]
    assert len(set(ids)) == 2
    # And the other way round: a later explicit id equal to an earlier step's generated id.
    result = await executor.run([{"tool": "Read"}, {"tool": "Read", "id": generated[0]}])
    ids = [s.step_id for s in result.steps]
    assert ids[1] == generated[0]
    assert len(set(ids)) == 2


async def test_id_with_a_dot_is_refused(executor: SagaExecutor, calls: Calls) -> None:
    """An id containing '.' (the $ref path separator) is refused."""
    problems = await refused(executor, [{"tool": "Read", "id": "a.b"}])
    assert len(problems) == 1
    assert "'.'" in problems[0]
    assert calls == []


async def test_duplicate_ids_are_refused(executor: SagaExecutor, calls: Calls) -> None:
    """Two steps with the same id, in one group or in two, are refused."""
    problems = await refused(
        executor, [[{"tool": "Read", "id": "x"}, {"tool": "Read", "id": "x"}], {"tool": "Read", "id": "x"}]
    )
    assert len(problems) == 2
    assert all("duplicate" in p and "'x'" in p for p in problems)
    assert calls == []


@pytest.mark.parametrize("bad_id", ["", 5, ["a"]])
async def test_ids_that_are_not_non_empty_strings_are_refused(executor: SagaExecutor, bad_id: object) -> None:
    """An id must be a non-empty string."""
    problems = await refused(executor, [{"tool": "Read", "id": bad_id}])
    assert len(problems) == 1
    assert "'id'" in problems[0]


async def test_unknown_keys_in_a_step_dict_are_refused(executor: SagaExecutor, calls: Calls) -> None:
    """A step dict with any key besides tool, args and id is refused, naming the key."""
    problems = await refused(executor, [{"tool": "Read", "arguments": {}, "name": "x"}])
    assert len(problems) == 1
    assert "'arguments'" in problems[0]
    assert "'name'" in problems[0]
    assert calls == []


async def test_step_object_refuses_unknown_fields() -> None:
    """Step(...) with a field other than tool, args and id is a validation error."""
    with pytest.raises(ValueError, match="extra"):
        Step(tool="Read", arguments={})  # type: ignore[call-arg]


async def test_step_without_tool_is_refused(executor: SagaExecutor) -> None:
    """A step dict without "tool" is refused."""
    problems = await refused(executor, [{"args": {}}])
    assert len(problems) == 1
    assert "'tool'" in problems[0]


async def test_empty_plan_is_refused(executor: SagaExecutor) -> None:
    """A plan with no steps is refused."""
    problems = await refused(executor, [])
    assert len(problems) == 1
    assert "no steps" in problems[0]


async def test_empty_group_is_refused(executor: SagaExecutor, calls: Calls) -> None:
    """An empty group is refused, even between valid ones."""
    problems = await refused(executor, [{"tool": "Read"}, [], {"tool": "Read"}])
    assert len(problems) == 1
    assert "group 1 is empty" in problems[0]
    assert calls == []


@pytest.mark.parametrize("plan", [{"tool": "Read"}, "Read", None, 42, Step(tool="Read")])
async def test_plan_that_is_not_a_list_is_refused(executor: SagaExecutor, calls: Calls, plan: Any) -> None:
    """A plan is a list: one step dict, a string, None, a number or a lone Step is refused."""
    problems = await refused(executor, plan)
    assert len(problems) == 1
    assert "list" in problems[0]
    assert calls == []


async def test_step_that_is_neither_a_step_nor_a_group_is_refused(executor: SagaExecutor) -> None:
    """A plan item that is a string, or a group inside a group, is refused."""
    problems = await refused(executor, ["Read", [[{"tool": "Read"}]]])
    assert len(problems) == 2


# -- $ref ----------------------------------------------------------------------------------------------------------


async def test_ref_to_a_whole_result(executor: SagaExecutor, calls: Calls) -> None:
    """{"$ref": "<id>"} is replaced by that step's whole result."""
    result = await executor.run(
        [
            {"tool": "Echo", "args": {"value": {"items": [10, 20], "name": "n"}}, "id": "a"},
            {"tool": "Echo", "args": {"value": {"$ref": "a"}}, "id": "b"},
        ]
    )
    assert result.status is SagaStatus.SUCCESS
    assert calls[1] == ("Echo", "b", {"value": {"items": [10, 20], "name": "n"}})
    assert result.step("b").args == {"value": {"items": [10, 20], "name": "n"}}


async def test_ref_to_a_key_and_to_a_list_item(executor: SagaExecutor, calls: Calls) -> None:
    """{"$ref": "<id>.<key>"} gives a field of the result, "<id>.<key>.<index>" an item of a list in it."""
    result = await executor.run(
        [
            {"tool": "Echo", "args": {"value": {"items": [10, 20, 30], "meta": {"name": "n"}}}, "id": "a"},
            [
                {"tool": "Echo", "args": {"value": {"$ref": "a.meta"}}, "id": "key"},
                {"tool": "Echo", "args": {"value": {"$ref": "a.items.2"}}, "id": "index"},
                {"tool": "Echo", "args": {"value": {"$ref": "a.meta.name"}}, "id": "deep"},
                {"tool": "Sum", "args": {"numbers": {"$ref": "a.items"}}, "id": "list"},
            ],
        ]
    )
    assert result.status is SagaStatus.SUCCESS
    received = {call[1]: call[2] for call in calls[1:]}
    assert received == {
        "key": {"value": {"name": "n"}},
        "index": {"value": 30},
        "deep": {"value": "n"},
        "list": {"numbers": [10, 20, 30]},
    }


async def test_refs_nested_inside_argument_values_are_resolved(executor: SagaExecutor, calls: Calls) -> None:
    """A $ref inside a list or dict argument value is resolved in place, from any earlier group."""
    await executor.run(
        [
            {"tool": "Sum", "args": {"numbers": [1, 2]}, "id": "three"},
            {"tool": "Echo", "args": {"value": [5, 6]}, "id": "pair"},
            {"tool": "Sum", "args": {"numbers": [{"$ref": "three"}, {"$ref": "pair.1"}, 100]}, "id": "total"},
            {"tool": "Echo", "args": {"value": {"total": {"$ref": "total"}, "first": {"$ref": "pair.0"}}}, "id": "e"},
        ]
    )
    assert calls[2] == ("Sum", "total", {"numbers": [3, 6, 100]})
    assert calls[3] == ("Echo", "e", {"value": {"total": 109, "first": 5}})


async def test_ref_value_is_validated_against_the_argument_type(executor: SagaExecutor, calls: Calls) -> None:
    """A resolved $ref that does not fit the argument's type fails the step before it runs; the saga compensates."""
    result = await executor.run(
        [
            {"tool": "Echo", "args": {"value": "not numbers"}, "id": "a"},
            {"tool": "Sum", "args": {"numbers": {"$ref": "a"}}, "id": "b"},
        ]
    )
    assert result.status is SagaStatus.COMPENSATED
    assert result.step("b").status is StepStatus.FAILED
    assert result.step("a").status is StepStatus.COMPENSATED
    assert [c[0] for c in calls] == ["Echo", "undo Echo"]


async def test_dangling_ref_is_refused_before_running(executor: SagaExecutor, calls: Calls) -> None:
    """A $ref to an id that is no step of the plan is refused before anything runs."""
    problems = await refused(
        executor, [{"tool": "Echo", "id": "a"}, {"tool": "Echo", "args": {"value": {"$ref": "ghost.key"}}}]
    )
    assert len(problems) == 1
    assert "'ghost'" in problems[0]
    assert calls == []


async def test_ref_within_the_same_group_is_refused(executor: SagaExecutor, calls: Calls) -> None:
    """A $ref to a sibling in the same group (or to the step itself) is refused: it has no result yet."""
    problems = await refused(
        executor,
        [
            [
                {"tool": "Echo", "id": "a"},
                {"tool": "Echo", "args": {"value": {"$ref": "a"}}, "id": "b"},
                {"tool": "Echo", "args": {"value": {"$ref": "c"}}, "id": "c"},
            ]
        ],
    )
    assert len(problems) == 2
    assert any("'b'" in p and "'a'" in p for p in problems)
    assert any("'c'" in p for p in problems)
    assert calls == []


async def test_ref_to_a_later_group_is_refused(executor: SagaExecutor, calls: Calls) -> None:
    """A $ref to a step of a later group is refused before anything runs."""
    problems = await refused(
        executor,
        [{"tool": "Echo", "args": {"value": {"$ref": "later.x"}}, "id": "early"}, {"tool": "Echo", "id": "later"}],
    )
    assert len(problems) == 1
    assert "'later'" in problems[0]
    assert calls == []


@pytest.mark.parametrize(
    "ref", [{"$ref": ""}, {"$ref": "a..b"}, {"$ref": 5}, {"$ref": "a", "extra": 1}, {"$ref": "a."}]
)
async def test_malformed_refs_are_refused(executor: SagaExecutor, calls: Calls, ref: dict[str, Any]) -> None:
    """A $ref that is not '<id>' or '<id>.<key>...' alone in its object is refused."""
    problems = await refused(executor, [{"tool": "Echo", "id": "a"}, {"tool": "Echo", "args": {"value": ref}}])
    assert len(problems) == 1
    assert "$ref" in problems[0]
    assert calls == []


@pytest.mark.parametrize(("path", "why"), [("a.missing", "'missing'"), ("a.items.7", "'7'"), ("a.name.x", "'x'")])
async def test_ref_path_missing_at_run_time_fails_the_step_and_compensates(
    executor: SagaExecutor, calls: Calls, path: str, why: str
) -> None:
    """A $ref path absent from the actual result fails that step (naming the ref), and the saga compensates."""
    result = await executor.run(
        [
            {"tool": "Echo", "args": {"value": {"items": [1], "name": "n"}}, "id": "a"},
            [{"tool": "Echo", "args": {"value": 1}, "id": "sibling"}],
            {"tool": "Echo", "args": {"value": {"$ref": path}}, "id": "b"},
        ]
    )
    assert result.status is SagaStatus.COMPENSATED
    b = result.step("b")
    assert b.status is StepStatus.FAILED
    assert path in b.error
    assert why in b.error
    assert path in result.error
    assert [c[:2] for c in calls] == [("Echo", "a"), ("Echo", "sibling"), ("undo Echo", "sibling"), ("undo Echo", "a")]
    assert result.step("a").status is result.step("sibling").status is StepStatus.COMPENSATED


# -- PlanPolicy ----------------------------------------------------------------------------------------------------


async def test_plan_within_the_policy_runs(executor: SagaExecutor, calls: Calls) -> None:
    """A plan inside every limit of its PlanPolicy runs."""
    policy = PlanPolicy(allowed_tools={"Echo", "Send"}, max_steps=3, max_group_size=2, require_compensation=True)
    result = await executor.run(
        [[{"tool": "Echo"}, {"tool": "Echo"}], {"tool": "Send", "args": {"to": "a"}}], policy=policy
    )
    assert result.status is SagaStatus.SUCCESS
    assert len(calls) == 3


async def test_every_policy_violation_is_reported_together(executor: SagaExecutor, calls: Calls) -> None:
    """allowed_tools, max_steps, max_group_size and require_compensation refusals come in one error."""
    policy = PlanPolicy(allowed_tools=["Echo", "Read"], max_steps=3, max_group_size=2, require_compensation=True)
    plan = [
        [{"tool": "Echo", "id": "e1"}, {"tool": "Echo", "id": "e2"}, {"tool": "Read", "id": "r"}],
        {"tool": "Sum", "args": {"numbers": [1]}, "id": "s"},
    ]
    problems = await refused(executor, plan, policy=policy)
    assert len(problems) == 4
    assert any("'s'" in p and "'Sum'" in p and "not allowed" in p for p in problems)
    assert any("4 steps" in p and "at most 3" in p for p in problems)
    assert any("group 0" in p and "3 steps" in p and "at most 2" in p for p in problems)
    assert any("'r'" in p and "compensate" in p for p in problems)
    assert calls == []


async def test_policy_and_argument_problems_are_reported_together(executor: SagaExecutor) -> None:
    """Policy refusals and argument problems of the same plan come in one error."""
    problems = await refused(
        executor, [{"tool": "Sum", "args": {"numbers": "x"}, "id": "s"}], policy=PlanPolicy(allowed_tools=["Echo"])
    )
    assert len(problems) == 2


@pytest.mark.parametrize(
    "kwargs",
    [{"max_steps": 0}, {"max_group_size": -1}, {"max_steps": 1.5}, {"max_group_size": True}],
)
def test_policy_refuses_limits_that_are_not_positive_ints(kwargs: dict[str, Any]) -> None:
    """max_steps and max_group_size must be positive ints."""
    with pytest.raises(ValueError, match="must be a positive int"):
        PlanPolicy(**kwargs)


def test_policy_refuses_a_single_string_for_allowed_tools() -> None:
    """allowed_tools="Echo" (a string, not a collection of names) is a TypeError."""
    with pytest.raises(TypeError, match="allowed_tools"):
        PlanPolicy(allowed_tools="Echo")


# -- the irreversible rule -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [None, PlanPolicy(), PlanPolicy(allowed_tools=["Send", "Echo"])])
async def test_irreversible_tool_outside_the_last_group_is_refused(
    executor: SagaExecutor, calls: Calls, policy: PlanPolicy | None
) -> None:
    """An irreversible tool anywhere but the plan's last group is refused, with or without a policy."""
    plan = [[{"tool": "Send", "args": {"to": "a"}, "id": "early"}, {"tool": "Echo"}], {"tool": "Echo", "id": "last"}]
    problems = await refused(executor, plan, policy=policy)
    assert len(problems) == 1
    assert "'early'" in problems[0]
    assert "irreversible" in problems[0]
    assert calls == []


async def test_irreversible_tools_in_the_last_group_are_accepted(executor: SagaExecutor, calls: Calls) -> None:
    """Irreversible tools in the last group (alone or with others) are accepted and run."""
    result = await executor.run(
        [
            {"tool": "Echo", "id": "e"},
            [{"tool": "Send", "args": {"to": "a"}, "id": "s1"}, {"tool": "Send", "args": {"to": "b"}, "id": "s2"}],
        ]
    )
    assert result.status is SagaStatus.SUCCESS
    assert sorted(c[1] for c in calls if c[0] == "Send") == ["s1", "s2"]


async def test_irreversible_tool_alone_is_in_the_last_group(executor: SagaExecutor, calls: Calls) -> None:
    """A one-step plan of an irreversible tool is accepted: its only group is the last."""
    result = await executor.run([{"tool": "Send", "args": {"to": "a"}}])
    assert result.status is SagaStatus.SUCCESS
    assert calls[0][0] == "Send"


async def test_require_compensation_accepts_irreversible_tools_in_the_last_group(
    executor: SagaExecutor, calls: Calls
) -> None:
    """require_compensation lets an irreversible tool without compensate stand in the last group."""
    result = await executor.run(
        [{"tool": "Echo"}, {"tool": "Send", "args": {"to": "a"}}], policy=PlanPolicy(require_compensation=True)
    )
    assert result.status is SagaStatus.SUCCESS
    assert [c[0] for c in calls] == ["Echo", "Send"]


async def test_require_compensation_refuses_tools_without_compensate_anywhere(
    executor: SagaExecutor, calls: Calls
) -> None:
    """require_compensation refuses a tool without compensate that is not irreversible, even in the last group."""
    problems = await refused(
        executor,
        [{"tool": "Read", "id": "first"}, [{"tool": "Read", "id": "last"}, {"tool": "Send", "args": {"to": "a"}}]],
        policy=PlanPolicy(require_compensation=True),
    )
    assert len(problems) == 2
    assert any("'first'" in p for p in problems)
    assert any("'last'" in p for p in problems)
    assert calls == []


async def test_require_compensation_still_refuses_irreversible_tools_before_the_last_group(
    executor: SagaExecutor, calls: Calls
) -> None:
    """require_compensation does not lift the irreversible rule: Send before the last group is refused once."""
    problems = await refused(
        executor,
        [{"tool": "Send", "args": {"to": "a"}, "id": "s"}, {"tool": "Echo"}],
        policy=PlanPolicy(require_compensation=True),
    )
    assert len(problems) == 1
    assert "irreversible" in problems[0]
    assert calls == []


async def test_a_saga_id_holding_nul_is_refused_before_anything_is_stored() -> None:
    """NUL in a saga id is a PlanValidationError on every store (PostgreSQL cannot store it), nothing stored."""
    from saga_runtime import SagaExecutor
    from saga_runtime._storage import MemoryStore

    registry = ToolRegistry()

    @registry.tool
    class Noop:
        async def execute(self) -> None:
            return None

    store = MemoryStore()
    executor = SagaExecutor(registry, store=store)
    with pytest.raises(PlanValidationError, match="without NUL"):
        await executor.run([{"tool": "Noop"}], saga_id="order\x00-1")
    with pytest.raises(PlanValidationError, match="without NUL"):
        executor.saga(saga_id="chat\x00-1")
    assert await store.list_sagas() == []


async def test_a_dynamic_step_id_holding_nul_is_refused_before_the_call() -> None:
    """NUL in a dynamic call's step id is refused like a '.' in it, before the call runs."""
    from saga_runtime import SagaExecutor

    registry = ToolRegistry()
    calls: list[str] = []

    @registry.tool
    class Noop:
        async def execute(self) -> None:
            calls.append("noop")

    async with SagaExecutor(registry).saga() as saga:
        with pytest.raises(PlanValidationError, match="NUL"):
            await saga.group([("Noop", {}, "step\x00one")])
    assert calls == []
