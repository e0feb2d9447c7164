"""Agent frameworks running their tool calls as saga steps: one module per framework, each an optional extra.

- `saga_runtime.integrations.openai_agents` (extra `openai-agents`): the OpenAI Agents SDK.
- `saga_runtime.integrations.pydantic_ai` (extra `pydantic-ai`): pydantic-ai.
- `saga_runtime.integrations.langchain` (extra `langchain`): LangChain (langchain-core).

Each has `saga_tools(saga, names=None)`, the registry's tools as that framework's tool objects whose every call is
one step of the dynamic saga, and `durable_model(saga, model)`, the framework's model recording each response in
the saga and serving it from the record when the saga is re-entered after a crash.
"""
