"""An LLM loop killed mid-run and run again with its saga id: the model is not asked again for answered turns.

The process is killed for real (`os._exit`) inside a tool call, on every SQL store; the run that re-enters the id
replays the recorded answers of the model, re-runs only the call whose outcome is unknown (with its key), and asks
the model only for the turn that was never answered.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from crash_children import EFFECT_TOOLS, load_tools

from saga_runtime import IdempotencyConflictError, LLMRunner, MockLLMClient, SagaExecutor, SagaStatus, SagaStore

from .conftest import Stores
from .test_dynamic_kill import ledger_lines, run_agent

AGENT = textwrap.dedent(
    """
    import asyncio, sys
    from saga_runtime import LLMRunner, MockLLMClient, SagaExecutor, open_store
    from tools import note, registry

    SCRIPT = [
        ("Effect", {"name": "a"}),
        [("Effect", {"name": "b"}), ("Effect", {"name": "c"})],
        ("Effect", {"name": "d"}),
    ]

    async def main() -> None:
        client = MockLLMClient(tool_sequence=SCRIPT, final_answer="first run")
        create = client.chat.completions.create

        async def counted(**request):
            note("model")
            return await create(**request)

        client.chat.completions.create = counted
        async with open_store(sys.argv[1]) as store:
            executor = SagaExecutor(registry, store=store, executor_id="agent-host")
            runner = LLMRunner(client, "mock-1", registry, executor, prices={"mock-1": (1.0, 2.0)})
            await runner.run("book things", saga_id="agent-run")

    asyncio.run(main())
    """
)


@pytest.fixture
async def killed(
    stores: Stores, sql_kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[SagaStore, Path, ModuleType]:
    """Run the agent in a child process killed inside the call to `d`; return the store, ledger and tools module."""
    store = await stores.open(sql_kind, wipe=True)
    (tmp_path / "tools.py").write_text(EFFECT_TOOLS)
    (tmp_path / "agent.py").write_text(AGENT)
    assert run_agent(tmp_path, stores.url(sql_kind), die_in="d") == 137
    lines = ledger_lines(tmp_path / "ledger.txt")
    assert _names(lines) == ["a", "b", "c", "d"]
    assert lines.count("model") == 3  # three turns answered, the last one's call killed the process
    return store, tmp_path / "ledger.txt", load_tools(tmp_path, monkeypatch)


async def test_a_reentered_llm_run_replays_the_recorded_answers_and_asks_only_for_new_turns(
    killed: tuple[SagaStore, Path, ModuleType],
) -> None:
    """Re-entered after a kill, the loop asks the model once (the unanswered turn) and repeats no finished call."""
    store, ledger, tools = killed
    client = MockLLMClient(final_answer="all booked")  # answers in text at once: only the last turn is asked
    executor = SagaExecutor(tools.registry, store=store, executor_id="agent-host")
    runner = LLMRunner(client, "mock-1", tools.registry, executor, prices={"mock-1": (1.0, 2.0)})
    result = await runner.run("book things", saga_id="agent-run")

    assert result.status is SagaStatus.SUCCESS
    assert result.metadata["answer"] == "all booked"
    assert result.metadata["turns"] == 4
    assert [call["turn"] for call in result.metadata["llm_calls"]] == [0, 1, 2, 3]
    assert len(client.requests) == 1
    sent = client.requests[0]["messages"]
    # The conversation the model sees is the recorded one: the prompt, three answered turns and their results.
    assert sent[0] == {"role": "user", "content": "book things"}
    calls = [call["function"]["arguments"] for m in sent if m["role"] == "assistant" for call in m["tool_calls"]]
    assert [json.loads(args)["name"] for args in calls] == ["a", "b", "c", "d"]
    results = [json.loads(m["content"]) for m in sent if m["role"] == "tool"]
    assert [r["result"]["name"] for r in results] == ["a", "b", "c", "d"]

    lines = ledger_lines(ledger)
    assert lines.count("model") == 3  # the re-entered run asked this test's client, not the child's
    assert _names(lines) == ["a", "b", "c", "d", "d"]
    effects = [line.split() for line in lines if line != "model"]
    keys_of_d = {key for verb, name, key in effects if verb == "do" and name == "d"}
    assert len(keys_of_d) == 1  # the unknown call ran again with its own idempotency key
    assert [e for e in effects if e[0] == "undo"] == []
    # Every model call is charged once: the three recorded turns were not charged again.
    expected_cost = sum(c["cost"] for c in result.metadata["llm_calls"])
    assert result.cost == pytest.approx(expected_cost)


async def test_a_reentered_llm_run_with_another_prompt_is_refused_and_compensates_nothing(
    killed: tuple[SagaStore, Path, ModuleType],
) -> None:
    """Re-entering an unfinished LLM saga with another prompt raises IdempotencyConflictError and changes nothing."""
    store, ledger, tools = killed
    before = ledger.read_text()
    client = MockLLMClient(final_answer="never")
    executor = SagaExecutor(tools.registry, store=store, executor_id="agent-host")
    runner = LLMRunner(client, "mock-1", tools.registry, executor)
    with pytest.raises(IdempotencyConflictError, match="same model and prompt"):
        await runner.run("something else", saga_id="agent-run")
    stored = await store.get_saga("agent-run")
    assert client.requests == []
    assert ledger.read_text() == before  # nothing ran, nothing was undone
    assert stored is not None
    assert stored.status is SagaStatus.RUNNING


def _names(lines: list[str]) -> list[str]:
    """Return the names the ledger's `do` lines ran, the concurrent pair b and c in name order."""
    names = [line.split()[1] for line in lines if line.startswith("do ")]
    return names[:1] + sorted(names[1:3]) + names[3:]
