"""Agent frameworks (pydantic-ai, LangChain, the OpenAI Agents SDK) running their tool calls as saga steps.

Each framework runs with a scripted test model of its own kind (`framework_drivers`): its calls become steps, a
tool's failure reaches the model, a budget ends the run and undoes it, and a process killed mid-loop is resumed
without asking the model again for the turns it answered.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest
from crash_children import assert_only_d_done_again, kill_agent, load_tools
from framework_drivers import DRIVERS, FRAMEWORKS
from shop_tools import Ledger, shop_registry

from saga_runtime import (
    Budget,
    SagaExecutor,
    SagaStatus,
    StepStatus,
    ToolRegistry,
    UnknownToolError,
    open_store,
)


@pytest.fixture
def registry(ledger: Ledger) -> ToolRegistry:
    """Return tools that book, fail and spend, reporting to the ledger."""
    return shop_registry(ledger, "Book", "Fail", "Spend")


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_the_frameworks_calls_are_saga_steps_and_a_failure_is_told_to_the_model(
    framework: str, registry: ToolRegistry, ledger: Ledger
) -> None:
    """Each call the framework makes runs as a step; a failed one reaches the model as an error, the run goes on."""
    driver = DRIVERS[framework](
        [[("c1", "Book", {"item": "desk"}), ("c2", "Fail", {"reason": "sold out"})], "Desk booked; the rest sold out."]
    )
    executor = SagaExecutor(registry)
    async with executor.saga(saga_id="agent") as saga:
        answer = await driver.run(saga, "Book a desk")

    assert answer == "Desk booked; the rest sold out."
    result = saga.result
    assert result is not None
    assert result.status is SagaStatus.SUCCESS, result.error
    assert [(s.tool_name, s.status) for s in result.steps] == [
        ("Book", StepStatus.SUCCESS),
        ("Fail", StepStatus.FAILED),
    ]
    assert ledger.executed == [("Book", "desk"), ("Fail", "sold out")]
    assert driver.asked == 2
    assert "ValueError: sold out" in driver.seen[1]  # the failure went back to the model
    assert '{"booked": "desk"}' in driver.seen[1].replace("\\", "")
    assert len(result.metadata["model_responses"]) == 2  # each answer recorded in the saga
    assert {r["framework"] for r in result.metadata["model_responses"]} == {framework}


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_crossed_budget_ends_the_run_and_undoes_it(
    framework: str, registry: ToolRegistry, ledger: Ledger
) -> None:
    """A tool charge crossing the Budget is no error for the model: the run ends, and the booking is undone."""
    driver = DRIVERS[framework](
        [[("c1", "Book", {"item": "desk"})], [("c2", "Spend", {"usd": 5.0})], [("c3", "Book", {"item": "lamp"})], "x"]
    )
    executor = SagaExecutor(registry)
    with pytest.raises(Exception) as raised:  # the framework may wrap it; its cause is the budget
        async with executor.saga(saga_id="agent", budget=Budget(max_cost=1.0)) as saga:
            await driver.run(saga, "Book a desk")

    chain = [raised.value, raised.value.__cause__, raised.value.__context__]
    assert any("BudgetExceededError" in repr(e) or "over budget" in str(e) for e in chain if e is not None)
    assert saga.result is not None
    assert saga.result.status is SagaStatus.COMPENSATED
    assert ledger.executed == [("Book", "desk"), ("Spend", 5.0)]
    assert ledger.compensated == [("Book", {"booked": "desk"})]
    assert driver.asked == 2  # the model was not asked again once the budget was crossed


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_durable_model_charges_the_models_tokens(framework: str, registry: ToolRegistry) -> None:
    """durable_model charges each response's tokens to the saga, so Budget(max_tokens=...) bounds the model."""
    driver = DRIVERS[framework]([[("c1", "Book", {"item": "desk"})], [("c2", "Book", {"item": "lamp"})], "done"])
    executor = SagaExecutor(registry)
    with pytest.raises(Exception):  # noqa: B017 - the framework may wrap the BudgetExceededError
        async with executor.saga(saga_id="agent", budget=Budget(max_tokens=1)) as saga:
            await driver.run(saga, "Book")
    assert saga.result is not None
    assert saga.result.status is SagaStatus.COMPENSATED
    assert "BudgetExceededError" in (saga.result.error or "")
    assert driver.asked == 1  # the first answer's tokens crossed the cap: its call never ran
    assert saga.result.steps == []
    assert saga.result.tokens > 1


