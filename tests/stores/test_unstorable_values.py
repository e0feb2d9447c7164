"""Values no store can hold (DESIGN.md invariant 6), on every store against real databases.

A result that cannot be stored fails its step naming the tool and the type, the step is compensated at once with
the value in hand, and the saga ends COMPENSATED: the same on every store, whichever store would have refused it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from saga_runtime import PlanValidationError, SagaExecutor, SagaStatus, StepStatus, ToolRegistry

from .conftest import Stores


def nested(depth: int) -> list[Any]:
    """Return a list nested `depth` levels deep, built without recursion."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def numbers() -> Iterator[int]:
    """Yield a few numbers (a generator: consumed once read)."""
    yield from range(3)


# name -> (the value the tool returns, what the error names as the reason)
RESULTS: dict[str, tuple[Callable[[], Any], str]] = {
    "lone surrogate in a string": (lambda: {"note": "caf\udce9"}, "lone surrogate"),
    "lone surrogate in a key": (lambda: {"caf\udce9": 1}, "lone surrogate"),
    "NUL in a string": (lambda: {"note": "a\x00b"}, "NUL"),
    "NUL in a key": (lambda: {"a\x00b": 1}, "NUL"),
    "int over 4,300 digits": (lambda: {"n": 10**4300}, "integer"),
    "int over 64 bits": (lambda: [2**64], "integer"),
    "nested 10,000 deep": (lambda: nested(10_000), "nested"),
    "nested 40 deep": (lambda: {"tree": nested(39)}, "nested"),
    "17 MB": (lambda: {"blob": "x" * 17_000_000}, "MB"),
    "generator": (numbers, "generator"),
}


def same(received: Any, raw: Any) -> bool:
    """Tell whether two values are equal, comparing nested containers without recursion."""
    pending = [(received, raw)]
    while pending:
        a, b = pending.pop()
        if type(a) is not type(b):
            return False
        if type(a) is dict:
            if list(a) != list(b):
                return False
            pending.extend((a[key], b[key]) for key in a)
        elif type(a) is list:
            if len(a) != len(b):
                return False
            pending.extend(zip(a, b, strict=True))
        elif a is not b and a != b:
            return False
    return True


@pytest.mark.parametrize("case", list(RESULTS))
async def test_an_unstorable_result_fails_its_step_and_is_undone_on_every_store(
    stores: Stores, kind: str, case: str
) -> None:
    """A result no store can hold fails its step (tool and type named), undone with the raw value, then the rest."""
    make, reason = RESULTS[case]
    raw = make()
    store = await stores.open(kind, wipe=True)
    undone: list[tuple[str, Any]] = []
    registry = ToolRegistry()

    @registry.tool
    class Charge:
        async def execute(self) -> dict[str, str]:
            return {"charge_id": "ch-1"}

        async def compensate(self, result: Any) -> None:
            undone.append(("Charge", result))

    @registry.tool
    class Fetch:
        async def execute(self):  # type: ignore[no-untyped-def]  # no annotation: the result is not validated
            return raw

        async def compensate(self, result: Any) -> None:
            undone.append(("Fetch", result))

    executor = SagaExecutor(registry, store=store)
    plan = [{"id": "charge", "tool": "Charge"}, {"id": "fetch", "tool": "Fetch"}]
    result = await executor.run(plan, saga_id="unstorable")

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    fetch = result.step("fetch")
    assert fetch.error_type == "ResultNotStorableError"
    assert "'Fetch'" in (fetch.error or "")
    assert type(raw).__qualname__ in (fetch.error or "")
    assert reason in (fetch.error or "")
    assert fetch.result is None
    assert result.step("charge").status is StepStatus.COMPENSATED
    assert [name for name, _ in undone] == ["Fetch", "Charge"]
    assert same(undone[0][1], raw)
    assert undone[1][1] == {"charge_id": "ch-1"}
    stored = await store.get_saga("unstorable")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED
    assert await store.verify_saga("unstorable")
    assert await executor.recover() == []


