"""A pydantic-ai agent whose tool calls are saga steps, and whose model answers are kept in the saga.

`saga_tools(saga)` gives the registry's tools as pydantic-ai Tools; `durable_model(saga, model)` records each answer
of the model in the saga before the agent acts on it. The model here is pydantic-ai's FunctionModel, scripted (no
network, no API key): it books a flight and asks for a rental car (that tool fails, and the error goes back to the
model), books a transfer instead, and answers. Running the same saga id again serves everything from the record:
the model is not asked and no tool runs. Needs `pip install saga-runtime[pydantic-ai]`.

Run it: `python -m saga_runtime.examples pydantic_ai_agent`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from saga_runtime.examples._trip import demo, next_turn  # the trip's tools and the scripted model


async def run_agent(saga: Any, prompt: str) -> str:
    """Run a pydantic-ai Agent over the saga's tools and a durable scripted model; return its answer."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from saga_runtime.integrations.pydantic_ai import durable_model, saga_tools

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = next_turn()
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=cid) for cid, name, args in turn])

    agent = Agent(durable_model(saga, FunctionModel(model)), tools=saga_tools(saga))
    return str((await agent.run(prompt)).output)


async def main() -> None:
    """Run the agent twice on one saga id (see _trip.demo)."""
    await demo(run_agent)


if __name__ == "__main__":
    asyncio.run(main())
