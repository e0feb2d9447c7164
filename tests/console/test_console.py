"""The web console over HTTP, in process: its API, the token, CSRF, Host and Origin checks, escaping and masking."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from console_helpers import SCRIPT_TEXT, client, example, free_port
from starlette.testclient import TestClient

from saga_runtime._console import create_app
from saga_runtime._console._guard import CSRF_FIELD, is_loopback

TOKEN = "the console token of the test"


@pytest.fixture
def console(url: str) -> Iterator[TestClient]:
    """Yield a client of a console without a token and with the example's tools."""
    with client(url, registry=example().registry) as opened:
        yield opened


def csrf_of(page: str) -> str:
    """Return the CSRF token a page's forms carry."""
    found = re.search(rf'name="{CSRF_FIELD}" value="([0-9a-f]+)"', page)
    assert found is not None
    return found.group(1)


def test_the_api_lists_filters_and_searches_sagas(console: TestClient) -> None:
    """GET /api/sagas lists newest first, filters by status, searches ids, and refuses an unknown status."""
    ids = [s["saga_id"] for s in console.get("/api/sagas").json()["sagas"]]
    assert ids[0] == "note-1"
    assert {"order-A-1001", "order-A-1002", "refund-A-0990", "complaint-77"} <= set(ids)
    compensated = console.get("/api/sagas", params={"status": "compensated"}).json()["sagas"]
    assert [s["saga_id"] for s in compensated] == ["order-A-1002"]
    assert [s["saga_id"] for s in console.get("/api/sagas", params={"q": "A-10"}).json()["sagas"]] == [
        "order-A-1002",
        "order-A-1001",
    ]
    page = console.get("/api/sagas", params={"limit": 2, "offset": 1}).json()
    assert len(page["sagas"]) == 2
    assert page["more"] is True
    assert console.get("/api/sagas", params={"status": "DONE"}).status_code == 400


def test_the_api_filters_by_end_reason_and_says_why_a_saga_waits(console: TestClient) -> None:
    """GET /api/sagas?reason=R keeps the sagas that ended so; each line carries end_reason and waiting_for."""
    failed = console.get("/api/sagas", params={"reason": "failed"}).json()["sagas"]
    assert sorted(s["saga_id"] for s in failed) == ["complaint-77", "order-A-1002"]
    assert {s["end_reason"] for s in failed} == {"failed"}
    assert console.get("/api/sagas", params={"reason": "budget"}).json()["sagas"] == []
    assert console.get("/api/sagas", params={"reason": "bored"}).status_code == 400
    waiting = console.get("/api/sagas/refund-A-0990").json()
    assert waiting["waiting_for"]["kind"] == "decision"
    assert waiting["end_reason"] is None
    assert console.get("/api/sagas/order-A-1002").json()["effects_standing"] == []


def test_the_api_gives_a_saga_verified_with_secrets_masked(console: TestClient) -> None:
    """GET /api/sagas/{id} gives the record with its verdict; a secret argument reads ********** and nowhere else."""
    saga = console.get("/api/sagas/order-A-1001").json()
    assert saga["status"] == "SUCCESS"
    assert saga["verified"]["ok"] is True
    assert saga["steps"][1]["args"]["card_token"] == "**********"
    assert "tok_visa" not in console.get("/api/sagas/order-A-1001").text
    assert "tok_visa" not in console.get("/sagas/order-A-1001").text
    assert console.get("/api/sagas/nothing-here").status_code == 404


def test_a_script_in_a_record_is_escaped_on_the_page(console: TestClient) -> None:
    """A result holding <script> reaches the timeline page escaped, never as markup."""
    page = console.get("/sagas/note-1").text
    assert SCRIPT_TEXT not in page
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in page


