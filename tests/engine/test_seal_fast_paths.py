"""Every fast way of sealing writes the bytes of the general encoder: step seals, links and saga seals, any content."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import UserDict
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from saga_runtime._records import SagaRow, SagaStatus, Sealer, StepRow, StepStatus, identity_hash, saga_seal, seal
from saga_runtime._records._chain import _changing, _normal

_TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["s1", "Echo", 'quo"te\\', "line\n", "\u2028é", "\x7f"]))
_TIMES = st.one_of(
    st.none(),
    st.datetimes(timezones=st.just(UTC)),
    st.datetimes(timezones=st.builds(lambda m: timezone(timedelta(minutes=m)), st.integers(-1439, 1439))),
)
# A saga row's times are sealed in UTC: any time that has a UTC one (as every stored time has).
_SAGA_TIME = st.datetimes(
    min_value=datetime(2, 1, 1),
    max_value=datetime(9998, 12, 31),
    timezones=st.one_of(st.just(UTC), st.builds(lambda m: timezone(timedelta(minutes=m)), st.integers(-1439, 1439))),
)
_SAGA_TIMES = st.one_of(st.none(), _SAGA_TIME)
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=6,
)
_LINKS = st.one_of(st.none(), st.just(identity_hash(None, "s")), _TEXT)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _digest(text: str, key: bytes | None) -> str:
    if key is None:
        return hashlib.sha256(text.encode()).hexdigest()
    return "hmac:" + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _general_seal(row: StepRow, key: bytes | None) -> str:
    """The seal by its definition: the general encoder's text of the fixed part, then `_changing`'s."""
    fixed = [row.saga_id, row.seq, row.step_id, row.group, row.tool_name, _normal(row.args), row.idempotency_key]
    return _digest(_dumps(fixed)[:-1] + "," + _changing(row).decode(), key)


@st.composite
def _rows(draw: st.DrawFn) -> StepRow:
    return StepRow(
        draw(st.one_of(_TEXT, st.just("saga-1"))),
        draw(st.integers(0, 10**20)),
        draw(_TEXT),
        draw(st.integers(0, 5)),
        draw(_TEXT),
        draw(_JSON),
        draw(_TEXT),
        draw(st.sampled_from(list(StepStatus))),
        draw(st.integers(0, 10**20)),
        draw(_JSON),
        draw(st.one_of(st.none(), _TEXT)),
        draw(st.one_of(st.none(), _TEXT)),
        draw(_TIMES),
        draw(_TIMES),
        draw(_TIMES),
        draw(st.one_of(st.none(), _TEXT)),
        draw(st.integers(0, 3)),
        tool_version=draw(st.sampled_from(["1", "2"])),
        reconciled=draw(st.booleans()),
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_rows(), _LINKS, st.sampled_from([None, b"signing-key"]))
def test_step_seals_are_the_general_encoders(row: StepRow, link: str | None, key: bytes | None) -> None:
    """`seal`, and a Sealer's first seal and its re-seal from the kept state, give the general encoder's seal."""
    row.prev_hash = link
    expected = _general_seal(row, key)
    if link is not None:
        seal(row, link, key)
        assert row.hash == expected
    sealer = Sealer(key)
    sealer.seal(row, link)
    assert row.hash == expected
    sealer.seal(row.copy(), link)  # a snapshot: from the kept hash state and the times written before
    sealer.seal(row, link)
    assert row.hash == expected


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    _rows(),
    st.sampled_from([StepStatus.RUNNING, StepStatus.SUCCESS]),
    st.one_of(st.integers(-300, 300), st.integers(), st.booleans(), st.none(), _JSON),
    st.integers(-300, 300),
    st.integers(-300, 300),
    _LINKS,
)
def test_seals_of_rows_without_error_or_compensation_are_the_general_encoders(
    row: StepRow, status: StepStatus, result: Any, attempts: int, undo_attempts: int, link: str | None
) -> None:
    """An intent's or a result's seal (no error, no compensation: the usual one) is the general encoder's."""
    row.status, row.result, row.attempts, row.compensation_attempts = status, result, attempts, undo_attempts
    row.error = row.error_type = row.compensated_at = row.compensation_error = None
    row.tool_version, row.reconciled, row.prev_hash = "1", False, link
    sealer = Sealer(None)
    sealer.seal(row, link)
    assert row.hash == _general_seal(row, None)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(_rows())
def test_identity_hashes_are_the_general_encoders(row: StepRow) -> None:
    """A link is the SHA-256 of the identity's JSON array, with or without the identity's text kept from before."""
    parts = [row.saga_id, row.seq, row.step_id, row.group, row.tool_name, row.idempotency_key]
    expected = hashlib.sha256(_dumps(parts).encode()).hexdigest()
    assert identity_hash(row, row.saga_id) == expected
    assert identity_hash(row, row.saga_id) == expected
    assert identity_hash(None, row.saga_id) == hashlib.sha256(_dumps(["saga", row.saga_id]).encode()).hexdigest()


@st.composite
def _saga_rows(draw: st.DrawFn) -> SagaRow:
    created = draw(st.datetimes(timezones=st.just(UTC)))
    return SagaRow(
        draw(st.one_of(_TEXT, st.just("saga-1"))),
        draw(st.sampled_from(["plan", "dynamic"])),
        draw(_JSON),
        draw(st.one_of(st.none(), st.just(identity_hash(None, "s")), _TEXT)),
        draw(st.sampled_from(list(SagaStatus))),
        draw(st.one_of(st.just(created), _SAGA_TIME)),
        created,
        budget=draw(st.one_of(st.none(), st.dictionaries(_TEXT, _JSON, max_size=2))),
        cost=draw(st.one_of(st.floats(), st.integers(-5, 5))),
        tokens=draw(st.one_of(st.integers(0, 10**20), st.booleans())),
        metadata=draw(st.dictionaries(_TEXT, _JSON, max_size=2)),
        error=draw(st.one_of(st.none(), _TEXT)),
        finished_at=draw(_SAGA_TIMES),
        parked_from=draw(st.one_of(st.none(), st.sampled_from(list(SagaStatus)))),
        purged_at=draw(_SAGA_TIMES),
        history=draw(st.lists(st.dictionaries(_TEXT, _JSON, max_size=2), max_size=2)),
        parent_id=draw(st.one_of(st.none(), _TEXT)),
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(_saga_rows(), st.sampled_from([None, b"signing-key"]))
def test_saga_seals_written_directly_are_the_general_encoders(saga: SagaRow, key: bytes | None) -> None:
    """A writer's saga seal (its text written value by value, the plan's digest kept) is the general encoder's,
    as a check of the record computes it afresh, for any content, sealed once or again."""
    uncached = saga_seal(saga, key)
    assert saga_seal(saga, key, cached=True) == uncached
    assert saga_seal(saga, key, cached=True) == uncached
    saga.cost, saga.tokens = 2.5, 7
    assert saga_seal(saga, key, cached=True) == saga_seal(saga, key)


@pytest.mark.parametrize("metadata", [MappingProxyType({}), UserDict(), MappingProxyType({"a": 1})])
def test_a_saga_seal_refuses_metadata_the_general_encoder_refuses(metadata: Any) -> None:
    """Metadata of a mapping type JSON cannot write (even an empty one) fails a writer's seal as the general one."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    saga = SagaRow("s", "plan", None, None, SagaStatus.RUNNING, at, at, metadata=metadata)
    with pytest.raises(TypeError):
        saga_seal(saga, None)
    with pytest.raises(TypeError):
        saga_seal(saga, None, cached=True)