def make_registry(log: list[tuple[str, Any]]) -> ToolRegistry:
    """Return tools that log what they do and undo: Echo returns its value, Count takes an int."""
    registry = ToolRegistry()

    @registry.tool
    class Echo:
        async def execute(self, value: Any = None) -> Any:
            log.append(("do", value))
            return value

        async def compensate(self, result: Any) -> None:
            log.append(("undo", result))

    @registry.tool
    class Count:
        async def execute(self, n: int) -> int:
            log.append(("count", n))
            return n

    return registry


# name -> (plan, metadata, what the problem names)
BAD_PLANS: dict[str, tuple[list[Any], dict[str, Any] | None, str]] = {
    "int argument over 4,300 digits": ([{"id": "c", "tool": "Count", "args": {"n": 10**5000}}], None, "integer"),
    "int argument over 64 bits": ([{"id": "c", "tool": "Count", "args": {"n": -(2**63) - 1}}], None, "integer"),
    "NUL in an argument": ([{"id": "e", "tool": "Echo", "args": {"value": "a\x00b"}}], None, "NUL"),
    "NUL in an argument's key": ([{"id": "e", "tool": "Echo", "args": {"value": {"k\x00": 1}}}], None, "NUL"),
    "NUL in a step id": ([{"id": "e\x00", "tool": "Echo"}], None, "NUL"),
    "NUL in a group id": ([{"group": [{"id": "e", "tool": "Echo"}], "join": "first", "id": "g\x00"}], None, "NUL"),
    "NUL in metadata": ([{"id": "e", "tool": "Echo"}], {"note": "a\x00b"}, "NUL"),
    "arguments nested 30 deep": ([{"id": "e", "tool": "Echo", "args": {"value": nested(30)}}], None, "nest"),
    "a plan over 4 MB": (
        [{"id": f"e{i}", "tool": "Echo", "args": {"value": "x" * 1_000_000}} for i in range(5)],
        None,
        "MB",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PLANS))
async def test_what_no_store_can_hold_is_refused_at_plan_time_on_every_store(
    stores: Stores, kind: str, case: str
) -> None:
    """An id, argument or metadata some store cannot hold is a PlanValidationError on every store; nothing runs."""
    plan, metadata, problem = BAD_PLANS[case]
    store = await stores.open(kind, wipe=True)
    log: list[tuple[str, Any]] = []
    executor = SagaExecutor(make_registry(log), store=store)

    with pytest.raises(PlanValidationError) as caught:
        await executor.run(plan, saga_id="refused", metadata=metadata)

    assert any(problem in text for text in caught.value.problems), caught.value.problems
    assert log == []
    assert await store.get_saga("refused") is None
    assert await store.list_sagas() == []


async def test_arguments_too_deep_once_their_refs_are_resolved_fail_the_step_before_it_runs(
    stores: Stores, kind: str
) -> None:
    """A $ref placing a result too deep to store fails its step before it runs; earlier steps are undone."""
    store = await stores.open(kind, wipe=True)
    log: list[tuple[str, Any]] = []
    executor = SagaExecutor(make_registry(log), store=store)
    deep_ref: Any = {"$ref": "tree"}
    for _ in range(12):
        deep_ref = [deep_ref]
    plan = [
        {"id": "tree", "tool": "Echo", "args": {"value": nested(20)}},
        {"id": "use", "tool": "Echo", "args": {"value": deep_ref}},
    ]

    result = await executor.run(plan, saga_id="deep-ref")

    assert result.status is SagaStatus.COMPENSATED, result.describe()
    use = result.step("use")
    assert use.status is StepStatus.FAILED
    assert "nest" in (use.error or "")
    assert [kind for kind, _ in log] == ["do", "undo"]  # the step with the deep arguments never ran
    stored = await store.get_saga("deep-ref")
    assert stored is not None
    assert stored.status is SagaStatus.COMPENSATED


@pytest.mark.parametrize("saga_id", ["caf\udce9", "a\x00b"])
async def test_reading_an_id_no_store_can_hold_finds_nothing_on_every_store(store: Any, saga_id: str) -> None:
    """get_saga of an id with a lone surrogate or NUL returns None (export and verify: KeyError), never raises."""
    assert await store.get_saga(saga_id) is None
    assert await store.load_saga(saga_id) is None
    with pytest.raises(KeyError):
        await store.export_saga(saga_id)
    with pytest.raises(KeyError):
        await store.verify_saga(saga_id)
