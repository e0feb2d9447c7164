"""An OpenAI Agents SDK agent whose tool calls are saga steps, and whose model answers are kept in the saga.

`saga_tools(saga)` gives the registry's tools as FunctionTools; `durable_model(saga, model)` records each response
of the model in the saga before the Runner acts on it. The model here is a scripted Agents SDK Model (no network,
no API key): it books a flight and asks for a rental car (that tool fails, and the error goes back to the model),
books a transfer instead, and answers. Running the same saga id again serves everything from the record: the model
is not asked and no tool runs. Needs `pip install saga-runtime[openai-agents]`.

Run it: `python -m saga_runtime.examples openai_agents_agent`.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from saga_runtime.examples._trip import demo, next_turn  # the trip's tools and the scripted model


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

    tools: list[Any] = saga_tools(saga)
    agent = Agent(name="travel agent", model=durable_model(saga, Scripted()), tools=tools)
    return str((await Runner.run(agent, prompt)).final_output)


async def main() -> None:
    """Run the agent twice on one saga id (see _trip.demo)."""
    await demo(run_agent)


if __name__ == "__main__":
    asyncio.run(main())