def test_an_api_approval_runs_the_step_once_and_a_second_is_refused(console: TestClient) -> None:
    """POST /api/actions/approve runs the waiting refund once; approving again answers 409 and runs nothing."""
    module = example()
    module.effects.clear()
    (request,) = console.get("/api/approvals").json()["approvals"]
    body = {"saga_id": "refund-A-0990", "step_id": "refund", "by": "alice", "args_digest": request["args_digest"]}
    done = console.post("/api/actions/approve", json=body)
    assert done.status_code == 200, done.text
    assert done.json()["saga"]["status"] == "SUCCESS"
    again = console.post("/api/actions/approve", json=body)
    assert again.status_code == 409
    assert "already" in again.json()["error"]
    assert module.effects.count("refund A-0990") == 1
    assert console.get("/api/approvals").json()["approvals"] == []


def test_an_api_action_needs_a_json_body_from_no_other_site(console: TestClient) -> None:
    """An API action sent as a form (a cross-site page's only way without CORS) or from another origin is refused."""
    body = {"saga_id": "refund-A-0990", "step_id": "refund", "by": "mallory"}
    assert console.post("/api/actions/approve", data=body).status_code == 415
    cross = console.post("/api/actions/approve", json=body, headers={"sec-fetch-site": "cross-site"})
    assert cross.status_code == 403
    assert console.get("/api/approvals").json()["approvals"] != []


def test_a_retry_without_tools_and_an_unknown_action_are_refused(url: str) -> None:
    """Retrying a compensation needs the tools (409 without them); an unknown action is 404."""
    with client(url) as console:
        refused = console.post("/api/actions/retry-compensation", json={"saga_id": "complaint-77"})
        assert refused.status_code == 409
        assert "--tools" in refused.json()["error"]
        assert console.post("/api/actions/delete", json={"saga_id": "complaint-77"}).status_code == 404
        unpark = console.post("/api/actions/unpark", json={"saga_id": "order-A-1001"})
        assert unpark.status_code == 409
        assert "not PARKED" in unpark.json()["error"]


def test_a_form_without_its_csrf_token_is_refused(console: TestClient) -> None:
    """A page action without the CSRF token of this console, or from another site, decides nothing (403)."""
    form = {"saga_id": "refund-A-0990", "step_id": "refund", "by": "mallory"}
    assert console.post("/actions/approve", data=form).status_code == 403
    token = csrf_of(console.get("/approvals").text)
    forged = console.post("/actions/approve", data={**form, CSRF_FIELD: "0" * 64})
    assert forged.status_code == 403
    cross = console.post("/actions/approve", data={**form, CSRF_FIELD: token}, headers={"origin": "http://evil.test"})
    assert cross.status_code == 403
    assert console.get("/api/approvals").json()["approvals"] != []
    sent = console.post("/actions/reject", data={**form, CSRF_FIELD: token, "next": "/approvals"})
    assert sent.status_code == 303
    assert sent.headers["location"].startswith("/approvals?msg=")


