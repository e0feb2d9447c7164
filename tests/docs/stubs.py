"""The outside world the docs' blocks say the reader supplies: fakes of a payment provider, a warehouse, a carrier.

A database pool (`create_pool`) stands for the resources a registry's lifespan sets up.

Each fake records its calls and returns an id; a call whose arguments mention "Atlantis" (the address no carrier
serves) raises ConnectionError, so the docs' failing orders fail as they say.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any


class Service:
    """A fake client: every method records its call and returns a fresh id (async methods when `is_async`)."""

    def __init__(self, name: str, *, is_async: bool = True) -> None:
        self.name = name
        self.is_async = is_async
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._ids = itertools.count(1)

    def _call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        self.calls.append((method, args, kwargs))
        if any("Atlantis" in str(value) for value in (*args, *kwargs.values())):
            raise ConnectionError(f"the {self.name} does not deliver to {args[0]!r}")
        return f"{self.name}-{method}-{next(self._ids)}"

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        if self.is_async:

            async def call_async(*args: Any, **kwargs: Any) -> str:
                return self._call(method, args, kwargs)

            return call_async
        return lambda *args, **kwargs: self._call(method, args, kwargs)


class Pool:
    """A fake connection pool: `fetch` returns an id while it is open; `close` closes it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.closed = False
        self._ids = itertools.count(1)

    async def fetch(self, query: str, *args: Any) -> str:
        if self.closed:
            raise RuntimeError("the pool is closed")
        return f"row-{next(self._ids)}"

    async def close(self) -> None:
        self.closed = True


async def create_pool(url: str) -> Pool:
    """Open a fake pool, as asyncpg.create_pool would open a real one."""
    return Pool(url)


def world() -> dict[str, Any]:
    """Return fresh fakes under the names the docs use for the reader's own clients."""
    return {
        "payments": Service("payments"),
        "warehouse": Service("warehouse", is_async=False),
        "carrier": Service("carrier"),
        "hotels": Service("hotels"),
        "airline": Service("airline"),
        "cars": Service("cars"),
        "bank": Service("bank"),
        "mailer": Service("mailer"),
        "create_pool": create_pool,
    }
