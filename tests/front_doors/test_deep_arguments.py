"""Arguments nested past the value rule's depth, or cyclic, are refused with PlanValidationError, never RecursionError.

Issue 25, finding 5: such arguments reached a recursive walk (the secret unwrapping) before the depth check, so
`run()` raised a bare RecursionError, `saga.call` raised it out of its block (which compensated), and in the LLM
runner the whole run was compensated, undoing an earlier good call, instead of the bad call being refused alone.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from cryptography.fernet import Fernet

from saga_runtime import (
    LLMRunner,
    MockLLMClient,
    PlanValidationError,
    SagaExecutor,
    SagaStatus,
    SagaStore,
    Step,
    StepStatus,
    StoreError,
    ToolRegistry,
    open_store,
    plan_from_anthropic,
)
from saga_runtime._records import MAX_JSON_DEPTH, json_problem, nesting_problem

KEY = Fernet.generate_key().decode()


class Box(pydantic.BaseModel):
    inner: Any = None


@dataclasses.dataclass
class Node:
    inner: Any = None


def deep(levels: int) -> list[Any]:
    """Return a list nested `levels` deep (a string at its bottom)."""
    value: Any = "bottom"
    for _ in range(levels):
        value = [value]
    return value  # type: ignore[no-any-return]


def cyclic_list() -> list[Any]:
    """Return a list that holds itself."""
    value: list[Any] = ["a"]
    value.append(value)
    return value


def cyclic_dict() -> dict[str, Any]:
    """Return a dict that holds itself, one level down."""
    value: dict[str, Any] = {"name": "a"}
    value["more"] = [value]
    return value


def cyclic_model() -> Box:
    """Return a pydantic model that holds itself."""
    box = Box()
    box.inner = [box]
    return box


def deep_dataclass() -> Node:
    """Return dataclasses nested 600 deep."""
    node = Node()
    for _ in range(600):
        node = Node(node)
    return node


# Each: the value, and what the refusal says about it.
DEEP = "nest more than 24 levels deep (MariaDB refuses JSON nested 32 deep), at 'data.0.0.0"
BAD = {
    "deep-600": (lambda: deep(600), DEEP),
    "deep-5000": (lambda: deep(5000), DEEP),
    "deep-25": (lambda: deep(MAX_JSON_DEPTH), DEEP),
    "cyclic-list": (cyclic_list, "holds itself at 'data.1'"),
    "cyclic-dict": (cyclic_dict, "holds itself at 'data.more.0'"),
    "cyclic-model": (cyclic_model, "holds itself at 'data.inner.0'"),
    "deep-dataclass": (deep_dataclass, "levels deep (MariaDB refuses JSON nested 32 deep), at 'data.inner.inner"),
}


class Effects:
    """What the tools did."""

    def __init__(self) -> None:
        self.executed: list[tuple[str, Any]] = []
        self.compensated: list[tuple[str, Any]] = []


def make_registry(effects: Effects) -> ToolRegistry:
    """Return tools taking any value, with and without a secret argument."""
    registry = ToolRegistry()

    @registry.tool
    class Take:
        async def execute(self, data: Any) -> str:
            effects.executed.append(("Take", data))
            return "taken"

        async def compensate(self, result: Any) -> None:
            effects.compensated.append(("Take", result))

    @registry.tool
    class Typed:
        async def execute(self, data: list[Any]) -> str:
            effects.executed.append(("Typed", data))
            return "typed"

    @registry.tool
    class Keyed:
        async def execute(self, data: Any, key: pydantic.SecretStr) -> str:
            effects.executed.append(("Keyed", data))
            return "keyed"

    return registry


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SagaStore]:
    """Yield an open store of each kind the finding was seen on."""
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/sagas.db"
    async with open_store(url) as opened:
        yield opened


@pytest.fixture
def effects() -> Effects:
    """Return the record of what the tools did."""
    return Effects()


@pytest.fixture
def executor(store: SagaStore, effects: Effects) -> SagaExecutor:
    """Return an executor (with a secret key) over the tools, on the store."""
    return SagaExecutor(make_registry(effects), store=store, secret_key=KEY)


def args_for(tool: str, data: Any) -> dict[str, Any]:
    """Return a tool's arguments carrying `data`."""
    return {"data": data, "key": "sk-1"} if tool == "Keyed" else {"data": data}


