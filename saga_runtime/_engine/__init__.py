"""Engine: runs one saga's groups, retries, timeouts, cancellation and compensation. Knows no driver."""

from saga_runtime._engine._budget import Account, Budget
from saga_runtime._engine._events import EventKind, LoggingHook, SagaEvent, SagaHook
from saga_runtime._engine._lease import LeaseKeeper, cancel_requests
from saga_runtime._engine._saga import RUNNABLE, EngineConfig, SagaEngine

__all__ = [
    "RUNNABLE",
    "Account",
    "Budget",
    "EngineConfig",
    "EventKind",
    "LeaseKeeper",
    "LoggingHook",
    "SagaEngine",
    "SagaEvent",
    "SagaHook",
    "cancel_requests",
]
