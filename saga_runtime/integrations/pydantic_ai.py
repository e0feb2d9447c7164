"""pydantic-ai: tools as `Tool`s run as saga steps, and a model whose answers are kept.

```python
async with executor.saga(saga_id="trip-7") as saga:
    agent = Agent(durable_model(saga, model), tools=saga_tools(saga))
    result = await agent.run("Book me a trip")
```

Extra: `saga-runtime[pydantic-ai]`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from saga_runtime._dynamic import DynamicSaga
from saga_runtime._llm._prices import Price
from saga_runtime._planning import TokenUsage
from saga_runtime.integrations._common import ModelRecord, call_step, missing_extra, schema_of, specs_of

try:
    from pydantic_ai import RunContext, Tool
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
    from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.settings import ModelSettings
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise missing_extra("pydantic-ai", "pydantic-ai") from exc

__all__ = ["DurableModel", "durable_model", "saga_tools"]


def _tool(saga: DynamicSaga, name: str, description: str | None, schema: dict[str, Any]) -> Tool[Any]:
    async def run(ctx: RunContext[Any], **args: Any) -> str:
        return await call_step(saga, name, args, ctx.tool_call_id)

    return Tool.from_schema(run, name=name, description=description, json_schema=schema, takes_ctx=True)


def saga_tools(saga: DynamicSaga, names: Iterable[str] | None = None) -> list[Tool[Any]]:
    """Return the registry's tools (or `names`) as pydantic-ai Tools, each call a step of `saga`."""
    return [_tool(saga, spec.name, spec.description or None, schema_of(spec)) for spec in specs_of(saga, names)]


def _dump(response: ModelResponse) -> Any:
    return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]


def _load(data: Any) -> ModelResponse:
    (message,) = ModelMessagesTypeAdapter.validate_python([data])
    assert isinstance(message, ModelResponse)
    return message


def _usage(response: ModelResponse) -> TokenUsage:
    usage = response.usage
    return TokenUsage(
        usage.input_tokens,
        usage.output_tokens,
        cached_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.output_reasoning_tokens,
    )


class DurableModel(WrapperModel):
    """A pydantic-ai model whose responses are recorded in a saga, replayed on re-entry."""

    def __init__(self, saga: DynamicSaga, wrapped: Model | str, *, prices: Mapping[str, Price] | None = None) -> None:
        super().__init__(wrapped)
        self._record = ModelRecord(
            saga,
            "pydantic-ai",
            dump=_dump,
            load=_load,
            usage=_usage,
            model_name=lambda response: response.model_name or self.model_name,
            prices=prices,
        )

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """Return the wrapped model's response, recorded; on re-entry, the recorded one."""

        async def ask() -> ModelResponse:
            return await self.wrapped.request(messages, model_settings, model_request_parameters)

        return await self._record.respond(ask)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """Refuse streaming: use `agent.run`, not `run_stream`."""
        raise NotImplementedError("durable_model records whole responses: run the agent with agent.run()")
        yield  # type: ignore[unreachable]  # an async generator


def durable_model(saga: DynamicSaga, model: Model | str, *, prices: Mapping[str, Price] | None = None) -> DurableModel:
    """Return `model` with responses recorded in `saga`, replayed on re-entry, charged to its budget."""
    return DurableModel(saga, model, prices=prices)
