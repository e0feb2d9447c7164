"""Lifespans: resources the tools need (a pool, a client), set up once per process."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType
from typing import Any

import anyio

__all__ = ["LifespanFunction", "Resources"]

#: An async generator function yielding the tools' state (a mapping) once.
LifespanFunction = Callable[[], AsyncIterator[Mapping[str, Any]]]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def check_lifespan(function: Any) -> LifespanFunction:
    """Return `function` if it can be a lifespan; else raise `TypeError`."""
    if not inspect.isasyncgenfunction(function):
        raise TypeError(
            f"a lifespan must be an async generator function (async def ... yield {{...}}), got {function!r}"
        )
    if any(
        p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in inspect.signature(function).parameters.values()
    ):
        raise TypeError(f"a lifespan takes no arguments: {function.__qualname__}")
    checked: LifespanFunction = function
    return checked


class Resources:
    """An executor's lifespan: entered before its first tool, left when it closes."""

    __slots__ = ("_function", "_lock", "_stack", "entered", "state")

    def __init__(self, function: LifespanFunction | None) -> None:
        self._function = function
        self._lock = anyio.Lock()
        self._stack: contextlib.AsyncExitStack | None = None
        self.entered = function is None
        self.state: Mapping[str, Any] = _EMPTY

    async def enter(self) -> None:
        """Enter the lifespan once; a failure raises and leaves it unentered."""
        if self.entered:
            return
        async with self._lock:
            if self.entered or self._function is None:
                return
            stack = contextlib.AsyncExitStack()
            try:
                state: Any = await stack.enter_async_context(contextlib.asynccontextmanager(self._function)())
            except BaseException:
                await stack.aclose()
                raise
            if not isinstance(state, Mapping):
                await stack.aclose()
                raise TypeError(
                    f"lifespan {self._function.__qualname__} yielded {type(state).__name__}; yield a mapping "
                    "(tools read it as ctx.state)"
                )
            self._stack, self.state, self.entered = stack, MappingProxyType(dict(state)), True

    async def exit(self) -> None:
        """Leave the lifespan if entered; it may be entered again."""
        async with self._lock:
            stack, self._stack = self._stack, None
            if stack is None:
                return
            self.entered, self.state = self._function is None, _EMPTY
            await stack.aclose()
