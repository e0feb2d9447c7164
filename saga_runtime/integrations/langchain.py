"""LangChain: tools as `StructuredTool`s run as saga steps, and a chat model whose answers are kept.

```python
async with executor.saga(saga_id="trip-7") as saga:
    tools = {tool.name: tool for tool in saga_tools(saga)}
    model = durable_model(saga, chat_model).bind_tools(list(tools.values()))
    messages = [HumanMessage("Book me a trip")]
    while (answer := await model.ainvoke(messages)).tool_calls:
        messages += [answer, *[await tools[call["name"]].ainvoke(call) for call in answer.tool_calls]]
```

Extra: `saga-runtime[langchain]`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from saga_runtime._dynamic import DynamicSaga
from saga_runtime._llm._prices import Price
from saga_runtime._planning import TokenUsage
from saga_runtime.integrations._common import ModelRecord, call_step, missing_extra, schema_of, specs_of

try:
    from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
    from langchain_core.language_models import BaseChatModel, LanguageModelInput
    from langchain_core.messages import AIMessage, BaseMessage, message_to_dict, messages_from_dict
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import Runnable
    from langchain_core.tools import BaseTool, StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from pydantic import ConfigDict, PrivateAttr
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise missing_extra("langchain-core", "langchain") from exc

__all__ = ["DurableChatModel", "durable_model", "saga_tools"]


def _tool(saga: DynamicSaga, name: str, description: str, schema: dict[str, Any]) -> StructuredTool:
    async def run(**args: Any) -> str:
        return await call_step(saga, name, args)

    return StructuredTool.from_function(coroutine=run, name=name, description=description, args_schema=schema)


def saga_tools(saga: DynamicSaga, names: Iterable[str] | None = None) -> list[StructuredTool]:
    """Return the registry's tools (or `names`) as StructuredTools, each call a step of `saga`."""
    return [_tool(saga, spec.name, spec.description or spec.name, schema_of(spec)) for spec in specs_of(saga, names)]


def _usage(message: AIMessage) -> TokenUsage:
    usage = message.usage_metadata
    if usage is None:
        return TokenUsage(0, 0)
    inputs: Mapping[str, Any] = usage.get("input_token_details") or {}
    outputs: Mapping[str, Any] = usage.get("output_token_details") or {}
    return TokenUsage(
        usage.get("input_tokens", 0),
        usage.get("output_tokens", 0),
        cached_tokens=int(inputs.get("cache_read") or 0),
        cache_write_tokens=int(inputs.get("cache_creation") or 0),
        reasoning_tokens=int(outputs.get("reasoning") or 0),
    )


def _dump(result: ChatResult) -> Any:
    generation = result.generations[0]
    return {"message": message_to_dict(generation.message), "llm_output": result.llm_output}


def _load(data: Any) -> ChatResult:
    (message,) = messages_from_dict([data["message"]])
    return ChatResult(generations=[ChatGeneration(message=message)], llm_output=data.get("llm_output"))


def _message(result: ChatResult) -> AIMessage:
    message = result.generations[0].message
    return message if isinstance(message, AIMessage) else AIMessage(content=message.content)


class DurableChatModel(BaseChatModel):
    """A LangChain chat model whose answers are recorded in a saga and replayed on re-entry."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    wrapped: BaseChatModel
    saga: Any
    prices: Mapping[str, Any] | None = None
    _record: ModelRecord = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Set up the record of the model's answers."""
        self._record = ModelRecord(
            self.saga,
            "langchain",
            dump=_dump,
            load=_load,
            usage=lambda result: _usage(_message(result)),
            model_name=lambda result: str(_message(result).response_metadata.get("model_name") or self._llm_type),
            prices=self.prices,
        )

    @property
    def _llm_type(self) -> str:
        return f"durable-{self.wrapped._llm_type}"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools as the wrapped model does, calls still going through the record."""
        try:
            bound = self.wrapped.bind_tools(tools, tool_choice=tool_choice, **kwargs)
        except NotImplementedError:  # use OpenAI's format
            return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)
        return self.bind(**getattr(bound, "kwargs", {}))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("durable_model is async: call the model with ainvoke() (or agenerate)")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        async def ask() -> ChatResult:
            return await self.wrapped._agenerate(messages, stop=stop, **kwargs)

        result: ChatResult = await self._record.respond(ask)
        return result


def durable_model(
    saga: DynamicSaga, model: BaseChatModel, *, prices: Mapping[str, Price] | None = None
) -> DurableChatModel:
    """Return `model` with answers recorded in `saga`, replayed on re-entry, charged to its budget."""
    return DurableChatModel(wrapped=model, saga=saga, prices=prices)
