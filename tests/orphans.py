"""Saga rows as a dead executor leaves them, for the tests that recover, park or inspect such sagas."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from saga_runtime import SagaStatus, ToolRegistry
from saga_runtime._planning import build_plan
from saga_runtime._records import SagaRow, canonical_json, now


def orphan_saga(
    saga_id: str,
    plan: Any,
    *,
    plan_hash: str | None = None,
    status: SagaStatus = SagaStatus.RUNNING,
    owner: str = "dead",
    started: datetime | None = None,
    lease: timedelta = timedelta(seconds=30),
    **fields: Any,
) -> SagaRow:
    """Return a plan saga's row started 5 minutes ago by `owner`, whose lease ran out `lease` after the start."""
    started = now() - timedelta(minutes=5) if started is None else started
    return SagaRow(
        saga_id=saga_id,
        kind="plan",
        plan=plan,
        plan_hash=hashlib.sha256(canonical_json(plan).encode()).hexdigest() if plan_hash is None else plan_hash,
        status=status,
        created_at=started,
        updated_at=started,
        owner=owner,
        lease_expires_at=started + lease,
        **fields,
    )


def planned_orphan(saga_id: str, plan: Any, registry: ToolRegistry, **options: Any) -> SagaRow:
    """Return `orphan_saga` of `plan` as built against `registry` (its stored form and digest), lease ended at start."""
    planned = build_plan(plan, registry)
    options.setdefault("lease", timedelta(0))
    return orphan_saga(saga_id, planned.to_json(), plan_hash=planned.digest, **options)
