"""An OpenAI Agents SDK agent whose tool calls are saga steps, and whose model answers are kept in the saga.

`saga_tools(saga)` gives the registry's tools as FunctionTools; `durable_model(saga, model)` records each response
of the model in the saga before the Runner acts on it. The model here is a scripted Agents SDK Model (no network,
no API key): it books a flight and asks for a rental car (that tool fails, and the error goes back to the model),
books a transfer instead, and answers. Running the same saga id again serves everything from the record: the model
is not asked and no tool runs. Needs `pip install saga-runtime[openai-agents]`.

Run it: `python examples/openai_agents_agent.py`.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from _trip import asked, effects, next_turn, registry  # the trip's tools and the scripted model

from saga_runtime import SagaExecutor, open_store


async def run_agent(saga: Any, prompt: str) -> str:
    """Run an Agents SDK Agent over the saga's tools and a durable scripted model; return its final output."""
    from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from saga_runtime.integrations.openai_agents import durable_model, saga_tools

    set_tracing_disabled(True)  # offline: no trace export

    class Scripted(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            turn = next_turn()
            usage = Usage(requests=1, input_tokens=120, output_tokens=20, total_tokens=140)
            if isinstance(turn, str):
                text = ResponseOutputText(type="output_text", text=turn, annotations=[])
                message = ResponseOutputMessage(
                    type="message", id="m", role="assistant", status="completed", content=[text]
                )
                return ModelResponse(output=[message], usage=usage, response_id=None)
            calls = [
                ResponseFunctionToolCall(
                    type="function_call", id=f"fc_{cid}", call_id=cid, name=name, arguments=json.dumps(args)
                )
                for cid, name, args in turn
            ]
            return ModelResponse(output=list(calls), usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    agent = Agent(name="travel agent", model=durable_model(saga, Scripted()), tools=saga_tools(saga))
    return str((await Runner.run(agent, prompt)).final_output)


async def main() -> None:
    """Run the agent in a saga, then run the same saga id again: everything is served from the record."""
    with tempfile.TemporaryDirectory() as folder:
        async with open_store(f"sqlite:///{Path(folder) / 'sagas.db'}") as store:
            executor = SagaExecutor(registry, store=store)
            for attempt in ("first run", "same saga id again"):
                asked.clear()
                effects.clear()
                async with executor.saga(saga_id="trip-lisbon") as saga:
                    answer = await run_agent(saga, "Book me a trip to Lisbon on 2025-06-01.")
                result = saga.result
                assert result is not None
                print(
                    f"{attempt}: saga {result.saga_id}: {result.status.value}, the model was asked {len(asked)} times"
                )
                for step in result.steps:
                    outcome = json.dumps(step.result) if step.error is None else step.error
                    print(f"  step {step.step_id} {step.tool_name}: {step.status.value} {outcome}")
                print(f"  effects: {effects or 'none (served from the record)'}")
                print(f"  answer: {answer}")


if __name__ == "__main__":
    asyncio.run(main())
