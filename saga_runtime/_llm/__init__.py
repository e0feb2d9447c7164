"""The LLM front door: a function-calling loop as a saga, and a scripted model."""

from saga_runtime._llm._calls import tool_result_messages
from saga_runtime._llm._events import ModelCallEvent
from saga_runtime._llm._mock import MockLLMClient
from saga_runtime._llm._runner import LLMRunner

__all__ = ["LLMRunner", "MockLLMClient", "ModelCallEvent", "tool_result_messages"]
