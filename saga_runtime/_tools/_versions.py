"""Tool versions, and `NOT_DONE`, reconciliation's answer for an effect that did not happen."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, final

__all__ = ["NOT_DONE", "NotDone", "check_versions"]


@final
class NotDone:
    """The type of `NOT_DONE`."""

    _instance: NotDone | None = None

    def __new__(cls) -> NotDone:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_DONE"

    def __reduce__(self) -> str:
        return "NOT_DONE"


#: Returned by `reconcile` when the effect did not happen (the step may run again).
NOT_DONE: Final = NotDone()


def check_versions(owner: str, version: Any, compatible: Any) -> tuple[str, tuple[str, ...]]:
    """Return a tool's version and older accepted ones; raise `TypeError`/`ValueError` if unfit."""
    if not isinstance(version, str):
        raise TypeError(f"{owner}: version must be a string such as '2', got {type(version).__name__} {version!r}")
    if not version or version != version.strip():
        raise ValueError(f"{owner}: version must be a non-empty string without surrounding spaces, got {version!r}")
    if isinstance(compatible, str) or not isinstance(compatible, Iterable):
        raise TypeError(f"{owner}: compatible must be a tuple of version strings such as ('1',), got {compatible!r}")
    accepted = tuple(compatible)
    for item in accepted:
        if not isinstance(item, str) or not item:
            raise TypeError(f"{owner}: compatible must hold version strings, got {item!r} in {compatible!r}")
    return version, accepted
