"""Agent frameworks running their tool calls as saga steps: one module per framework, each an optional extra.

- `saga_runtime.integrations.openai_agents` (extra `openai-agents`): the OpenAI Agents SDK.
- `saga_runtime.integrations.pydantic_ai` (extra `pydantic-ai`): pydantic-ai.
- `saga_runtime.integrations.langchain` (extra `langchain`): LangChain (langchain-core).

Each has `saga_tools(saga, names=None)` (tools whose every call is a step of the saga) and
`durable_model(saga, model)` (a model whose responses are recorded, and replayed on re-entry).
"""
