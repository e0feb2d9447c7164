"""Engine: runs one saga's groups, retries, timeouts, cancellation and compensation, fed by one driver.

Its shape (DESIGN.md): a transition table allows every status change (`_transitions`); the Journal is the one owner
of a saga's record: every change to it, its linking and writing (`_journal`; the store seals); cancellation lives in
one module (`_cancellation`); the Invoker calls tools (`_invoker`); the StepRunner (`_steps`) and the Compensator
(`_compensator`) receive them; `SagaEngine` (`_saga`) composes them for one saga; `Claims` and `Session`
(`_session`) hold sagas under this executor's lease; `Drives` (`_claim`) owns the sagas it drives and the one claim-
and-drive context manager every front door uses; the driver feeds the engine a plan's groups (`drive_plan`,
`_driver`) or a dynamic saga's call groups (`CallDriver`, `drive_calls`, `_calls`: a saga function's code over its
record); `Recovery` (`_recovery`) and `Actions` (`_actions`) are what front doors delegate to; the `Gate` and
`Decisions` (`_approvals`) hold steps that need a person's decision, and record the decisions.
"""

from saga_runtime._engine import _journal as journal
from saga_runtime._engine._actions import Actions
from saga_runtime._engine._approvals import HOLDABLE, Decisions
from saga_runtime._engine._budget import Account, Budget
from saga_runtime._engine._calls import WAIT_POLL, CallBody, CallDriver, Released, drive_calls, receive, send
from saga_runtime._engine._cancellation import Shelters
from saga_runtime._engine._children import driving, run_child, undo_child
from saga_runtime._engine._claim import Claim, Drives
from saga_runtime._engine._config import EngineConfig
from saga_runtime._engine._driver import Planner, PlanShape, drive_plan
from saga_runtime._engine._events import EventKind, LoggingHook, SagaEvent, SagaHook
from saga_runtime._engine._journal import adopted, asleep, take_over
from saga_runtime._engine._lineage import through_parent
from saga_runtime._engine._looks import Looks
from saga_runtime._engine._saga import RUNNABLE, SagaEngine
from saga_runtime._engine._transitions import TransitionError

__all__ = [
    "HOLDABLE",
    "RUNNABLE",
    "WAIT_POLL",
    "Account",
    "Actions",
    "Budget",
    "CallBody",
    "CallDriver",
    "Claim",
    "Decisions",
    "Drives",
    "EngineConfig",
    "EventKind",
    "LoggingHook",
    "Looks",
    "PlanShape",
    "Planner",
    "Released",
    "SagaEngine",
    "SagaEvent",
    "SagaHook",
    "Shelters",
    "TransitionError",
    "adopted",
    "asleep",
    "drive_calls",
    "drive_plan",
    "driving",
    "journal",
    "receive",
    "run_child",
    "send",
    "take_over",
    "through_parent",
    "undo_child",
]
