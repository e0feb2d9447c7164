"""A saga function's call keys: the step-id parts KeyMaker keeps across sagas give the defined keys."""

from __future__ import annotations

from saga_runtime._records import KeyMaker, idempotency_key
from saga_runtime._records._rows import _STEP_PARTS_KEPT


def test_kept_step_parts_give_each_sagas_own_keys_past_the_bound() -> None:
    """The same step ids in many sagas, more of them than the parts kept, still key as idempotency_key does."""
    ids = [f"Tool-{n}" for n in range(_STEP_PARTS_KEPT + 10)] + ['quo"te-1', "é-2"]
    for saga_id in ("one", "two"):
        keys = KeyMaker(saga_id)
        for step_id in [*ids, *ids[:5]]:
            assert keys(step_id) == idempotency_key(saga_id, step_id), (saga_id, step_id)
