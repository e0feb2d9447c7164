"""What retention returns: a purge's report, a hold, and an export's offline check."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from saga_runtime._records._chain import VerifyResult, verify_rows
from saga_runtime._records._export import import_approvals, import_rows

__all__ = ["PurgeReport", "SagaHold", "verify_export"]


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What a purge removed (or would, with `dry_run`), oldest first, and where they went."""

    count: int
    saga_ids: list[str]
    archived_to: str | None = None
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class SagaHold:
    """A hold keeping a saga from purges (beside the record, not in its chain)."""

    saga_id: str
    reason: str
    held_at: datetime


def verify_export(data: Mapping[str, Any], *, signing_key: bytes | str | None = None) -> VerifyResult:
    """Check an exported (or archived) saga's chain offline, as `store.verify_saga` does.

    Raise `StoreError` if `data` is not a saga export.
    """
    key = signing_key.encode() if isinstance(signing_key, str) else signing_key
    if key is not None and not key:
        raise ValueError("signing_key must be non-empty bytes or str")
    saga, steps = import_rows(data)
    return verify_rows(saga, steps, key, import_approvals(data, saga.saga_id))
