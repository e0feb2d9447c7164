"""The one-walk plan path builds exactly the plan the full walk builds, and leaves every refusal to it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saga_runtime import PlanPolicy, PlanValidationError, Step, ToolRegistry
from saga_runtime._planning import Plan, build_plan
from saga_runtime._planning._plan import _fast_plan, _full_plan

registry = ToolRegistry()


@registry.tool
class Pay:
    async def execute(self, amount: float, to: str = "shop") -> float:
        return amount

    async def compensate(self, result: float | None) -> None:
        return None


@registry.tool
class Count:
    async def execute(self, n: int) -> int:
        return n

    async def compensate(self, result: int | None) -> None:
        return None


@registry.tool
class Loose:
    async def execute(self, **kwargs: Any) -> Any:
        return kwargs


@registry.tool(irreversible=True)
class Ship:
    async def execute(self, n: int = 0) -> int:
        return n


def _shape(plan: Plan) -> Any:
    """Return everything a plan holds, the fields its equality ignores (refs, kwargs) included."""
    steps = [(s.step_id, s.tool_name, s.args, s.group, s.refs, s.kwargs) for group in plan.groups for s in group]
    return steps, plan.joins, plan.to_json(), plan.digest


def _outcome(build: Any, raw: Any, policy: PlanPolicy | None = None) -> Any:
    """Return the shape of the plan `build` makes of `raw`, or the type and problems of its refusal."""
    try:
        return _shape(build(raw, registry, policy=policy))
    except PlanValidationError as exc:
        return type(exc), exc.problems


def _full(raw: Any, reg: ToolRegistry, *, policy: PlanPolicy | None = None) -> Plan:
    """Run the full walk alone."""
    return _full_plan(raw, reg, policy)


PLAIN = [{"tool": "Count", "args": {"n": i}} for i in range(10)]

VALID = [
    PLAIN,
    [{"tool": "Pay", "args": {"amount": 1.5, "to": "bank"}, "id": "pay"}, {"tool": "Count", "args": {"n": 1}}],
    [[{"tool": "Count", "args": {"n": 1}}, {"tool": "Count", "args": {"n": 2}}], {"tool": "Ship"}],
    [Step(tool="Count", args={"n": 3}, id="c"), [Step(tool="Pay", args={"amount": 2})]],
    ({"tool": "Count", "args": {"n": True}},),  # a tuple plan; pydantic turns True into 1 for kwargs only
    [{"tool": "Count", "args": {"n": 1}, "id": "a"}, {"tool": "Loose", "args": {"x": {"$ref": "a"}, "y": [1, (2,)]}}],
    [{"tool": "Loose", "args": {"v": float("nan")}}, {"tool": "Loose", "args": {"v": float("-inf")}}],
    [{"tool": "Loose", "args": {"when": {"nested": {"deep": [1, 2.5, None]}}}}],
]

# Plans the one walk hands to the full walk: it words every problem, and settles what the one walk does not.
HANDED_ON = [
    [{"tool": "Count", "args": {"n": 1}}, {"tool": "Count", "args": {"n": 2}, "id": "Count-0-0"}],  # taken id
    [{"group": [{"tool": "Count", "args": {"n": 1}}], "join": "first"}],
    [{"tool": "Count", "args": {"n": "x"}}],
    [{"tool": "Nope"}],
    [{"tool": "Ship"}, {"tool": "Count", "args": {"n": 1}}],
    [{"tool": "Count", "args": {"n": 1}, "id": "a.b"}],
    [{"tool": "Count", "args": {"n": 1}, "id": "x" * 201}],
    [{"tool": "Count", "args": {"n": 1}, "id": "\udc80"}],
    [{"tool": "Loose", "args": {"s": "\udc80"}}],
    [{"tool": "Loose", "args": {"x": {"$ref": "later"}}}, {"tool": "Count", "args": {"n": 1}, "id": "later"}],
    [{"tool": "Count", "args": {"n": 1}, "extra": 1}],
    [{"tool": "Count", "args": None}],
    [{"tool": "Pay", "args": {"amount": float("nan")}}],  # stored as null, which is no float
    [],
    [[]],
]


@pytest.mark.parametrize("raw", VALID)
def test_the_one_walk_builds_what_the_full_walk_builds(raw: Any) -> None:
    """A valid plan takes the one walk, and its plan (ids, args, refs, kwargs, JSON, digest) is the full walk's."""
    assert _fast_plan(raw, registry, None) is not None
    assert _outcome(build_plan, raw) == _outcome(_full, raw)


@pytest.mark.parametrize("raw", HANDED_ON)
def test_the_one_walk_hands_doubtful_plans_to_the_full_walk(raw: Any) -> None:
    """A plan with a problem, a join or a generated id a given id takes is left to the full walk, unchanged."""
    assert _fast_plan(raw, registry, None) is None
    assert _outcome(build_plan, raw) == _outcome(_full, raw)


def test_the_one_walk_applies_the_policy_as_the_full_walk() -> None:
    """A policy the plan breaks is worded by the full walk; one it keeps gives the full walk's plan."""
    strict = PlanPolicy(max_steps=3)
    assert _fast_plan(PLAIN, registry, strict) is None
    assert _outcome(build_plan, PLAIN, strict) == _outcome(_full, PLAIN, strict)
    loose = PlanPolicy(max_steps=10, allowed_tools={"Count"})
    assert _outcome(build_plan, PLAIN, loose) == _outcome(_full, PLAIN, loose)


def test_a_plain_plan_is_copied_not_shared() -> None:
    """The plan keeps its own argument dicts: changing the caller's plan afterwards changes nothing."""
    raw = [{"tool": "Count", "args": {"n": 1}}]
    plan = build_plan(raw, registry)
    raw[0]["args"]["n"] = 2  # type: ignore[index]
    assert plan.groups[0][0].args == {"n": 1}


scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=3))
ids = st.one_of(st.none(), st.none(), st.sampled_from(["a", "b", "Count-0-0", "Pay-1-0", "", "a.b"]))
steps = st.fixed_dictionaries(
    {"tool": st.sampled_from(["Count", "Pay", "Loose", "Ship", "Nope"])},
    optional={
        "args": st.dictionaries(st.sampled_from(["n", "amount", "to", "x"]), scalars, max_size=2),
        "id": ids,
    },
)
plans = st.lists(st.one_of(steps, st.lists(steps, max_size=3)), max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans)
def test_build_plan_matches_the_full_walk_on_any_plan(raw: Any) -> None:
    """On any plan of scalar arguments, build_plan's plan or refusal is exactly the full walk's."""
    assert _outcome(build_plan, raw) == _outcome(_full, raw)
