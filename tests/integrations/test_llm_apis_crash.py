"""A model loop over each real SDK, its process killed mid-turn, re-entered: only unanswered turns reach the model.

The child process runs LLMRunner with the official SDK client over a scripted transport on a SQLite store, and is
killed (`os._exit`) inside the call to `d`. The re-entered run, in this process, gets a client whose script holds
only the final answer: any request for an answered turn would find no script left and fail the loop.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from crash_children import assert_only_d_done_again, kill_agent, load_tools
from llm_fakes import APIS, MODELS, FakeAPI, call_id, text_turn

from saga_runtime import LLMRunner, SagaExecutor, SagaStatus, open_store

AGENT = textwrap.dedent(
    """
    import asyncio, json, sys
    from llm_fakes import MODELS, FakeAPI, args_of, call_id, text_turn, tool_turn
    from saga_runtime import LLMRunner, SagaExecutor, open_store
    from crash_tools import note, registry

    url, api = sys.argv[1], sys.argv[2]

    def effect(n, name):
        return (call_id(api, n), "Effect", args_of(api, {"name": name}))

    SCRIPT = [
        tool_turn(api, [effect(1, "a")]),
        tool_turn(api, [effect(2, "b"), effect(3, "c")]),
        tool_turn(api, [effect(4, "d")]),
        text_turn(api, "first run"),
    ]

    class Counted(FakeAPI):
        def handle(self, request):
            note("model")
            with open("bodies.jsonl", "a") as out:
                out.write(request.content.decode() + "\\n")
            return super().handle(request)

    async def main() -> None:
        fake = Counted(api, SCRIPT)
        async with open_store(url) as store:
            executor = SagaExecutor(registry, store=store, executor_id="agent-host")
            prices = {MODELS[api]: (1.0, 2.0)}
            runner = LLMRunner(fake.client(), MODELS[api], registry, executor, api=api, prices=prices)
            await runner.run("book things", saga_id="agent-run")

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("api", APIS)
async def test_a_killed_loop_resumes_asking_the_model_only_for_the_unanswered_turn(
    api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed inside turn 3's call, the re-entered run replays turns 1-3 from the record and asks the model once."""
    url, lines = await kill_agent(tmp_path, AGENT, "llm_fakes.py", api)
    assert [line.split()[0:2] if line != "model" else ["model"] for line in lines].count(["model"]) == 3
    child_bodies = [json.loads(line) for line in (tmp_path / "bodies.jsonl").read_text().splitlines()]

    tools = load_tools(tmp_path, monkeypatch, "crash_tools.py")
    fake = FakeAPI(api, [text_turn(api, "all booked")])
    async with open_store(url) as store:
        executor = SagaExecutor(tools.registry, store=store, executor_id="agent-host")
        runner = LLMRunner(
            fake.client(), MODELS[api], tools.registry, executor, api=api, prices={MODELS[api]: (1.0, 2.0)}
        )
        result = await runner.run("book things", saga_id="agent-run")

    assert result.status is SagaStatus.SUCCESS, result.error
    assert result.metadata["answer"] == "all booked"
    assert len(fake.bodies) == 1  # only the turn never answered
    key = "input" if api == "responses" else "messages"
    sent, before = fake.bodies[0][key], child_bodies[-1][key]
    assert sent[: len(before)] == before  # the recorded conversation, item for item as the child sent it
    assert {k: v for k, v in fake.bodies[0].items() if k != key} == {
        k: v for k, v in child_bodies[-1].items() if k != key
    }
    tail = str(sent[len(before) :])  # turn 3's answer, then the result of its call
    assert call_id(api, 4) in tail
    assert """'{"result": {"name": "d"}}'""" in tail
    assert_only_d_done_again(tmp_path)
    assert [c["turn"] for c in result.metadata["llm_calls"]] == [0, 1, 2, 3]
    assert result.cost == pytest.approx(sum(c["cost"] for c in result.metadata["llm_calls"]))  # each charged once