def test_with_a_token_every_page_and_call_needs_it(url: str) -> None:
    """With a token set: pages send to the login, the API answers 401 without Bearer, and an action needs it."""
    with client(url, token=TOKEN) as console:
        assert console.get("/").headers["location"] == "/login?next=%2F"
        assert console.get("/api/sagas").status_code == 401
        bearer = {"authorization": f"Bearer {TOKEN}"}
        assert console.get("/api/sagas", headers=bearer).status_code == 200
        body = {"saga_id": "refund-A-0990", "step_id": "refund", "by": "mallory"}
        assert console.post("/api/actions/reject", json=body).status_code == 401
        wrong = console.post("/api/actions/reject", json=body, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        login = console.get("/login")
        logged = console.post("/login", data={"token": TOKEN, CSRF_FIELD: csrf_of(login.text), "next": "/approvals"})
        assert logged.status_code == 303
        assert logged.headers["location"] == "/approvals"
        assert "HttpOnly" in logged.headers["set-cookie"]
        assert "SameSite=strict" in logged.headers["set-cookie"]
        assert TOKEN not in logged.headers["set-cookie"]
        assert console.get("/approvals").status_code == 200
        assert console.get("/api/approvals").json()["approvals"] != []  # nothing was decided without the token


def test_the_console_answers_loopback_names_only(console: TestClient) -> None:
    """On the loopback, a request naming another host (DNS rebinding) is refused; pages carry the safety headers."""
    assert console.get("/", headers={"host": "attacker.example:8765"}).status_code == 421
    page = console.get("/", headers={"host": "localhost:8765"})
    assert page.status_code == 200
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


def test_listening_beyond_the_loopback_needs_a_token(url: str) -> None:
    """create_app refuses a host beyond the loopback without a token, and takes it with one."""
    with pytest.raises(ValueError, match="beyond the loopback, without a token"):
        create_app(url, host="0.0.0.0")
    with client(url, host="0.0.0.0", token=TOKEN) as console:
        answer = console.get("/api/sagas", headers={"host": "console.example", "authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("192.168.1.5")
    assert not is_loopback("example.com")


def test_the_openapi_document_names_every_api_route(console: TestClient) -> None:
    """GET /api/openapi.json describes each /api/ route the console serves, with the records' schemas."""
    document = console.get("/api/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert set(document["paths"]) == {
        "/api/sagas",
        "/api/sagas/{saga_id}",
        "/api/follow/{saga_id}",
        "/api/approvals",
        "/api/actions/{action}",
        "/api/queues",
        "/api/queue-actions/{action}",
    }
    schemas = document["components"]["schemas"]
    assert {"SagaSummary", "SagaResult", "ApprovalRequest", "Saga", "Action", "Error"} <= set(schemas)
    action = document["paths"]["/api/actions/{action}"]["post"]["parameters"][0]["schema"]["enum"]
    assert action == ["approve", "reject", "retry-compensation", "unpark", "cancel"]


def test_the_list_page_pages_and_keeps_its_filters(console: TestClient) -> None:
    """The list shows a status filter and a search box, refreshes itself, and a search with no match says so."""
    page = console.get("/", params={"status": "SUCCESS"}).text
    assert 'data-refresh="5"' in page
    assert 'value="SUCCESS" selected' in page
    assert "order-A-1001" in page
    assert "order-A-1002" not in page
    assert "No saga matching “zzz”." in console.get("/", params={"q": "zzz"}).text
    assert "data-refresh" not in console.get("/", params={"refresh": "0"}).text


SCRIPT = Path(sys.executable).with_name("saga-runtime")


def test_the_ui_command_refuses_a_public_host_without_a_token(url: str) -> None:
    """`saga-runtime ui --host 0.0.0.0` without a token exits 2 and says how to set one."""
    ran = subprocess.run(
        [str(SCRIPT), "ui", "--db", url, "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "SAGA_RUNTIME_UI_TOKEN"},
        check=False,
    )
    assert ran.returncode == 2, ran.stderr
    assert "without a token: set SAGA_RUNTIME_UI_TOKEN or --token" in ran.stderr


def test_the_ui_command_serves_the_store_until_stopped(url: str) -> None:
    """`saga-runtime ui` serves the store's sagas over HTTP with the token of SAGA_RUNTIME_UI_TOKEN."""
    port = free_port()
    env = {**os.environ, "SAGA_RUNTIME_UI_TOKEN": TOKEN}
    served = subprocess.Popen(
        [str(SCRIPT), "ui", "--db", url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/sagas", headers={"authorization": f"Bearer {TOKEN}"})
                break
            except httpx.TransportError:
                if served.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(served.stderr.read() if served.stderr else "no start") from None
                time.sleep(0.1)
        assert answer.status_code == 200
        assert "order-A-1001" in {s["saga_id"] for s in answer.json()["sagas"]}
        assert httpx.get(f"http://127.0.0.1:{port}/api/sagas").status_code == 401
    finally:
        served.send_signal(signal.SIGINT)
        out, _ = served.communicate(timeout=30)
    assert f"at http://127.0.0.1:{port}/ (the UI token is required" in out
