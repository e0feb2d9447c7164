"""The row codec's JSON: compact text equal to the standard library's, and values it cannot hold refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from saga_runtime import StoreError
from saga_runtime._records import SagaRow, SagaStatus, StepRow, now
from saga_runtime._storage._codec import SAGA_COLUMNS, RowCodec

from .conftest import flavour_of

VALUES: list[Any] = [
    {"n": 0},
    'quote " and é and \u2028',
    [1, 2.5, -0.0, 1e23, None, True, False],
    {"a": {"b": [{}, []]}, "c": 10**30},
    0,
]


def _step(result: Any) -> StepRow:
    return StepRow("saga-1", 0, "s0", 0, "Tool", {"n": 1}, "key-1", result=result)


@pytest.mark.parametrize("value", VALUES)
def test_json_text_is_the_standard_compact_text(value: Any) -> None:
    """A value is stored as json.dumps writes it compactly (UTF-8, no spaces), so stored text is unchanged."""
    expected = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    assert RowCodec.json_in(value, "a value") == expected
    assert RowCodec(flavour_of("postgresql")).step_params(_step(value))[9] == expected


def test_a_result_holding_itself_is_refused_by_name() -> None:
    """A cyclic result is a StoreError naming the step and the cycle, not a RecursionError."""
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(StoreError, match=r"step 's0' \(Tool\) of saga 'saga-1'.*Circular reference"):
        RowCodec(flavour_of("postgresql")).step_params(_step(cyclic))


@pytest.mark.parametrize("value", [float("nan"), object(), {1j: 2}])
def test_values_json_cannot_hold_are_refused(value: Any) -> None:
    """NaN, unknown objects and keys JSON cannot hold are StoreErrors that say to store JSON-like values."""
    with pytest.raises(StoreError, match="store JSON-like values only"):
        RowCodec.json_in(value, "a value")


def test_a_saga_row_written_again_carries_each_value_it_holds_now() -> None:
    """The JSON texts of a saga row written again are those of its values now: one replaced is written anew."""
    codec = RowCodec(flavour_of("postgresql"))
    saga = SagaRow("saga-1", "dynamic", {"function": "f", "args": {}}, "h", SagaStatus.RUNNING, now(), now())
    columns = {name: SAGA_COLUMNS.index(name) for name in ("plan", "budget", "metadata", "history")}

    def stored() -> dict[str, Any]:
        params = codec.saga_params(saga.copy())
        return {name: None if params[i] is None else json.loads(params[i]) for name, i in columns.items()}

    assert stored() == {"plan": saga.plan, "budget": None, "metadata": {}, "history": None}
    saga.plan_hash = "h2"  # only the chain head moved (a saga function's next call)
    assert stored() == {"plan": saga.plan, "budget": None, "metadata": {}, "history": None}
    saga.history = [{"kind": "takeover"}]
    saga.metadata = {"who": "ann"}
    assert stored() == {"plan": saga.plan, "budget": None, "metadata": {"who": "ann"}, "history": saga.history}
    saga.budget, saga.plan = {"max_cost": 1.0}, {"function": "f", "args": {"n": 1}}
    assert stored() == {"plan": saga.plan, "budget": saga.budget, "metadata": {"who": "ann"}, "history": saga.history}
    saga.history = []
    assert stored()["history"] is None


def test_a_plan_written_again_is_encoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A saga row written again with the same plan object reuses the plan's text; an equal new object is encoded."""
    from saga_runtime._storage import _codec

    encoded: list[Any] = []
    fast = _codec._FAST
    monkeypatch.setattr(_codec, "_FAST", lambda value, level: encoded.append(value) or fast(value, level))
    codec = RowCodec(flavour_of("postgresql"))
    plan = [[{"id": "s0", "tool": "Tool", "args": {"n": 1}}]]
    saga = SagaRow("saga-1", "plan", plan, "h", SagaStatus.RUNNING, now(), now())
    first = codec.saga_params(saga)[2]
    saga.status = SagaStatus.SUCCESS
    assert codec.saga_params(saga.copy())[2] == first
    assert sum(value is plan for value in encoded) == 1
    saga.plan = json.loads(json.dumps(plan))
    assert codec.saga_params(saga)[2] == first
    assert sum(value is saga.plan for value in encoded) == 1


def test_a_plan_text_is_held_only_while_its_saga_runs() -> None:
    """A plan's text is let go at its saga's terminal write, and a large plan's text is never held."""
    from saga_runtime._storage import _codec

    codec = RowCodec(flavour_of("postgresql"))
    plan = [[{"id": "s0", "tool": "Tool", "args": {"n": 1}}]]
    saga = SagaRow("saga-1", "plan", plan, "h", SagaStatus.RUNNING, now(), now())
    codec.saga_params(saga)
    assert id(plan) in _codec._PLAN_TEXTS
    saga.status = SagaStatus.SUCCESS
    codec.saga_params(saga)
    assert id(plan) not in _codec._PLAN_TEXTS
    large = [[{"id": "s0", "tool": "Tool", "args": {"text": "x" * (_codec._PLAN_TEXT_LARGEST + 1)}}]]
    codec.saga_params(SagaRow("saga-2", "plan", large, "h", SagaStatus.RUNNING, now(), now()))
    assert id(large) not in _codec._PLAN_TEXTS


def test_a_saga_value_json_cannot_hold_is_refused_by_name() -> None:
    """A saga row's metadata that is not JSON is a StoreError naming the saga and the column."""
    saga = SagaRow("saga-1", "plan", {"steps": []}, "h", SagaStatus.RUNNING, now(), now(), metadata={"x": object()})
    with pytest.raises(StoreError, match=r"the metadata of saga 'saga-1' cannot be stored as JSON"):
        RowCodec(flavour_of("postgresql")).saga_params(saga)
