"""The console's guards fuzzed over HTTP, in process: a hostile header, cookie or field is refused, never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from console_helpers import BASE, copy_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from saga_runtime._console import create_app
from saga_runtime._console._guard import CSRF_COOKIE, CSRF_FIELD, SESSION_COOKIE, Guard

TOKEN = "the console token of the fuzz test"
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)

# What a client can put in a header: latin-1 text (as ASGI servers decode it), often non-ASCII.
_latin1 = st.text(st.characters(min_codepoint=1, max_codepoint=255, exclude_characters="\r\n;,"), max_size=40)
hostile = st.one_of(
    st.just(""),
    st.just("é"),
    st.just("\u00ff" * 64),
    st.just("x" * 20_000),  # huge
    st.sampled_from(["[::1", "http://[", "null", "\u00e9vil.test"]),
    _latin1,
)


@pytest.fixture
def console(template: Path, tmp_path: Path) -> Iterator[TestClient]:
    """Yield a client of a console with a token, answering a 500 as a response (not raising)."""
    app = create_app(copy_store(template, tmp_path), token=TOKEN)
    with TestClient(app, base_url=BASE, follow_redirects=False, raise_server_exceptions=False) as opened:
        yield opened


def raw(value: str) -> bytes:
    """Return a header value as a client sends it: latin-1 bytes."""
    return value.encode("latin-1")


def test_guard_comparisons_refuse_non_ascii_and_empty_values() -> None:
    """Guard's token, session and CSRF checks answer False (never raise) for non-ASCII, empty or odd values."""
    guard = Guard(TOKEN)
    nonce = guard.new_nonce()
    for value in ("é", "\u00ff" * 64, "\ud800", "", "x" * 100_000, "日本"):
        assert guard.token_matches(value) is False
        assert guard.session_matches(value) is False
        assert guard.csrf_matches(nonce, value) is False
        assert guard.csrf_matches(value, guard.csrf_token(nonce)) is False
    assert guard.csrf_matches(nonce, guard.csrf_token(nonce)) is True
    assert Guard("tökén").token_matches("tökén") is True


@FUZZ
@given(session=hostile, bearer=hostile, query=hostile)
def test_a_hostile_credential_on_a_read_is_refused_not_a_500(
    console: TestClient, session: str, bearer: str, query: str
) -> None:
    """A session cookie, Bearer token or token query of any text gets the login (303) or 401, never a 500."""
    headers = [(b"cookie", raw(f"{SESSION_COOKIE}={session}")), (b"authorization", raw(f"Bearer {bearer}"))]
    page = console.get("/", params={"token": query}, headers=headers)
    assert page.status_code == 303, page.text
    api = console.get("/api/sagas", params={"token": query}, headers=headers)
    assert api.status_code == 401, api.text


@FUZZ
@given(nonce=hostile, field=hostile, token=hostile)
def test_a_hostile_csrf_cookie_or_field_on_a_form_is_refused_not_a_500(
    console: TestClient, nonce: str, field: str, token: str
) -> None:
    """The login and action forms with any CSRF cookie, CSRF field or token answer 403 (or 401), never a 500."""
    headers = [(b"cookie", raw(f"{CSRF_COOKIE}={nonce}; {SESSION_COOKIE}={nonce}"))]
    form = {CSRF_FIELD: field, "token": token, "saga_id": "refund-A-0990", "step_id": "refund", "by": "m"}
    login = console.post("/login", data=form, headers=headers)
    assert login.status_code == 403, login.text
    act = console.post("/actions/approve", data=form, headers=headers)
    assert act.status_code == 401, act.text
    out = console.post("/logout", data=form, headers=headers)
    assert out.status_code == 403, out.text


@FUZZ
@given(host=hostile, origin=hostile, site=hostile)
def test_a_hostile_host_or_origin_is_refused_not_a_500(console: TestClient, host: str, origin: str, site: str) -> None:
    """Any Host, Origin or Sec-Fetch-Site header gets an answer below 500; a foreign Host gets 421."""
    page = console.get("/login", headers=[(b"host", raw(host))])
    assert page.status_code in (200, 421), page.text
    headers = [(b"origin", raw(origin)), (b"sec-fetch-site", raw(site)), (b"authorization", raw(f"Bearer {TOKEN}"))]
    act = console.post("/api/actions/unpark", json={"saga_id": "nothing"}, headers=headers)
    assert act.status_code < 500, act.text
    form = console.post("/login", data={CSRF_FIELD: "0"}, headers=[(b"origin", raw(origin))])
    assert form.status_code == 403, form.text


def test_repeated_and_huge_headers_and_cookies_are_refused_not_a_500(console: TestClient) -> None:
    """Repeated cookie, Authorization and Host headers and a 1 MB cookie are refused like any wrong credential."""
    session = f"{SESSION_COOKIE}=é"
    repeated = [
        (b"cookie", raw(session)),
        (b"cookie", raw(f"{SESSION_COOKIE}={'ÿ' * 64}")),
        (b"cookie", raw(f"{CSRF_COOKIE}=é; {CSRF_COOKIE}=ü")),
        (b"authorization", raw("Bearer é")),
        (b"authorization", raw("Bearer ")),
        (b"authorization", b""),
    ]
    assert console.get("/api/sagas", headers=repeated).status_code == 401
    assert console.get("/", headers=repeated).status_code == 303
    assert console.post("/login", data={CSRF_FIELD: "é", "token": "é"}, headers=repeated).status_code == 403
    huge = [(b"cookie", raw(f"{SESSION_COOKIE}={'é' * 1_000_000}"))]
    assert console.get("/api/sagas", headers=huge).status_code == 401
    hosts = [(b"host", b"127.0.0.1:8765"), (b"host", raw("évil.test"))]
    assert console.get("/login", headers=hosts).status_code < 500


@pytest.mark.parametrize("value", ["[::1", "[", "http://[", "http://[::1", "[::1]:x"])
def test_a_malformed_host_or_origin_is_refused_not_a_500(console: TestClient, value: str) -> None:
    """A Host or Origin that is no address (an unclosed IPv6 bracket) is refused (421, 403), never a 500."""
    assert console.get("/login", headers=[(b"host", raw(value))]).status_code in (200, 421)
    headers = [(b"origin", raw(value)), (b"authorization", raw(f"Bearer {TOKEN}"))]
    assert console.post("/api/actions/unpark", json={"saga_id": "nothing"}, headers=headers).status_code == 403
    assert console.post("/login", data={CSRF_FIELD: "0"}, headers=[(b"origin", raw(value))]).status_code == 403


def test_an_api_action_with_a_json_body_nested_too_deep_is_refused_not_a_500(console: TestClient) -> None:
    """A JSON body nested past the parser's limit is a 400 like any body that is no JSON object, never a 500."""
    headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    for body in ("[" * 100_000 + "]" * 100_000, '{"saga_id": ' + "[" * 5_000 + "]" * 5_000 + "}"):
        answer = console.post("/api/actions/unpark", content=body, headers=headers)
        assert answer.status_code == 400, answer.text
