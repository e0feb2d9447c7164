"""Signing keys for the hash chain, as every store accepts them."""

from __future__ import annotations

__all__ = ["signing_key_bytes"]


def signing_key_bytes(key: bytes | str | None) -> bytes | None:
    """Return a signing key as bytes (a str is taken as UTF-8); refuse an empty one."""
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, bytes) or not key:
        raise ValueError("signing_key must be non-empty bytes or str")
    return key
