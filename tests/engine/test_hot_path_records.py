"""The lean in-memory path keeps the records as they were: seal bytes, keys, canonical JSON and result models."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from saga_runtime import SagaExecutor, SagaResult, SagaStatus, StepRecord, StepStatus, ToolRegistry
from saga_runtime._records import (
    KeyMaker,
    SagaRow,
    Sealer,
    StepRow,
    canonical_json,
    idempotency_key,
    idempotency_keys,
    identity_hash,
    key_parts,
    now,
    planned_rows,
    saga_seal,
    seal,
    snapshots,
    verify_rows,
)

registry = ToolRegistry()


@registry.tool
class Echo:
    async def execute(self, value: Any) -> Any:
        return value

    async def compensate(self, result: Any) -> None:
        return None


def _normal(value: Any) -> Any:
    if type(value) is dict:
        return {key: _normal(item) for key, item in value.items()}
    if type(value) is list:
        return [_normal(item) for item in value]
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def _reference_seal(row: StepRow, key: bytes | None) -> str:
    """The seal as first defined: SHA-256 (or HMAC) of one canonical JSON array of the row's fields."""
    times = [None if t is None else t.isoformat() for t in (row.started_at, row.finished_at, row.compensated_at)]
    content = json.dumps(
        [
            row.saga_id,
            row.seq,
            row.step_id,
            row.group,
            row.tool_name,
            _normal(row.args),
            row.idempotency_key,
            row.status.value,
            row.attempts,
            _normal(row.result),
            row.error,
            row.error_type,
            *times,
            row.compensation_error,
            row.compensation_attempts,
            row.prev_hash,
        ],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode()
    if key is None:
        return hashlib.sha256(content).hexdigest()
    return "hmac:" + hmac.new(key, content, hashlib.sha256).hexdigest()


def _rows() -> list[StepRow]:
    """Rows in every shape the engine writes: pending, running, finished, failed, compensated; odd text too."""
    started = now()
    other_offset = datetime(2024, 5, 17, 11, 30, tzinfo=timezone(timedelta(hours=2)))
    return [
        StepRow("saga-é", 0, 'step "0"', 0, "Echo", {"value": 2.0, "nested": {"b": [1.0, "x"], "a": None}}, "k0"),
        StepRow("saga-é", 1, "s1", 1, "Echo", {}, "k1", StepStatus.RUNNING, 1, started_at=started),
        StepRow(
            "saga-é",
            2,
            "s2",
            1,
            "Echo",
            {"value": "\u2028"},
            "k2",
            StepStatus.SUCCESS,
            2,
            {"r": 1.5, "z": [3.0]},
            started_at=started,
            finished_at=started,
        ),
        StepRow(
            "saga-é",
            3,
            "s3",
            2,
            "Echo",
            {"value": 1},
            "k3",
            StepStatus.FAILED,
            3,
            None,
            "boom\n",
            "RuntimeError",
            other_offset,
            other_offset,
        ),
        StepRow(
            "saga-é",
            4,
            "s4",
            2,
            "Echo",
            {"value": True},
            "k4",
            StepStatus.COMPENSATION_FAILED,
            1,
            "text",
            None,
            None,
            started,
            started,
            None,
            "refund refused",
            2,
        ),
        StepRow(
            "saga-é",
            5,
            "s5",
            3,
            "Echo",
            {"value": 10**30},
            "k5",
            StepStatus.COMPENSATED,
            1,
            7,
            None,
            None,
            started,
            started,
            started + timedelta(seconds=1),
            None,
            1,
        ),
    ]


@pytest.mark.parametrize("key", [None, b"signing-key"])
def test_seals_keep_their_byte_format(key: bytes | None) -> None:
    """A seal is still SHA-256 (HMAC-SHA-256 with a key) of the row's canonical JSON array, however it is made."""
    sealer = Sealer(key)
    for row in _rows():
        link = identity_hash(None, row.saga_id)
        seal(row, link, key)
        assert row.hash == _reference_seal(row, key)
        fresh = row.hash
        sealer.seal(row, link)
        assert row.hash == fresh
        sealer.seal(row, link)  # again, from the hash state kept for the row
        assert row.hash == fresh


def test_a_row_resealed_after_each_change_verifies() -> None:
    """The sealer's kept state never hides a change: new status, new result, new or edited-in-place arguments."""
    sealer = Sealer(None)
    rows = _rows()[:1]
    row = rows[0]
    link = identity_hash(None, row.saga_id)
    sealer.seal(row, link)
    row.status, row.attempts, row.started_at = StepStatus.RUNNING, 1, now()
    sealer.seal(row, link)
    assert row.hash == _reference_seal(row, None)
    row.args["value"] = 3  # a tool that changed its own arguments in place
    sealer.seal(row, link)
    assert row.hash == _reference_seal(row, None)
    row.args = {"value": "resolved"}  # a $ref resolved: a new dict
    row.status, row.result, row.finished_at = StepStatus.SUCCESS, {"ok": 1}, now()
    sealer.seal(row, link)
    assert row.hash == _reference_seal(row, None)


def test_identity_hash_and_idempotency_key_keep_their_definition() -> None:
    """Chain links and idempotency keys are the hashes of the same JSON text as before, for any id."""
    for saga_id, step_id in [("s", "a"), ("é\u2028", 'quo"te\\'), ("\ud800", "x"), ("", "-")]:
        expected = hashlib.sha256(json.dumps([saga_id, step_id]).encode()).hexdigest()
        assert idempotency_key(saga_id, step_id) == f"sr-{expected[:40]}"
        assert idempotency_keys(saga_id, [step_id, "other"]) == [
            idempotency_key(saga_id, step_id),
            idempotency_key(saga_id, "other"),
        ]
        # A plan's kept parts (key_parts) give the same keys, and so does a saga function's KeyMaker.
        assert idempotency_keys(saga_id, [step_id, "other"], key_parts([step_id, "other"])) == [
            idempotency_key(saga_id, step_id),
            idempotency_key(saga_id, "other"),
        ]
        keys = KeyMaker(saga_id)
        assert [keys(step_id), keys("other"), keys(step_id)] == [
            idempotency_key(saga_id, step_id),
            idempotency_key(saga_id, "other"),
            idempotency_key(saga_id, step_id),
        ]
    for row in _rows():
        parts = [row.saga_id, row.seq, row.step_id, row.group, row.tool_name, row.idempotency_key]
        text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert identity_hash(row, row.saga_id) == hashlib.sha256(text.encode()).hexdigest()


def test_canonical_json_matches_json_dumps_and_its_errors() -> None:
    """canonical_json writes what json.dumps writes (sorted, compact, unescaped) and refuses what it refuses."""
    value = {"b": [1, 2.5, 1e100, "é\u2028", None, True], "a": {"z": {}, "y": []}}
    assert canonical_json(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    with pytest.raises(ValueError, match="Out of range float"):
        canonical_json({"x": float("nan")})
    with pytest.raises(TypeError, match="not JSON serializable"):
        canonical_json({"x": object()})


async def test_a_result_is_the_model_pydantic_would_build() -> None:
    """SagaResult and StepRecord built from rows equal, field for field, the models pydantic validates."""
    result = await SagaExecutor(registry).run([{"id": "a", "tool": "Echo", "args": {"value": [1, "x"]}}])
    assert isinstance(result, SagaResult)
    assert all(isinstance(step, StepRecord) for step in result.steps)
    assert SagaResult.model_validate(result.model_dump()) == result
    assert result.model_fields_set == set(SagaResult.model_fields)
    assert result.steps[0].model_fields_set == set(StepRecord.model_fields)
    assert result.to_dict()["steps"][0]["result"] == [1, "x"]
    assert result.model_copy(update={"error": "x"}).error == "x"
    with pytest.raises(ValueError, match="frozen"):
        result.steps[0].status = StepStatus.FAILED  # type: ignore[misc]


async def test_records_of_a_run_verify_with_and_without_a_key() -> None:
    """Rows the engine sealed as it ran verify, and one edited afterwards does not."""
    executor = SagaExecutor(registry)
    plan = [{"id": f"s{i}", "tool": "Echo", "args": {"value": i * 1.0}} for i in range(4)]
    result = await executor.run(plan, saga_id="v")
    assert result.ok
    assert await executor.store.verify_saga("v")
    loaded = await executor.store.load_saga("v")
    assert loaded is not None
    saga, rows = loaded
    assert verify_rows(saga, rows, None)
    rows[2].finished_at = datetime.now(UTC)
    assert not verify_rows(saga, rows, None)


async def test_a_saga_row_is_last_updated_at_its_end_after_every_step() -> None:
    """An ended saga's row is last updated when it finished, never before a step's time; steps start in order."""
    executor = SagaExecutor(registry)
    plan = [{"id": f"s{i}", "tool": "Echo", "args": {"value": i}} for i in range(3)]
    result = await executor.run(plan, saga_id="t")
    loaded = await executor.store.load_saga("t")
    assert loaded is not None
    saga, rows = loaded
    end = saga.finished_at
    assert end is not None
    assert saga.updated_at >= end
    times = [(row.started_at, row.finished_at) for row in sorted(rows, key=lambda row: row.seq)]
    flat = [saga.created_at, *(moment for pair in times for moment in pair if moment is not None), end]
    assert len(flat) == 2 + 2 * len(plan)
    assert flat == sorted(flat)  # created, then each step's start and finish in step order, then the end
    assert result.finished_at == saga.finished_at


async def test_a_group_saga_ended_in_memory_is_stored_as_its_result_says() -> None:
    """The end's write of a group saga stores each step as its result records it; the saga verifies and is returned
    as stored when run again."""
    executor = SagaExecutor(registry)
    plan = [[{"id": f"s{i}", "tool": "Echo", "args": {"value": i}} for i in range(20)]]
    result = await executor.run(plan, saga_id="g")
    assert result.ok
    assert await executor.store.verify_saga("g")
    loaded = await executor.store.load_saga("g")
    assert loaded is not None
    stored = {row.step_id: row for row in loaded[1]}
    for record in result.steps:
        row = stored[record.step_id]
        assert (row.status, row.attempts, row.result, row.finished_at) == (
            record.status,
            record.attempts,
            record.result,
            record.finished_at,
        )
    assert await executor.run(plan, saga_id="g") == result


def _reference_saga_seal(saga: SagaRow, key: bytes | None) -> str:
    """The saga row's seal as first defined: SHA-256 (or HMAC) of one canonical JSON array of its fields."""

    def instant(value: datetime | None) -> str | None:
        if value is None:
            return None
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).isoformat(timespec="microseconds")

    plan = hashlib.sha256(canonical_json(_normal(saga.plan)).encode()).hexdigest()
    parts = ["saga", saga.saga_id, saga.kind, plan, saga.plan_hash, saga.status.value, _normal(saga.budget)]
    parts += [repr(float(saga.cost)), saga.tokens, _normal(saga.metadata), saga.error]
    parts += [instant(saga.created_at), instant(saga.finished_at), saga.parked_from and saga.parked_from.value]
    content = canonical_json(parts).encode()
    if key is None:
        return hashlib.sha256(content).hexdigest()
    return "hmac:" + hmac.new(key, content, hashlib.sha256).hexdigest()


def _saga_rows() -> list[SagaRow]:
    """Saga rows in every shape: running, finished, parked; naive, UTC and other-offset times; odd values."""
    at = now()
    naive = datetime(2024, 5, 17, 11, 30, 0, 0)
    offset = datetime(2024, 5, 17, 11, 30, 5, 120, tzinfo=timezone(timedelta(hours=-3)))
    plan = [[{"id": "a", "tool": "Echo", "args": {"value": 2.0}}], {"group": [], "join": "first"}]
    return [
        SagaRow("s", "plan", plan, "h", SagaStatus.RUNNING, at, at),
        SagaRow("s-é\u2028", "dynamic", None, None, SagaStatus.SUCCESS, naive, at, finished_at=offset),
        SagaRow(
            's"q',
            "plan",
            plan,
            "h",
            SagaStatus.PARKED,
            offset,
            at,
            budget={"max_cost": 2.0, "charges": 1},
            cost=1.5,
            tokens=7,
            metadata={"who": "ann", "n": [1.0, {"x": None}]},
            error="boom\n",
            parked_from=SagaStatus.COMPENSATING,
        ),
        SagaRow("t", "plan", [], "h", SagaStatus.COMPENSATED, at, at, cost=float("nan"), tokens=True, finished_at=at),
    ]


@pytest.mark.parametrize("key", [None, b"signing-key"])
def test_saga_seals_keep_their_byte_format(key: bytes | None) -> None:
    """A saga row's seal is still the hash of its canonical JSON array, times in UTC, its plan by digest."""
    for saga in _saga_rows():
        assert saga_seal(saga, key) == _reference_saga_seal(saga, key)
        assert saga_seal(saga, key, cached=True) == _reference_saga_seal(saga, key)


@pytest.mark.parametrize("kind", [StepRow, SagaRow])
def test_a_row_copy_holds_every_field_of_the_row(kind: type[Any]) -> None:
    """A row's copy (built slot by slot) holds every field's value: a field added to the row is copied too."""
    fields = dataclasses.fields(kind)
    values = {f.name: {"v": i} if f.name in ("metadata", "history") else f"value-{i}" for i, f in enumerate(fields)}
    if kind is SagaRow:
        values["history"] = [{"v": 1}]
    row = kind(**values)
    copy = row.copy()
    assert copy is not row
    assert type(copy) is kind
    for f in fields:
        assert getattr(copy, f.name) == values[f.name], f.name
    if kind is SagaRow:
        assert copy.metadata is not row.metadata  # containers of its own
        assert copy.history is not row.history


def test_planned_rows_are_the_rows_the_constructor_builds() -> None:
    """`planned_rows` (built slot by slot) equal the StepRows the constructor builds, each field set, `seq` by place."""

    @dataclasses.dataclass
    class Planned:
        step_id: str
        group: int
        tool_name: str
        version: str

    planned = [Planned("s0", 0, "Take", "1"), Planned("s1", 1, "Give", "2")]
    rows = planned_rows("saga", planned, [{"n": 1}, {}], ["k0", "k1"])
    built = [
        StepRow("saga", 0, "s0", 0, "Take", {"n": 1}, "k0", tool_version="1"),
        StepRow("saga", 1, "s1", 1, "Give", {}, "k1", tool_version="2"),
    ]
    assert rows == built
    for row, expected in zip(rows, built, strict=True):
        assert [getattr(row, f.name) for f in dataclasses.fields(StepRow)] == [
            getattr(expected, f.name) for f in dataclasses.fields(StepRow)
        ]
    with pytest.raises(ValueError, match="2 steps, 1 arguments and 2 keys"):
        planned_rows("saga", planned, [{}], ["k0", "k1"])


def test_snapshots_are_copies_of_the_rows_named_in_order() -> None:
    """`snapshots` returns `StepRow.copy`'s of the rows whose step id is named, in order, each a row of its own."""
    rows = [StepRow("saga", n, f"s{n}", 0, "Take", {"n": n}, f"k{n}", attempts=n, error=f"e{n}") for n in range(4)]
    taken = snapshots(rows, {"s3", "s1"})
    assert taken == [rows[1].copy(), rows[3].copy()]
    assert [getattr(taken[0], f.name) for f in dataclasses.fields(StepRow)] == [
        getattr(rows[1], f.name) for f in dataclasses.fields(StepRow)
    ]
    assert taken[0] is not rows[1]
    assert taken[1] is not rows[3]
