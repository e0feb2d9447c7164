"""Every fast way of sealing writes the bytes of the general encoder: step seals, links and saga seals, any content."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

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
@given(_rows())
def test_identity_hashes_are_the_general_encoders(row: StepRow) -> None:
    """A link is the SHA-256 of the identity's JSON array, with or without the identity's text kept from before."""
    parts = [row.saga_id, row.seq, row.step_id, row.group, row.tool_name, row.idempotency_key]
    expected = hashlib.sha256(_dumps(parts).encode()).hexdigest()
    assert identity_hash(row, row.saga_id) == expected
    assert identity_hash(row, row.saga_id) == expected
    assert identity_hash(None, row.saga_id) == hashlib.sha256(_dumps(["saga", row.saga_id]).encode()).hexdigest()


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    _TEXT,
    st.sampled_from(["plan", "dynamic"]),
    _JSON,
    st.sampled_from(list(SagaStatus)),
    st.datetimes(timezones=st.just(UTC)),
    _TIMES,
    st.one_of(st.none(), st.dictionaries(_TEXT, _JSON, max_size=2)),
    st.dictionaries(_TEXT, _JSON, max_size=2),
    st.sampled_from([None, b"signing-key"]),
)
def test_saga_seals_cached_are_the_uncached(
    saga_id: str,
    kind: Any,
    plan: Any,
    status: SagaStatus,
    created: datetime,
    finished: datetime | None,
    budget: dict[str, Any] | None,
    metadata: dict[str, Any],
    key: bytes | None,
) -> None:
    """A saga row sealed twice (its plan's digest kept) seals as a check of the record computes it afresh."""
    saga = SagaRow(saga_id, kind, plan, None, status, created, created, budget=budget, metadata=metadata)
    saga.finished_at = finished
    uncached = saga_seal(saga, key)
    assert saga_seal(saga, key, cached=True) == uncached
    assert saga_seal(saga, key, cached=True) == uncached
    saga.cost, saga.tokens = 2.5, 7
    assert saga_seal(saga, key, cached=True) == saga_seal(saga, key)
