"""Reconciliation: before anything is done with a step of unknown outcome, ask its tool's `reconcile` whether the
effect happened (typically by the step's idempotency key), record the answer, and return it as a frozen
`ReconcileOutcome` (what the step runner or compensator does next; never the saga's fate).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import anyio

from saga_runtime._engine._invoker import Invoker
from saga_runtime._engine._journal import Journal
from saga_runtime._engine._verdict import RECONCILED_DONE, RECONCILED_NOT_DONE, STILL_UNKNOWN, ReconcileOutcome
from saga_runtime._exceptions import describe
from saga_runtime._records import StepRow, to_json_value
from saga_runtime._tools import NOT_DONE, ToolSpec

__all__ = ["reconcile"]

logger = logging.getLogger("saga_runtime")

_LOG_CHARS = 500  # of an error in a log line (the record keeps it whole)


async def reconcile(journal: Journal, invoker: Invoker, spec: ToolSpec, row: StepRow) -> ReconcileOutcome:
    """Ask `spec.reconcile` about an unknown step and record its answer, written at once; return what it said.

    `RECONCILED_DONE`: the effect happened (the step is SUCCESS, the answer its result); `RECONCILED_NOT_DONE`: it
    did not (`NOT_DONE`); `STILL_UNKNOWN`: reconcile raised, past its `compensation_retry` policy, or its answer was
    refused (or the tool has none).
    """
    if spec.reconcile is None:
        return STILL_UNKNOWN
    policy = spec.compensation_retry
    attempt = 0
    while True:
        attempt += 1
        journal.check_fence()
        try:
            answer = await invoker.reconcile(spec, row, attempt)
            if answer is not NOT_DONE:
                answer = await _checked(spec, answer)
        except Exception as exc:
            if policy.should_retry(exc, attempt):
                await anyio.sleep(policy.delay(attempt))
                continue
            logger.warning(
                "saga %s: step %s (%s): reconcile failed, its outcome stays unknown: %s",
                row.saga_id,
                row.step_id,
                row.tool_name,
                _one_line(exc),
            )
            return STILL_UNKNOWN
        done = answer is not NOT_DONE
        journal.reconciled(row, answer if done else None, done=done)
        await journal.flush()
        logger.info(
            "saga %s: step %s (%s) reconciled: %s",
            row.saga_id,
            row.step_id,
            row.tool_name,
            "done" if done else "not done",
        )
        return RECONCILED_DONE if done else RECONCILED_NOT_DONE


async def _checked(spec: ToolSpec, answer: Any) -> Any:
    """Return reconcile's answer checked as a result is (return annotation, `validate()`), as stored JSON."""
    if spec.result_adapter is not None:
        answer = spec.result_adapter.validate_python(answer)
    if spec.validate_result is not None:
        verdict = spec.validate_result(answer)
        if spec.validate_is_async or inspect.isawaitable(verdict):
            await verdict
    return to_json_value(answer, what="the result", tool_name=spec.name)


def _one_line(exc: BaseException) -> str:
    """Return `describe(exc)` on one line, bounded (a pydantic error spans several, with links)."""
    text = " | ".join(part.strip() for part in describe(exc).splitlines() if part.strip())
    return text if len(text) <= _LOG_CHARS else text[: _LOG_CHARS - 1] + "…"
