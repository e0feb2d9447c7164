"""Tools: what a saga step calls. Knows nothing of stores, plans or the engine."""

from saga_runtime._tools._context import StepContext
from saga_runtime._tools._functions import SagaFunction
from saga_runtime._tools._lifespan import Resources
from saga_runtime._tools._registry import ToolRegistry, unknown_tool_message
from saga_runtime._tools._retry import RetryPolicy
from saga_runtime._tools._secrets import Secret, secret_paths, unwrap_secrets
from saga_runtime._tools._spec import RetryScope, ToolSpec
from saga_runtime._tools._versions import NOT_DONE, NotDone

__all__ = [
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
    "secret_paths",
    "unknown_tool_message",
    "unwrap_secrets",
]
