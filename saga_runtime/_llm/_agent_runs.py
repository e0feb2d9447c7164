"""An LLM loop run inside a saga it is given (`LLMRunner.run(..., saga=saga)`): where each run's turns are recorded.

A saga may run several loops; each is recorded at its position among them in `metadata["llm_runs"]` (model, prompt,
API, every answer and model call, the final answer). A saga function re-run over its record meets its loops in the
same order, so the n-th loop is served the n-th run's recorded answers and asks the model only for the turns never
answered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from saga_runtime._exceptions import ReplayDivergenceError
from saga_runtime._records import canonical_json

if TYPE_CHECKING:
    from saga_runtime._dynamic import DynamicSaga

__all__ = ["RUNS_KEY", "AgentRun"]

RUNS_KEY = "llm_runs"

# How many loops each live saga object has begun: a re-run saga is a new object, counting from 0 again.
_begun: WeakKeyDictionary[DynamicSaga, int] = WeakKeyDictionary()


class AgentRun:
    """One loop's place in a saga's `llm_runs`: its recorded answers, and the writer of its record."""

    def __init__(self, saga: DynamicSaga, position: int, head: dict[str, Any], recorded: dict[str, Any]) -> None:
        self.saga, self.position, self.head = saga, position, head
        self.responses: list[Any] = list(recorded.get("llm_responses") or [])

    @classmethod
    async def begin(cls, saga: DynamicSaga, model: str, prompt: Any, api: str) -> AgentRun:
        """Return the saga's next loop: its recorded run, or a new one recorded at once (so positions hold)."""
        position = _begun.get(saga, 0)
        head = {"model": model, "prompt": prompt, "api": api}
        runs = saga.metadata.get(RUNS_KEY) or []
        recorded: dict[str, Any] = runs[position] if position < len(runs) else {}
        if recorded and canonical_json({k: recorded.get(k) for k in head}) != canonical_json(head):
            raise ReplayDivergenceError(
                f"saga {saga.saga_id!r}: LLM loop #{position + 1} runs model {model!r} ({api}) on prompt "
                f"{_brief(prompt)}, but the record holds model {recorded.get('model')!r} ({recorded.get('api')}) on "
                f"{_brief(recorded.get('prompt'))}; a resumed saga must run the same loops in the same order",
                saga_id=saga.saga_id,
            )
        _begun[saga] = position + 1
        run = cls(saga, position, head, recorded)
        if not recorded:
            await run.write()
        return run

    async def write(self, **values: Any) -> None:
        """Merge `values` into this run's record, written at once (served from the record in a replay)."""
        saga = self.saga
        runs = list(saga.metadata.get(RUNS_KEY) or [])
        if self.position < len(runs):
            runs[self.position] = {**runs[self.position], **values}
        else:  # a replay, or a saga that is not written (set_metadata writes nothing there)
            runs.extend({} for _ in range(self.position - len(runs)))
            runs.append({**self.head, **values})
        await saga.set_metadata(**{RUNS_KEY: runs})


def _brief(value: Any) -> str:
    text = canonical_json(value)
    return text if len(text) <= 80 else text[:77] + "..."
