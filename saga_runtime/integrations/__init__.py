"""Agent frameworks running tool calls as saga steps, one module (and extra) each.

- `saga_runtime.integrations.openai_agents` (extra `openai-agents`): the OpenAI Agents SDK.
- `saga_runtime.integrations.pydantic_ai` (extra `pydantic-ai`): pydantic-ai.
- `saga_runtime.integrations.langchain` (extra `langchain`): LangChain (langchain-core).

Each has `saga_tools(saga, names=None)` (each call a saga step) and `durable_model(saga, model)` (responses
recorded, replayed on re-entry).
"""
