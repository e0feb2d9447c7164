"""Tools: what a saga step calls. Knows nothing of stores, plans or the engine."""

from saga_runtime._tools._context import StepContext
from saga_runtime._tools._functions import SagaFunction
from saga_runtime._tools._lifespan import Resources
from saga_runtime._tools._registry import (
    BUILTIN_TOOLS,
    CHILD_NOT_UNDONE,
    CHILD_TOOL,
    ToolRegistry,
    builtin_tool_message,
    unknown_tool_message,
)
from saga_runtime._tools._retry import RetryPolicy
from saga_runtime._tools._secrets import Secret, secret_paths, unwrap_secrets
from saga_runtime._tools._spec import RetryScope, ToolSpec, build_spec, plain_kwargs
from saga_runtime._tools._versions import NOT_DONE, NotDone

__all__ = [
    "BUILTIN_TOOLS",
    "CHILD_NOT_UNDONE",
    "CHILD_TOOL",
    "NOT_DONE",
    "NotDone",
    "Resources",
    "RetryPolicy",
    "RetryScope",
    "SagaFunction",
    "Secret",
    "StepContext",
    "ToolRegistry",
    "ToolSpec",
    "build_spec",
    "builtin_tool_message",
    "plain_kwargs",
    "secret_paths",
    "unknown_tool_message",
    "unwrap_secrets",
]
