"""The console's queues page, driven by headless Chromium: each queue's depth and state, pause, resume, drain.

On a SQLite copy of the example store and on a PostgreSQL database of its own (Chromium as conftest.py finds it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import run_sync
from console_helpers import client, copy_store, example, served

from saga_runtime import SagaAdmin, SagaExecutor, open_store
from saga_runtime._console import create_app
from saga_runtime._console._guard import SESSION_COOKIE

TOKEN = "the console token of the test"


@pytest.fixture(params=["sqlite", "postgres"])
def queued_url(request: pytest.FixtureRequest, template: Path, tmp_path: Path) -> str:
    """Return a store (a SQLite copy of the example's, or a PostgreSQL database) with sagas in two queues."""
    url = (
        copy_store(template, tmp_path)
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_databases").create()
    )

    async def submit() -> None:
        async with open_store(url) as store:
            executor = SagaExecutor(example().registry, store)
            for n, queue in ((1, "payouts"), (2, "payouts"), (3, "mail")):
                plan = [{"id": "ship", "tool": "ShipParcel", "args": {"order_id": f"Q-{n}", "address": "Cork"}}]
                await executor.submit(plan, saga_id=f"queued-{n}", queue=queue)

    run_sync(submit)
    return url


def states(url: str) -> dict[str, str]:
    """Return each queue's state as the store holds it now."""

    async def read() -> dict[str, str]:
        async with open_store(url) as store:
            return {info.name: info.state for info in await SagaAdmin(store).queues()}

    result: dict[str, str] = run_sync(read)
    return result


def row(page: Any, queue: str) -> Any:
    """Return the queues table's row of `queue`."""
    return page.locator(f"tr[data-queue='{queue}']")


def test_the_queues_page_pauses_resumes_and_drains(page: Any, queued_url: str) -> None:
    """The page lists each queue's counts; Pause, Resume and Drain change the stored state, shown on the page."""
    with served(create_app(queued_url)) as base:
        page.goto(base + "/")
        page.get_by_role("link", name="Queues").click()
        assert row(page, "payouts").locator("td").nth(2).inner_text() == "2"
        assert row(page, "mail").locator("td").nth(2).inner_text() == "1"
        assert row(page, "payouts").locator(".status").inner_text() == "active"
        row(page, "payouts").get_by_role("button", name="Pause").click()
        assert "queue payouts is paused" in page.locator(".flash").inner_text()
        assert row(page, "payouts").locator(".status").inner_text() == "paused"
        assert states(queued_url) == {"mail": "active", "payouts": "paused"}
        row(page, "mail").get_by_role("button", name="Drain").click()
        assert row(page, "mail").locator(".status").inner_text() == "drained"  # nothing of it runs
        row(page, "payouts").get_by_role("button", name="Resume").click()
        assert row(page, "payouts").locator(".status").inner_text() == "active"
        assert states(queued_url) == {"mail": "drained", "payouts": "active"}
        row(page, "payouts").get_by_role("link", name="payouts").click()
        listed = page.locator("tbody tr a").all_inner_texts()
        assert sorted(listed) == ["queued-1", "queued-2"]


def test_a_queue_action_without_the_token_is_refused(page: Any, template: Path, tmp_path: Path) -> None:
    """With a token set, the queues page asks for it, and a pause sent without the session is refused, not stored."""
    url = copy_store(template, tmp_path)

    async def submit() -> None:
        async with open_store(url) as store:
            plan = [{"id": "ship", "tool": "ShipParcel", "args": {"order_id": "Q-9", "address": "Cork"}}]
            await SagaExecutor(example().registry, store).submit(plan, saga_id="queued-9", queue="payouts")

    run_sync(submit)
    with served(create_app(url, token=TOKEN)) as base:
        page.goto(base + "/queues")
        assert page.url.startswith(base + "/login")
        page.fill("input[name=token]", TOKEN)
        page.click("button:text('Log in')")
        assert page.url == base + "/queues"
        page.context.clear_cookies(name=SESSION_COOKIE)
        row(page, "payouts").get_by_role("button", name="Pause").click()
        assert "refused: actions need the UI token" in page.locator(".refused").inner_text()
    assert states(url) == {"payouts": "active"}


def test_the_api_lists_and_steers_queues(url: str) -> None:
    """GET /api/queues lists the queues; POST /api/queue-actions/pause pauses one (Bearer token, JSON body);
    without the token, or with a bad name, nothing is stored."""

    async def submit() -> None:
        async with open_store(url) as store:
            plan = [{"id": "ship", "tool": "ShipParcel", "args": {"order_id": "Q-5", "address": "Cork"}}]
            await SagaExecutor(example().registry, store).submit(plan, saga_id="queued-5", queue="payouts")

    run_sync(submit)
    bearer = {"authorization": f"Bearer {TOKEN}"}
    with client(url, token=TOKEN) as console:
        [queue] = console.get("/api/queues", headers=bearer).json()["queues"]
        assert (queue["name"], queue["queued"], queue["state"]) == ("payouts", 1, "active")
        refused = console.post("/api/queue-actions/pause", json={"queue": "payouts"})
        assert refused.status_code == 401
        bad = console.post("/api/queue-actions/pause", json={"queue": ""}, headers=bearer)
        assert bad.status_code == 400
        assert console.post("/api/queue-actions/stop", json={"queue": "payouts"}, headers=bearer).status_code == 404
        done = console.post("/api/queue-actions/pause", json={"queue": "payouts"}, headers=bearer)
        assert done.status_code == 200, done.text
        assert (done.json()["message"], done.json()["queue"]["paused"]) == ("queue payouts is paused", True)
    assert states(url) == {"payouts": "paused"}
