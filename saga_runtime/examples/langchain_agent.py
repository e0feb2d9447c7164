"""A LangChain tool-calling loop whose tool calls are saga steps, and whose model answers are kept in the saga.

`saga_tools(saga)` gives the registry's tools as StructuredTools; `durable_model(saga, model)` records each answer
of the chat model in the saga before the loop acts on it. The model here is a LangChain fake chat model, scripted
(no network, no API key): it books a flight and asks for a rental car (that tool fails, and the error goes back to
the model), books a transfer instead, and answers. Running the same saga id again serves everything from the
record: the model is not asked and no tool runs. Needs `pip install saga-runtime[langchain]`.

Run it: `python -m saga_runtime.examples langchain_agent`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from saga_runtime.examples._trip import demo, next_turn  # the trip's tools and the scripted model


async def run_agent(saga: Any, prompt: str) -> str:
    """Loop: ask the durable chat model, run its tool calls with the saga's tools, until it answers in text."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatResult

    from saga_runtime.integrations.langchain import durable_model, saga_tools

    class Scripted(FakeMessagesListChatModel):
        async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
            turn = next_turn()
            if isinstance(turn, str):
                self.responses = [AIMessage(content=turn)]
            else:
                calls = [{"name": name, "args": args, "id": cid} for cid, name, args in turn]
                self.responses = [AIMessage(content="", tool_calls=calls)]
            self.i = 0
            return self._generate(messages)

    tools = {tool.name: tool for tool in saga_tools(saga)}
    model = durable_model(saga, Scripted(responses=[])).bind_tools(list(tools.values()))
    messages: list[BaseMessage] = [HumanMessage(prompt)]
    while (answer := await model.ainvoke(messages)).tool_calls:
        messages += [answer, *[await tools[call["name"]].ainvoke(call) for call in answer.tool_calls]]
    return str(answer.content)


async def main() -> None:
    """Run the agent twice on one saga id (see _trip.demo)."""
    await demo(run_agent)


if __name__ == "__main__":
    asyncio.run(main())
