"""Count a store's calls: the public coroutine methods a test's code path asks of it, in order."""

from __future__ import annotations

import functools
import inspect
from typing import Any


def count_calls(store: Any, calls: list[str]) -> None:
    """Log each call of the store's public coroutine methods to `calls` (a method calling another counts once)."""
    depth = [0]
    for name, method in inspect.getmembers(store, inspect.iscoroutinefunction):
        if not name.startswith("_"):

            @functools.wraps(method)
            async def counted(*args: Any, __name: str = name, __method: Any = method, **kwargs: Any) -> Any:
                if not depth[0]:
                    calls.append(__name)
                depth[0] += 1
                try:
                    return await __method(*args, **kwargs)
                finally:
                    depth[0] -= 1

            setattr(store, name, counted)
