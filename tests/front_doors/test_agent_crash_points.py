"""An agent saga function (`LLMRunner.run(..., saga=saga)`) killed at every crash point (SIGKILL, real processes).

The crash harness's invariants hold as for plans and other saga functions, and no model turn is asked twice: every
crash point lies in a tool call, after the turn that asked for it was recorded. The model is an offline stand-in
that chooses its next calls from the conversation, and writes each question it is asked (with the saga's id, which
the prompt carries) to a file the harness's processes share.
"""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga_runtime import SagaStatus
from saga_runtime.testing import check_crash_points

from .test_crash_points import TOOLS, check_common, database_url, sql_kind

__all__ = ["database_url", "sql_kind"]  # the fixtures, shared

pytestmark = pytest.mark.slow

AGENT = textwrap.dedent(
    """
    from saga_runtime import DynamicSaga, LLMRunner, SagaExecutor

    ASKED = os.path.join(os.path.dirname(__file__), "asked.jsonl")


    class Model:
        '''An OpenAI-shaped chat model: charge, then reserve and ship (one turn, or one each to 'nowhere').'''

        def __init__(self) -> None:
            self.chat = self
            self.completions = self

        async def create(self, *, model: str, messages: list, **options: object) -> dict:
            prompt = messages[0]["content"]
            saga_id, address = prompt.split(" | ")
            results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
            turn = len([m for m in messages if m["role"] == "assistant"]) + 1
            with open(ASKED, "a") as handle:
                handle.write(json.dumps([saga_id, turn]) + "\\n")
            charge = [("charge", {"order_id": "A1", "amount_cents": 500})]
            reserve = [("reserve", {"sku": "KEYBOARD", "quantity": 1})]
            ship = [("ship", {"address": address})]
            turns = [charge, reserve + ship] if address != "nowhere" else [charge, reserve, ship]
            if turn <= len(turns):
                calls = [
                    {"id": f"t{turn}-{name}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}
                    for name, args in turns[turn - 1]
                ]
                message = {"role": "assistant", "content": None, "tool_calls": calls}
                finish = "tool_calls"
            else:
                failed = any("error" in result for result in results)
                message = {"role": "assistant", "content": "FAILED" if failed else "shipped"}
                finish = "stop"
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            return {"model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage}


    runner = LLMRunner(Model(), "stand-in", registry, SagaExecutor(registry))


    @registry.saga
    async def agent(saga: DynamicSaga, address: str) -> str:
        answer = await runner.run(f"{saga.saga_id} | {address}", saga=saga, max_turns=6)
        if answer == "FAILED":
            raise RuntimeError("the agent could not ship")
        return str(answer)
    """
)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Write the tools and the agent in a module importable here and in the harness's children; return its folder."""
    name = f"crash_agent_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / f"{name}.py").write_text(TOOLS + AGENT)
    monkeypatch.syspath_prepend(str(folder))
    (folder / "module").write_text(name)
    yield folder
    sys.modules.pop(name, None)


@pytest.mark.parametrize("address", ["Seoul", "nowhere"])
async def test_every_crash_point_of_an_agent_is_resumed_with_no_turn_asked_twice(
    database_url: str, tools: Path, address: str
) -> None:
    """An agent killed at each crash point is resumed by recovery, ends as its code says, and asks each turn once."""
    module = (tools / "module").read_text()
    report = await check_crash_points(
        f"{module}:registry", "agent", args={"address": address}, url=database_url, lease_timeout=0.3, concurrency=4
    )
    final = SagaStatus.SUCCESS if address == "Seoul" else SagaStatus.COMPENSATED
    check_common(report, 6 if address == "Seoul" else 10, final)
    asked = Counter(tuple(json.loads(line)) for line in (tools / "asked.jsonl").read_text().splitlines())
    turns = 3 if address == "Seoul" else 4
    for point in [report.baseline, *(p.result for p in report.points)]:
        assert point is not None
        assert [asked[(point.saga_id, turn)] for turn in range(1, turns + 1)] == [1] * turns, point.saga_id
        assert point.metadata["llm_runs"][0]["turns"] == turns
