"""OpenAI Agents SDK: tools as `FunctionTool`s run as saga steps, and a model whose answers are kept.

```python
async with executor.saga(saga_id="trip-7") as saga:
    agent = Agent(name="travel", model=durable_model(saga, model), tools=saga_tools(saga))
    result = await Runner.run(agent, "Book me a trip")
```

Extra: `saga-runtime[openai-agents]`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from pydantic import TypeAdapter

from saga_runtime._dynamic import DynamicSaga
from saga_runtime._llm._prices import Price
from saga_runtime._planning import TokenUsage
from saga_runtime.integrations._common import ModelRecord, call_step, missing_extra, schema_of, specs_of

try:
    from agents import FunctionTool, Model, ModelResponse
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise missing_extra("openai-agents", "openai-agents") from exc

__all__ = ["DurableModel", "durable_model", "saga_tools"]

_RESPONSE: TypeAdapter[ModelResponse] = TypeAdapter(ModelResponse)


def _tool(saga: DynamicSaga, name: str, description: str, schema: dict[str, Any]) -> FunctionTool:
    async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else exc
            return json.dumps({"error": f"refused before running: the arguments are not valid JSON ({reason})"})
        if not isinstance(args, dict):
            return json.dumps({"error": "refused before running: the arguments must be a JSON object"})
        return await call_step(saga, name, args, ctx.tool_call_id)

    # Not strict: each tool validates its own arguments.
    return FunctionTool(
        name=name, description=description, params_json_schema=schema, on_invoke_tool=invoke, strict_json_schema=False
    )


def saga_tools(saga: DynamicSaga, names: Iterable[str] | None = None) -> list[FunctionTool]:
    """Return the registry's tools (or `names`) as FunctionTools, each call a step of `saga`."""
    return [_tool(saga, spec.name, spec.description or spec.name, schema_of(spec)) for spec in specs_of(saga, names)]


def _usage(response: ModelResponse) -> TokenUsage:
    usage = response.usage
    return TokenUsage(
        usage.input_tokens,
        usage.output_tokens,
        cached_tokens=usage.input_tokens_details.cached_tokens or 0,
        cache_write_tokens=getattr(usage.input_tokens_details, "cache_write_tokens", 0) or 0,
        reasoning_tokens=usage.output_tokens_details.reasoning_tokens or 0,
    )


class DurableModel(Model):
    """An Agents SDK model whose responses are recorded in a saga, replayed on re-entry."""

    def __init__(
        self, saga: DynamicSaga, wrapped: Model, *, name: str = "", prices: Mapping[str, Price] | None = None
    ) -> None:
        self.wrapped = wrapped
        self._record = ModelRecord(
            saga,
            "openai-agents",
            dump=lambda response: _RESPONSE.dump_python(response, mode="json"),
            load=_RESPONSE.validate_python,
            usage=_usage,
            model_name=lambda _: name or str(getattr(wrapped, "model", "") or type(wrapped).__name__),
            prices=prices,
        )

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """Return the wrapped model's response, recorded; on re-entry, the recorded one."""

        async def ask() -> ModelResponse:
            return await self.wrapped.get_response(*args, **kwargs)

        return await self._record.respond(ask)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Refuse streaming: use `Runner.run`, not `run_streamed`."""
        raise NotImplementedError("durable_model records whole responses: run the agent with Runner.run()")


def durable_model(
    saga: DynamicSaga, model: Model, *, name: str = "", prices: Mapping[str, Price] | None = None
) -> DurableModel:
    """Return `model` with responses recorded in `saga`, replayed on re-entry, charged to its budget."""
    return DurableModel(saga, model, name=name, prices=prices)
