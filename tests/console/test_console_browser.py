"""The web console end to end: uvicorn serving a real SQLite store, driven by headless Chromium (Playwright).

The browser and page fixtures are the console tests' (conftest.py): the system's Chromium, never a downloaded one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from conftest import run_sync
from console_helpers import SCRIPT_TEXT, copy_store, example, served

from saga_runtime import SagaExecutor, open_store
from saga_runtime._console import create_app
from saga_runtime._console._guard import SESSION_COOKIE

TOKEN = "the console token of the test"


def saga(url: str, saga_id: str) -> Any:
    """Return a saga's record as the store holds it now."""

    async def read() -> Any:
        async with open_store(url) as store:
            return await store.get_saga(saga_id)

    return run_sync(read)


def test_the_list_shows_a_success_and_a_compensated_saga(page: Any, template: Path, tmp_path: Path) -> None:
    """The list page shows the store's SUCCESS and COMPENSATED sagas with their statuses, and filters by status."""
    url = copy_store(template, tmp_path)
    with served(create_app(url)) as base:
        page.goto(base + "/")
        row = page.locator("tr", has=page.get_by_role("link", name="order-A-1001"))
        assert row.locator(".status").inner_text() == "SUCCESS"
        row = page.locator("tr", has=page.get_by_role("link", name="order-A-1002"))
        assert row.locator(".status").inner_text() == "COMPENSATED"
        assert page.locator("body").get_attribute("data-refresh") == "5"
        page.select_option("select[name=status]", "COMPENSATED")
        page.click("button:text('Show')")
        assert page.locator("tbody tr").count() == 1
        assert page.locator("tbody .status").inner_text() == "COMPENSATED"


def test_the_timeline_of_a_compensated_saga_shows_its_error_and_reverse_compensations(
    page: Any, template: Path, tmp_path: Path
) -> None:
    """A COMPENSATED saga's timeline shows its error, bars to scale, and charge undone before reserve."""
    url = copy_store(template, tmp_path)
    with served(create_app(url)) as base:
        page.goto(base + "/")
        page.click("text=order-A-1002")
        assert "no carrier delivers to 1 Sunken Road, Atlantis" in page.locator(".saga-error").inner_text()
        assert page.locator(".badge.verified").is_visible()
        undone = page.locator(".compensations li .step-id").all_inner_texts()
        assert undone == ["charge", "reserve"]  # the reverse of the order they ran in
        bars = page.locator("#step-charge .bar.run")
        assert re.search(r"left: \d+(\.\d+)?%; width: \d+(\.\d+)?%", bars.get_attribute("style") or "")
        track = page.locator("#step-charge .track").bounding_box()
        bar = bars.bounding_box()
        assert track is not None
        assert bar is not None
        assert 0 < bar["width"] < track["width"]
        assert page.locator("#step-ship .step-error").inner_text().startswith("error: ConnectionError")


def test_an_approval_given_on_the_page_runs_its_step_once(page: Any, template: Path, tmp_path: Path) -> None:
    """Approving from the inbox runs the waiting refund once; the same form sent again is refused."""
    module = example()
    module.effects.clear()
    url = copy_store(template, tmp_path)
    with served(create_app(url, registry=module.registry)) as base:
        stale = page.context.new_page()
        stale.goto(base + "/approvals")  # a second tab holding the same form
        page.goto(base + "/approvals")
        form = page.locator("tr", has=page.get_by_role("link", name="refund-A-0990")).locator("form")
        form.locator("input[name=by]").fill("alice")
        form.locator("input[name=note]").fill("checked the order")
        form.get_by_role("button", name="Approve").click()
        assert "approved by alice; the saga is SUCCESS" in page.locator(".flash").inner_text()
        assert page.locator(".empty").inner_text() == "No step waits for a decision."
        stale.locator("input[name=by]").fill("bob")
        stale.get_by_role("button", name="Approve").click()
        assert "already" in stale.locator(".refused").inner_text()
        assert module.effects.count("refund A-0990") == 1
    result = saga(url, "refund-A-0990")
    assert result.status.value == "SUCCESS"
    assert result.approvals[0].decided_by == "alice"


def test_an_action_without_the_token_is_refused(page: Any, template: Path, tmp_path: Path) -> None:
    """With a token set, the pages ask for it, and an approval sent without the session is refused and not recorded."""
    url = copy_store(template, tmp_path)
    with served(create_app(url, token=TOKEN)) as base:
        page.goto(base + "/approvals")
        assert page.url.startswith(base + "/login")
        page.fill("input[name=token]", "a wrong token")
        page.click("button:text('Log in')")
        assert page.locator(".refused").inner_text() == "That is not the token."
        page.fill("input[name=token]", TOKEN)
        page.click("button:text('Log in')")
        assert page.url == base + "/approvals"
        page.context.clear_cookies(name=SESSION_COOKIE)  # the session is gone; the form is still on the page
        page.locator("input[name=by]").fill("mallory")
        page.get_by_role("button", name="Approve").click()
        assert "refused: actions need the UI token" in page.locator(".refused").inner_text()
    assert saga(url, "refund-A-0990").pending_approvals  # nothing was decided