AGENT = textwrap.dedent(
    """
    import asyncio, sys
    from framework_drivers import DRIVERS
    from saga_runtime import SagaExecutor, open_store
    from crash_tools import note, registry

    SCRIPT = [
        [("c1", "Effect", {"name": "a"})],
        [("c2", "Effect", {"name": "b"}), ("c3", "Effect", {"name": "c"})],
        [("c4", "Effect", {"name": "d"})],
        "first run",
    ]

    class Counted(DRIVERS[sys.argv[2]]):
        def next_turn(self, sent):
            note("model")
            return super().next_turn(sent)

    async def main() -> None:
        async with open_store(sys.argv[1]) as store:
            executor = SagaExecutor(registry, store=store, executor_id="agent-host")
            async with executor.saga(saga_id="agent-run") as saga:
                await Counted(SCRIPT).run(saga, "book things")

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_killed_run_resumes_without_asking_the_model_again_for_answered_turns(
    framework: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed inside turn 3's call, the re-entered run is served turns 1-3 from the record and asks the model once."""
    url, before = await kill_agent(tmp_path, AGENT, "framework_drivers.py", framework)
    assert before.count("model") == 3

    tools = load_tools(tmp_path, monkeypatch, "crash_tools.py")
    driver = DRIVERS[framework](["all booked"])  # any answered turn asked again would get this text
    async with open_store(url) as store:
        executor = SagaExecutor(tools.registry, store=store, executor_id="agent-host")
        async with executor.saga(saga_id="agent-run") as saga:
            answer = await driver.run(saga, "book things")

    assert answer == "all booked"
    assert driver.asked == 1  # only the turn never answered
    assert saga.result is not None
    assert saga.result.status is SagaStatus.SUCCESS, saga.result.error
    assert_only_d_done_again(tmp_path)
    assert len(saga.result.metadata["model_responses"]) == 4


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
        ("langchain", "langchain_core", "langchain"),
        ("openai_agents", "agents", "openai-agents"),
    ],
)
def test_a_missing_framework_says_which_extra_to_install(
    module: str, framework: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Importing an integration whose framework is not installed raises ImportError naming the extra."""
    for name in [m for m in sys.modules if m == framework or m.startswith(f"{framework}.")] or [framework]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed: importing it raises ImportError
    monkeypatch.delitem(sys.modules, f"saga_runtime.integrations.{module}", raising=False)
    with pytest.raises(ImportError, match=rf"install saga-runtime\[{extra}\]"):
        importlib.import_module(f"saga_runtime.integrations.{module}")


async def test_saga_tools_give_the_registry_schemas_and_only_the_tools_named(registry: ToolRegistry) -> None:
    """saga_tools(saga, names) gives only the tools named, with the registry's descriptions and JSON schemas."""
    from saga_runtime.integrations import langchain, openai_agents, pydantic_ai

    async with SagaExecutor(registry).saga() as saga:
        schema = registry.to_anthropic_tools()[0]["input_schema"]
        (lc,) = langchain.saga_tools(saga, ["Book"])
        (oa,) = openai_agents.saga_tools(saga, ["Book"])
        (pa,) = pydantic_ai.saga_tools(saga, ["Book"])
        assert (lc.name, lc.description, lc.args_schema) == ("Book", "Book an item.", schema)
        assert (oa.name, oa.description, oa.params_json_schema) == ("Book", "Book an item.", schema)
        assert (pa.name, pa.description) == ("Book", "Book an item.")
        assert [t.name for t in langchain.saga_tools(saga)] == ["Book", "Fail", "Spend"]
        with pytest.raises(UnknownToolError, match="Teleport"):
            pydantic_ai.saga_tools(saga, ["Teleport"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_models_answer_holding_a_secret_is_recorded_encrypted(framework: str) -> None:
    """With tools that take secrets, each recorded model response is kept encrypted, and a re-entered run is
    served it from the record; the tool gets the real value."""
    from cryptography.fernet import Fernet
    from pydantic import SecretStr

    from saga_runtime import MemoryStore

    seen: list[str] = []
    registry = ToolRegistry()

    class Login:
        """Log in with a password."""

        async def execute(self, user: str, password: SecretStr) -> str:
            seen.append(password.get_secret_value())
            return f"hello {user}"

    Login.execute.__annotations__["password"] = SecretStr  # resolvable without this module's globals
    registry.tool(Login)
    store = MemoryStore()
    executor = SagaExecutor(registry, store=store, secret_key=Fernet.generate_key().decode())
    script = [[("c1", "Login", {"user": "ann", "password": "hunter2-plain"})], "Logged in."]
    async with executor.saga(saga_id="agent") as saga:
        assert await DRIVERS[framework](script).run(saga, "Log me in") == "Logged in."
    assert seen == ["hunter2-plain"]
    assert "hunter2-plain" not in repr(store._sagas["agent"]) + repr(store._steps["agent"])
    assert saga.result is not None
    responses = saga.result.metadata["model_responses"]
    assert [set(r["response"]) for r in responses] == [{"$secret"}, {"$secret"}]  # each kept encrypted
    replayed = DRIVERS[framework](script)
    async with executor.saga(saga_id="agent") as again:  # finished: served from the record
        assert await replayed.run(again, "Log me in") == "Logged in."
    assert replayed.asked == 0
