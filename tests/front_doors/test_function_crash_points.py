"""Saga functions killed at every crash point (SIGKILL, real processes) are resumed safely by recovery.

The same invariants as plans (`test_crash_points`): every saga ends terminal, no call recorded SUCCESS runs again,
a call of unknown outcome is re-run with its key or compensated, no compensation runs twice. A saga function is
resumed by running it again over its record, never compensated for being orphaned.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga_runtime import SagaStatus
from saga_runtime.testing import check_crash_points

from .test_crash_points import TOOLS, check_common, database_url, sql_kind

__all__ = ["database_url", "sql_kind"]  # the fixtures, shared

pytestmark = pytest.mark.slow

FUNCTIONS = textwrap.dedent(
    """
    from saga_runtime import DynamicSaga

    @registry.saga
    async def order(saga: DynamicSaga, address: str) -> dict:
        charge = await saga.call("charge", order_id="A1", amount_cents=500)
        if address == "nowhere":  # one at a time: the failing call's sibling is not raced
            await saga.call("reserve", sku="KEYBOARD", quantity=1)
            await saga.call("ship", address=address)
            return {}
        _, ship = await saga.group([("reserve", {"sku": "KEYBOARD", "quantity": 1}), ("ship", {"address": address})])
        return {"charge": charge["charge_id"], "tracking": ship["tracking"]}
    """
)


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Write the tools and the saga function in a module importable here and in the harness's children."""
    name = f"crash_functions_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / f"{name}.py").write_text(TOOLS + FUNCTIONS)
    monkeypatch.syspath_prepend(str(folder))
    yield f"{name}:registry"
    sys.modules.pop(name, None)


@pytest.mark.parametrize("address", ["Seoul", "nowhere"])
async def test_every_crash_point_of_a_saga_function_is_resumed_safely(
    database_url: str, tools: str, address: str
) -> None:
    """A saga function killed at each of its crash points is resumed by recovery and ends as its code says."""
    report = await check_crash_points(
        tools, "order", args={"address": address}, url=database_url, lease_timeout=0.3, concurrency=4
    )
    if address == "Seoul":
        assert report.baseline.status is SagaStatus.SUCCESS
        assert report.baseline.output is not None
        check_common(report, 6, SagaStatus.SUCCESS)
        for point in report.points:
            assert point.result is not None
            assert point.result.output is not None
            assert set(point.result.output) == {"charge", "tracking"}
        after = report.point("after-execute-charge-0")
        (first,) = after.calls_of("charge-0", process="run")
        (again,) = after.calls_of("charge-0", process="recovery")
        assert again.idempotency_key == first.idempotency_key
    else:
        assert report.baseline.status is SagaStatus.COMPENSATED
        check_common(report, 10, SagaStatus.COMPENSATED)
