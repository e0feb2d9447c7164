"""Engine: runs one saga's groups, retries, timeouts, cancellation and compensation. Knows no driver.

Its shape (DESIGN.md): a transition table owns every status change (`_transitions`); the Recorder owns a saga's
rows, their sealing and writing, and fencing (`_recorder`); the Invoker calls tools (`_invoker`); the StepRunner
(`_steps`) and the Compensator (`_compensator`) receive them; `SagaEngine` (`_saga`) composes them for one saga;
`Claims` and `Session` (`_session`) hold sagas under this executor's lease for every front door; the `Gate` and
`Decisions` (`_approvals`) hold steps that need a person's decision, and record the decisions.
"""

from saga_runtime._engine._approvals import HOLDABLE, Decisions
from saga_runtime._engine._budget import Account, Budget
from saga_runtime._engine._config import EngineConfig
from saga_runtime._engine._events import EventKind, LoggingHook, SagaEvent, SagaHook
from saga_runtime._engine._saga import RUNNABLE, SagaEngine
from saga_runtime._engine._session import Claims, Session
from saga_runtime._engine._transitions import TransitionError

__all__ = [
    "HOLDABLE",
    "RUNNABLE",
    "Account",
    "Budget",
    "Claims",
    "Decisions",
    "EngineConfig",
    "EventKind",
    "LoggingHook",
    "SagaEngine",
    "SagaEvent",
    "SagaHook",
    "Session",
    "TransitionError",
]
