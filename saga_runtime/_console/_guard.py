"""What keeps the console safe: the loopback rule, the UI token, sessions, CSRF tokens and the response headers.

Every secret here is kept per process: restarting the console logs everyone out and voids every open form, which
is the point. Tokens are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "TOKEN_VAR",
    "Guard",
    "is_loopback",
]

TOKEN_VAR = "SAGA_RUNTIME_UI_TOKEN"
SESSION_COOKIE = "saga_console_session"
CSRF_COOKIE = "saga_console_csrf"
CSRF_FIELD = "csrf_token"

# Pages load their script and style from the console itself only; no frame may hold them (clickjacking); inline
# style attributes carry only the numbers the timeline computes (the bars' positions), never record content.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # no address of the console leaves it; its own forms keep their Origin
    "cache-control": "no-store",
}


def is_loopback(host: str) -> bool:
    """Tell whether `host` (an address or `localhost`) only listens on this machine."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a name that resolves elsewhere, or 0.0.0.0 / :: (every interface)


def _bytes(text: str) -> bytes:
    # Lone surrogates too: a wrong credential is refused, never an error.
    return text.encode("utf-8", "surrogatepass")


def _same(given: str, expected: str) -> bool:
    """Compare in constant time as bytes (compare_digest raises TypeError on non-ASCII str)."""
    return hmac.compare_digest(_bytes(given), _bytes(expected))


class Guard:
    """The console's token and its per-process secret: sessions for the token, and CSRF tokens for forms."""

    def __init__(self, token: str | None) -> None:
        if token is not None and not token.strip():
            raise ValueError(f"the UI token is empty: set {TOKEN_VAR} or --token to a long random string")
        self.token = token
        self._secret = secrets.token_bytes(32)

    def _sign(self, purpose: str, value: str) -> str:
        return hmac.new(self._secret, _bytes(f"{purpose}\0{value}"), hashlib.sha256).hexdigest()

    def token_matches(self, given: str | None) -> bool:
        """Tell whether `given` is the UI token (always True when no token is set)."""
        if self.token is None:
            return True
        return given is not None and _same(given, self.token)

    def session_value(self) -> str:
        """Return the session cookie's value for a person who gave the token (never the token itself)."""
        return self._sign("session", self.token or "")

    def session_matches(self, cookie: str | None) -> bool:
        """Tell whether a session cookie was given by this process for the current token."""
        if self.token is None:
            return True
        return cookie is not None and _same(cookie, self.session_value())

    @staticmethod
    def new_nonce() -> str:
        """Return a fresh random value for the CSRF cookie."""
        return secrets.token_urlsafe(24)

    def csrf_token(self, nonce: str) -> str:
        """Return the hidden form field that goes with the CSRF cookie `nonce`."""
        return self._sign("csrf", nonce)

    def csrf_matches(self, nonce: str | None, field: str | None) -> bool:
        """Tell whether a form's CSRF field was signed by this process for the browser's CSRF cookie."""
        if not nonce or not field:
            return False
        return _same(field, self.csrf_token(nonce))
