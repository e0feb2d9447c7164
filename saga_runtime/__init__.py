"""saga_runtime: an asyncio-native, durable saga executor for the side effects of agents and async apps.

Tools are classes with `execute` and `compensate`; `SagaExecutor.run(plan)` runs them in ordered groups (the
steps of a group concurrently) with retries and timeouts, writes every step ahead to a store, and undoes every
effect in reverse when the saga cannot finish.
"""

import logging as _logging

from saga_runtime import _children  # noqa: F401 (registers the built-in tool "saga.child")
from saga_runtime._admin import BulkSummary, SagaAdmin
from saga_runtime._dynamic import DynamicSaga
from saga_runtime._engine import Budget, LoggingHook, SagaEvent, SagaHook
from saga_runtime._exceptions import (
    ApprovalError,
    ApprovalPendingError,
    ApprovalRejectedError,
    BudgetExceededError,
    IdempotencyConflictError,
    LeaseLostError,
    OutcomeUnknownError,
    PlanValidationError,
    ReplayDivergenceError,
    ResultNotStorableError,
    ResultValidationError,
    SagaError,
    SagaFailedError,
    SagaInProgressError,
    SagaNotFoundError,
    SchemaVersionError,
    SecretKeyError,
    StepFailedError,
    StoreBusyError,
    StoreConnectionError,
    StoreError,
    StoreFileError,
    TurnLimitError,
    UnknownToolError,
)
from saga_runtime._executor import SagaExecutor
from saga_runtime._handle import SagaHandle
from saga_runtime._llm import LLMRunner, MockLLMClient, ModelCallEvent, tool_result_messages
from saga_runtime._planning import (
    PlanPolicy,
    Step,
    TokenUsage,
    plan_from_anthropic,
    plan_from_openai,
    usage_from_anthropic,
    usage_from_openai,
)
from saga_runtime._records import (
    ApprovalRequest,
    CancelRecord,
    PurgeReport,
    Queue,
    QueueInfo,
    RateLimit,
    SagaHold,
    SagaResult,
    SagaStatus,
    SagaSummary,
    Schedule,
    StepRecord,
    StepStatus,
    Takeover,
    VerifyResult,
    verify_export,
)
from saga_runtime._storage import MemoryStore, open_store
from saga_runtime._storage import Store as SagaStore  # the primitives and the conveniences every store offers
from saga_runtime._tools import NOT_DONE, RetryPolicy, Secret, StepContext, ToolRegistry, ToolSpec

__version__ = "0.1.0"

# A library logs, the application decides where logs go: without a handler of its own, nothing is printed.
_logging.getLogger("saga_runtime").addHandler(_logging.NullHandler())

__all__ = [  # noqa: RUF022 (plain sorted order, as tests/test_exported_members.py checks; not constants first)
    "ApprovalError",
    "ApprovalPendingError",
    "ApprovalRejectedError",
    "ApprovalRequest",
    "Budget",
    "BudgetExceededError",
    "BulkSummary",
    "CancelRecord",
    "DynamicSaga",
    "IdempotencyConflictError",
    "LLMRunner",
    "LeaseLostError",
    "LoggingHook",
    "MemoryStore",
    "MockLLMClient",
    "ModelCallEvent",
    "NOT_DONE",
    "OutcomeUnknownError",
    "PlanPolicy",
    "PlanValidationError",
    "PurgeReport",
    "Queue",
    "QueueInfo",
    "RateLimit",
    "ReplayDivergenceError",
    "ResultNotStorableError",
    "ResultValidationError",
    "RetryPolicy",
    "SagaAdmin",
    "SagaError",
    "SagaEvent",
    "SagaExecutor",
    "SagaFailedError",
    "SagaHandle",
    "SagaHold",
    "SagaHook",
    "SagaInProgressError",
    "SagaNotFoundError",
    "SagaResult",
    "SagaStatus",
    "SagaStore",
    "SagaSummary",
    "Schedule",
    "SchemaVersionError",
    "Secret",
    "SecretKeyError",
    "Step",
    "StepContext",
    "StepFailedError",
    "StepRecord",
    "StepStatus",
    "StoreBusyError",
    "StoreConnectionError",
    "StoreError",
    "StoreFileError",
    "Takeover",
    "TokenUsage",
    "ToolRegistry",
    "ToolSpec",
    "TurnLimitError",
    "UnknownToolError",
    "VerifyResult",
    "__version__",
    "open_store",
    "plan_from_anthropic",
    "plan_from_openai",
    "tool_result_messages",
    "usage_from_anthropic",
    "usage_from_openai",
    "verify_export",
]
