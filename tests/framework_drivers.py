"""Each agent framework driven by a scripted test model of its own kind, its tools and model from the integrations.

A script is a list of turns: a list of calls `(call_id, tool, args)` or the final text. Each driver's model keeps
what it was sent (`seen`) and how often it was asked (`asked`). Also imported by the child processes of the crash
tests (copied beside them).
"""

from __future__ import annotations

import json
from typing import Any

from saga_runtime import DynamicSaga

Turn = list[tuple[str, str, dict[str, Any]]] | str
FRAMEWORKS = ("pydantic-ai", "langchain", "openai-agents")


class Driver:
    """A framework's agent loop over a scripted model."""

    def __init__(self, script: list[Turn]) -> None:
        self.script = list(script)
        self.seen: list[str] = []

    @property
    def asked(self) -> int:
        """Return how many times the model was asked."""
        return len(self.seen)

    def next_turn(self, sent: Any) -> Turn:
        """Keep what the model was sent; return its next scripted turn."""
        self.seen.append(str(sent))
        return self.script.pop(0)

    async def run(self, saga: DynamicSaga, prompt: str) -> str:
        """Run the framework's loop in `saga`; return the final text."""
        raise NotImplementedError


class PydanticAI(Driver):
    """pydantic-ai's Agent with a FunctionModel."""

    async def run(self, saga: DynamicSaga, prompt: str) -> str:
        """Run `Agent.run` with the saga's tools and the durable model."""
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        from saga_runtime.integrations.pydantic_ai import durable_model, saga_tools

        def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            turn = self.next_turn(messages)
            if isinstance(turn, str):
                return ModelResponse(parts=[TextPart(turn)])
            return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=cid) for cid, name, args in turn])

        agent = Agent(durable_model(saga, FunctionModel(answer)), tools=saga_tools(saga))
        result = await agent.run(prompt)
        return str(result.output)


class LangChain(Driver):
    """A hand-written LangChain loop over a fake chat model."""

    async def run(self, saga: DynamicSaga, prompt: str) -> str:
        """Loop: ask the bound durable model, run its tool calls with the saga's tools, until it answers in text."""
        from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
        from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
        from langchain_core.outputs import ChatResult

        from saga_runtime.integrations.langchain import durable_model, saga_tools

        driver = self

        class Scripted(FakeMessagesListChatModel):
            async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
                turn = driver.next_turn(messages)
                if isinstance(turn, str):
                    self.responses = [AIMessage(content=turn)]
                else:
                    calls = [{"name": name, "args": args, "id": cid} for cid, name, args in turn]
                    usage = {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}
                    self.responses = [AIMessage(content="", tool_calls=calls, usage_metadata=usage)]
                self.i = 0
                return self._generate(messages)

        tools = {tool.name: tool for tool in saga_tools(saga)}
        model = durable_model(saga, Scripted(responses=[])).bind_tools(list(tools.values()))
        messages: list[BaseMessage] = [HumanMessage(prompt)]
        while (answer := await model.ainvoke(messages)).tool_calls:
            messages += [answer, *[await tools[call["name"]].ainvoke(call) for call in answer.tool_calls]]
        return str(answer.content)


class OpenAIAgents(Driver):
    """The Agents SDK's Runner with a fake Model."""

    async def run(self, saga: DynamicSaga, prompt: str) -> str:
        """Run `Runner.run` with the saga's tools and the durable model."""
        from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
        from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

        from saga_runtime.integrations.openai_agents import durable_model, saga_tools

        set_tracing_disabled(True)  # offline: no trace export
        driver = self

        class Scripted(Model):
            async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kw: Any) -> ModelResponse:
                turn = driver.next_turn(input)
                usage = Usage(requests=1, input_tokens=20, output_tokens=5, total_tokens=25)
                if isinstance(turn, str):
                    text = ResponseOutputText(type="output_text", text=turn, annotations=[])
                    message = ResponseOutputMessage(
                        type="message", id="msg", role="assistant", status="completed", content=[text]
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

        agent = Agent(name="agent", model=durable_model(saga, Scripted()), tools=saga_tools(saga))
        result = await Runner.run(agent, prompt)
        return str(result.final_output)


DRIVERS: dict[str, type[Driver]] = {"pydantic-ai": PydanticAI, "langchain": LangChain, "openai-agents": OpenAIAgents}