def test_a_result_holding_a_script_is_shown_as_text(page: Any, template: Path, tmp_path: Path) -> None:
    """A step result holding `<script>` is shown as text on the timeline, and never runs."""
    url = copy_store(template, tmp_path)
    with served(create_app(url)) as base:
        page.goto(base + "/sagas/note-1")
        page.click("summary")
        assert SCRIPT_TEXT in page.locator("#step-ticket .result").inner_text()
        assert SCRIPT_TEXT in page.locator("#step-ticket .args").inner_text()
        assert page.evaluate("window.__pwned") is None
        assert page.locator("script").count() == 1  # the console's own script only


def test_a_secret_argument_is_masked_on_the_timeline(page: Any, template: Path, tmp_path: Path) -> None:
    """A card token declared secret shows as ********** on the page; its value is nowhere in it."""
    url = copy_store(template, tmp_path)
    with served(create_app(url)) as base:
        page.goto(base + "/sagas/order-A-1001")
        page.locator("#step-charge summary").click()
        args = page.locator("#step-charge .args").inner_text()
        assert '"card_token": "**********"' in args
        assert "tok_visa" not in page.content()


def test_a_queued_saga_is_cancelled_from_the_list(page: Any, template: Path, tmp_path: Path) -> None:
    """The list of QUEUED sagas offers cancel: clicking it ends the saga, no tool called, the reason recorded."""
    url = copy_store(template, tmp_path)

    async def submit() -> None:
        async with open_store(url) as store:
            plan = [{"id": "ship", "tool": "ShipParcel", "args": {"order_id": "Q-2", "address": "Cork"}}]
            await SagaExecutor(example().registry, store).submit(plan, saga_id="queued-2")

    run_sync(submit)
    with served(create_app(url)) as base:
        page.goto(base + "/?status=QUEUED")
        row = page.locator("tr", has=page.get_by_role("link", name="queued-2"))
        row.locator("input[name=by]").fill("alice")
        row.locator("input[name=note]").fill("address is wrong")
        row.get_by_role("button", name="Cancel").click()
        assert "saga queued-2 is COMPENSATED" in page.locator(".flash").inner_text()
    result = saga(url, "queued-2")
    assert result.status.value == "COMPENSATED"
    assert "address is wrong" in (result.error or "")
    assert result.cancel is not None
    assert result.cancel.by == "alice"


def test_the_console_says_how_sagas_ended_and_why_they_wait(page: Any, template: Path, tmp_path: Path) -> None:
    """The list's "why" column and its "ended" filter, and a saga's page, show end reasons, standing effects
    and what a waiting saga waits for."""
    from saga_runtime import ToolRegistry

    url = copy_store(template, tmp_path)
    registry = ToolRegistry()

    @registry.tool
    class SendRefund:
        async def execute(self, cents: int) -> dict[str, Any]:
            return {"sent": cents}

    @registry.tool
    class Decline:
        async def execute(self) -> None:
            raise RuntimeError("declined")

    async def run_one() -> None:
        async with open_store(url) as store:
            await SagaExecutor(registry, store=store).run(
                [{"id": "refund", "tool": "SendRefund", "args": {"cents": 5}}, {"id": "no", "tool": "Decline"}],
                saga_id="loop-9",
            )

    run_sync(run_one)
    with served(create_app(url)) as base:
        page.goto(base + "/")
        row = page.locator("tr", has=page.get_by_role("link", name="order-A-1002"))
        assert row.locator(".why").inner_text() == "failed"
        row = page.locator("tr", has=page.get_by_role("link", name="refund-A-0990"))
        assert row.locator(".why").inner_text() == "waits: decision"
        row = page.locator("tr", has=page.get_by_role("link", name="order-A-1001"))
        assert row.locator(".why").inner_text() == "-"
        page.select_option("select[name=reason]", "failed")
        page.click("button:text('Show')")
        shown = sorted(page.locator("tbody td:first-child a").all_inner_texts())
        assert shown == ["complaint-77", "loop-9", "order-A-1002"]
        page.goto(base + "/sagas/loop-9")
        assert page.locator(".end-reason").inner_text() == "failed"
        assert page.locator(".standing").inner_text().startswith("refund")
        page.goto(base + "/sagas/refund-A-0990")
        waiting = page.locator(".waiting-for").inner_text()
        assert waiting.startswith("decision: a decision on step 'refund' (RefundCard")
        assert page.locator(".end-reason").count() == 0