@pytest.mark.parametrize("tool", ["Take", "Typed", "Keyed"])
@pytest.mark.parametrize("bad", list(BAD))
async def test_run_refuses_deep_or_cyclic_arguments_and_stores_nothing(
    executor: SagaExecutor, store: SagaStore, effects: Effects, bad: str, tool: str
) -> None:
    """run() refuses a plan with arguments nested too deep or cyclic: PlanValidationError naming step and path."""
    make, says = BAD[bad]
    plan = [
        {"id": "good", "tool": "Take", "args": {"data": 1}},
        {"id": "bad", "tool": tool, "args": args_for(tool, make())},
    ]
    with pytest.raises(PlanValidationError) as caught:
        await executor.run(plan, saga_id="deep-1")
    (problem,) = caught.value.problems
    assert problem.startswith("step 'bad' of group 1:"), problem
    assert f"tool {tool!r}" in problem
    assert says in problem
    assert await store.get_saga("deep-1") is None
    assert effects.executed == []


@pytest.mark.parametrize(
    "shape",
    ["step-object", "join-group", "anthropic-turn"],
)
async def test_every_plan_shape_refuses_deep_arguments(
    executor: SagaExecutor, store: SagaStore, effects: Effects, shape: str
) -> None:
    """A Step, a join group and a model's turn parsed into a plan refuse 600-deep arguments the same way."""
    args = {"data": deep(600)}
    plan: Any
    if shape == "step-object":
        plan = [Step(tool="Take", args=args, id="bad")]
    elif shape == "join-group":
        plan = [{"group": [{"id": "bad", "tool": "Take", "args": args}], "join": "any"}]
    else:
        plan = plan_from_anthropic([{"type": "tool_use", "id": "bad", "name": "Take", "input": args}])
    with pytest.raises(PlanValidationError) as caught:
        await executor.run(plan, saga_id="deep-2")
    assert "step 'bad' of group 0" in str(caught.value)
    assert "'data.0.0" in str(caught.value)
    assert await store.get_saga("deep-2") is None
    assert effects.executed == []


@pytest.mark.parametrize("tool", ["Take", "Keyed"])
@pytest.mark.parametrize("bad", ["deep-600", "cyclic-dict", "cyclic-model"])
async def test_a_dynamic_call_with_deep_arguments_is_refused_and_the_block_goes_on(
    executor: SagaExecutor, store: SagaStore, effects: Effects, bad: str, tool: str
) -> None:
    """saga.call raises PlanValidationError, storing nothing; caught, the block goes on and nothing is undone."""
    make, says = BAD[bad]
    async with executor.saga(saga_id="chat-deep") as saga:
        assert await saga.call("Take", data="first") == "taken"
        with pytest.raises(PlanValidationError) as caught:
            await saga.call(tool, **args_for(tool, make()))
        assert says in str(caught.value)
        assert f"({tool!r})" in str(caught.value)
        assert await saga.call("Take", data="after") == "taken"
    result = await store.get_saga("chat-deep")
    assert result is not None
    assert result.status is SagaStatus.SUCCESS
    assert [(s.tool_name, s.args, s.status) for s in result.steps] == [
        ("Take", {"data": "first"}, StepStatus.SUCCESS),
        ("Take", {"data": "after"}, StepStatus.SUCCESS),
    ]
    assert effects.compensated == []


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH, 600, 900])
async def test_the_llm_runner_refuses_a_deep_call_alone_and_keeps_the_earlier_good_one(
    executor: SagaExecutor, store: SagaStore, effects: Effects, levels: int
) -> None:
    """A model's call nested too deep is refused alone and the model told; the earlier call stays, not undone."""
    mock = MockLLMClient(
        tool_sequence=[("Take", {"data": "first"}), ("Take", {"data": deep(levels)}), ("Take", {"data": "last"})],
        final_answer="done",
    )
    result = await LLMRunner(mock, "mock-1", executor.registry, executor).run("go", saga_id="llm-deep")

    assert result.status is SagaStatus.SUCCESS, result.error
    assert result.metadata["answer"] == "done"
    assert [(s.step_id, s.status) for s in result.steps] == [
        ("call_0_0", StepStatus.SUCCESS),
        ("call_2_0", StepStatus.SUCCESS),
    ]
    assert effects.executed == [("Take", "first"), ("Take", "last")]
    assert effects.compensated == []
    reply = json.loads(mock.requests[2]["messages"][-1]["content"])
    assert reply["error"].startswith("refused before running")
    assert DEEP in reply["error"]
    stored = await store.get_saga("llm-deep")
    assert stored is not None
    assert stored.status is SagaStatus.SUCCESS


