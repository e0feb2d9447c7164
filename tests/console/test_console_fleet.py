"""The console and a fleet: queued sagas listed and cancelled (token and CSRF rules as for every action), and
takeovers drawn on the timeline."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import run_sync
from console_helpers import client, example, fill

from saga_runtime import SagaExecutor, SagaStatus, StepContext, ToolRegistry, open_store
from saga_runtime._console._guard import CSRF_FIELD

TOKEN = "the console token of the test"
SHIP = [{"id": "ship", "tool": "ShipParcel", "args": {"order_id": "Q-1", "address": "Dublin"}}]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a SQLite file holding the example's sagas and one queued saga (each test works on a copy)."""
    path = tmp_path_factory.mktemp("console-fleet") / "template.db"
    url = f"sqlite:///{path}"

    async def filled() -> None:
        await fill(url)
        async with open_store(url) as store:
            await SagaExecutor(example().registry, store).submit(SHIP, saga_id="queued-1")

    run_sync(filled)
    return path


def stored(url: str, saga_id: str) -> Any:
    """Return a saga's record as the store holds it now."""

    async def read() -> Any:
        async with open_store(url) as store:
            return await store.get_saga(saga_id)

    return run_sync(read)


def test_the_list_of_queued_sagas_offers_cancel(url: str) -> None:
    """The list filtered on QUEUED shows the queued saga with a cancel form; other statuses have none."""
    with client(url) as console:
        page = console.get("/?status=QUEUED").text
        assert "queued-1" in page
        assert 'action="/actions/cancel"' in page
        assert "order-A-1001" not in page
        assert 'action="/actions/cancel"' not in console.get("/?status=SUCCESS").text
        assert 'action="/actions/cancel"' in console.get("/sagas/queued-1").text
        assert 'action="/actions/cancel"' not in console.get("/sagas/order-A-1001").text


def test_a_cancel_from_the_page_needs_its_csrf_token(url: str) -> None:
    """A cancel form without this console's CSRF token is refused (403) and changes nothing; with it, it cancels."""
    with client(url) as console:
        form = {"saga_id": "queued-1", "by": "alice", "note": "customer changed their mind", "next": "/"}
        assert console.post("/actions/cancel", data=form).status_code == 403
        token = re.search(rf'name="{CSRF_FIELD}" value="([0-9a-f]+)"', console.get("/?status=QUEUED").text)
        assert token is not None
        forged = console.post("/actions/cancel", data={**form, CSRF_FIELD: "0" * 64})
        assert forged.status_code == 403
        assert stored(url, "queued-1").status is SagaStatus.QUEUED
        sent = console.post("/actions/cancel", data={**form, CSRF_FIELD: token.group(1)})
        assert sent.status_code == 303
        assert sent.headers["location"].startswith("/?msg=")
    result = stored(url, "queued-1")
    assert result.status is SagaStatus.COMPENSATED
    assert "customer changed their mind" in (result.error or "")
    assert result.cancel is not None
    assert (result.cancel.by, result.cancel.reason) == ("alice", "customer changed their mind")


def test_an_api_cancel_needs_the_token_when_one_is_set(url: str) -> None:
    """POST /api/actions/cancel without the bearer token is refused (401); with it, the queued saga ends."""
    with client(url, token=TOKEN) as console:
        refused = console.post("/api/actions/cancel", json={"saga_id": "queued-1", "note": "no"})
        assert refused.status_code == 401
        assert stored(url, "queued-1").status is SagaStatus.QUEUED
        done = console.post(
            "/api/actions/cancel",
            json={"saga_id": "queued-1", "note": "duplicate order"},
            headers={"authorization": f"Bearer {TOKEN}"},
        )
        assert done.status_code == 200, done.text
        assert done.json()["saga"]["status"] == "COMPENSATED"
        missing = console.post(
            "/api/actions/cancel", json={"saga_id": "ghost"}, headers={"authorization": f"Bearer {TOKEN}"}
        )
        assert missing.status_code == 404


async def _taken_over(url: str) -> None:
    """Store a saga whose first step ran in two processes: its first owner cut off, another took it over."""
    registry = ToolRegistry()
    calls: list[str] = []
    began = asyncio.Event()

    @registry.tool
    class Slow:
        async def execute(self, name: str, ctx: StepContext) -> dict[str, str]:
            calls.append(name)
            began.set()
            if len(calls) == 1:
                await asyncio.sleep(60)
            return {"name": name}

    async with open_store(url) as store:
        first = SagaExecutor(registry, store, executor_id="worker-1", lease_timeout=0.3, compensation_timeout=1)
        task = asyncio.create_task(first.run([{"tool": "Slow", "args": {"name": "a"}, "id": "a"}], saga_id="moved"))
        await began.wait()

        async def cut_off(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("cut off")

        # Renewals stop, as for a process cut off from the store: its lease runs out.
        renew, save = store.renew_leases, store.save
        store.renew_leases = cut_off  # type: ignore[method-assign]
        await asyncio.sleep(0.5)
        results = await SagaExecutor(registry, store, executor_id="worker-2").recover()
        assert [result.status for result in results] == [SagaStatus.SUCCESS]
        store.save = cut_off  # type: ignore[method-assign]
        task.cancel()
        with pytest.raises(BaseException):  # noqa: B017 - cancelled, or its writes failed
            await task
        store.renew_leases, store.save = renew, save  # type: ignore[method-assign]


def test_a_step_run_in_two_processes_is_two_bars(tmp_path: Path) -> None:
    """The timeline marks the takeover and draws the step taken over as one bar per process, not one bar."""
    url = f"sqlite:///{tmp_path / 'moved.db'}"
    run_sync(lambda: _taken_over(url))
    with client(url) as console:
        page = console.get("/sagas/moved").text
        step = page[page.index('id="step-a"') :]
        step = step[: step.index('class="details"')]
        assert step.count('class="bar run') == 2
        assert "under worker-1" in step
        assert "under worker-2" in step
        assert "taken over by worker-2 from worker-1 (lease expired)" in page
        data = console.get("/api/sagas/moved").json()
        assert [t["reason"] for t in data["takeovers"]] == ["lease expired"]