def test_nesting_problem_agrees_with_the_value_rule_and_names_the_path() -> None:
    """nesting_problem refuses what json_problem does for depth, names where, tells a cycle from shared values."""
    for levels in (MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 5):
        dicts: Any = {"leaf": 1, "empty": {}}
        for _ in range(levels):
            dicts = {"k": dicts, "n": 2}
        for value in ({"data": deep(levels)}, dicts, [[], {"a": deep(levels - 1)}]):
            assert (nesting_problem(value) is None) == (json_problem(value) is None), (levels, value)
    problem = nesting_problem({"data": deep(10_000)})
    assert problem is not None
    assert f"at 'data{'.0' * (MAX_JSON_DEPTH - 1)}'" in problem
    shared = ["x"]
    assert nesting_problem({"a": shared, "b": [shared, shared], "c": (shared,)}) is None
    assert nesting_problem({"data": cyclic_dict()}) == (
        "it holds itself at 'data.more.0' (a cycle), which JSON cannot hold"
    )


async def test_the_llm_runner_refuses_a_cyclic_or_too_deep_prompt_before_storing_anything(
    executor: SagaExecutor, store: SagaStore
) -> None:
    """A prompt of messages that holds itself or nests too deep raises ValueError, not RecursionError; no saga."""
    message: dict[str, Any] = {"role": "user", "content": "hi"}
    message["parts"] = [message]
    mock = MockLLMClient(tool_sequence=[], final_answer="done")
    for prompt in ([message], [{"role": "user", "content": deep(600)}]):
        with pytest.raises(ValueError, match="nests more than 24 levels deep, or holds itself"):
            await LLMRunner(mock, "mock-1", executor.registry, executor).run(prompt, saga_id="llm-prompt")
    assert await store.get_saga("llm-prompt") is None
    assert mock.requests == []


async def test_an_openai_agents_call_nested_past_the_json_parser_is_refused_to_the_model() -> None:
    """An Agents SDK tool call whose JSON text nests past the parser's limit is refused, not a RecursionError."""
    from agents.tool_context import ToolContext

    from saga_runtime.integrations import openai_agents

    effects = Effects()
    async with SagaExecutor(make_registry(effects)).saga() as saga:
        (tool,) = openai_agents.saga_tools(saga, ["Take"])
        text = '{"data": ' + "[" * 100_000 + "]" * 100_000 + "}"
        context = ToolContext(context=None, tool_name="Take", tool_call_id="c1", tool_arguments=text)
        reply = json.loads(await tool.on_invoke_tool(context, text))
    assert reply == {"error": "refused before running: the arguments are not valid JSON (nested too deeply)"}
    assert effects.executed == []


@pytest.mark.parametrize("where", ["args", "result", "metadata", "plan", "cyclic-args"])
async def test_importing_a_saga_nested_too_deep_is_refused_and_stores_nothing(
    executor: SagaExecutor, store: SagaStore, where: str
) -> None:
    """import_saga refuses an export whose values nest past the value rule or hold themselves: StoreError, no saga."""
    await executor.run([{"id": "a", "tool": "Take", "args": {"data": 1}}], saga_id="exported")
    document = await store.export_saga("exported")
    document["saga"]["saga_id"] = "imported"
    for step in document["steps"]:
        step["saga_id"] = "imported"
        step["idempotency_key"] = f"imported-{step['step_id']}"
    if where == "args":
        document["steps"][0]["args"] = {"data": deep(600)}
    elif where == "result":
        document["steps"][0]["result"] = deep(600)
    elif where == "metadata":
        document["saga"]["metadata"] = {"note": deep(600)}
    elif where == "plan":
        document["saga"]["plan"] = [[{"id": "a", "tool": "Take", "args": {"data": deep(600)}}]]
    else:
        document["steps"][0]["args"] = {"data": cyclic_list()}
    with pytest.raises(StoreError, match=r"nest more than|holds itself"):
        await store.import_saga(document)
    assert await store.get_saga("imported") is None
