"""Siblings: the steps of one group as plain asyncio tasks, each in a cancel scope, cancelled together.

Why not an anyio task group: it costs about three times as much per task as a plain asyncio task, which a group
of a hundred steps feels. Why not `asyncio.TaskGroup`: it cancels its tasks natively, on the spot, even a step
undoing its effect in a shielded scope or one about to resume with its result; anyio's cancel scopes wait for
both, and the engine relies on that (an undo is never cut short; a step that finished keeps its outcome).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

__all__ = ["Siblings"]


class Siblings:
    """Run steps as tasks, wait for all of them, and cancel them all when one asks (or the waiting caller leaves).

    Each step runs in an anyio cancel scope of its own, and `cancel()` cancels them all: what cancelling an
    anyio task group's scope does to its tasks (a step not started yet runs up to its first wait). A step that
    raises an exception (a bug: steps record their failures) cancels the others, and the exceptions leave
    `wait()` in an exception group.
    """

    __slots__ = ("_done", "_errors", "_loop", "_pending", "_scopes", "cancelled")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._scopes: set[anyio.CancelScope] = set()
        self._pending = 0
        self._done: asyncio.Future[None] | None = None
        self._errors: list[BaseException] = []
        self.cancelled = False

    def start(self, step: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        """Start `step(*args)` in a task of the group."""
        self._pending += 1
        self._loop.create_task(self._run(step, args)).add_done_callback(self._finished)

    async def _run(self, step: Callable[..., Coroutine[Any, Any, None]], args: tuple[Any, ...]) -> None:
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            if self.cancelled:
                scope.cancel()
            try:
                await step(*args)
            finally:
                self._scopes.discard(scope)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._pending -= 1
        error = None if task.cancelled() else task.exception()
        if error is not None:
            self._errors.append(error)
            self.cancel()
        if not self._pending and self._done is not None and not self._done.done():
            self._done.set_result(None)

    def cancel(self) -> None:
        """Cancel every step of the group (the one calling, if any, at its next wait)."""
        self.cancelled = True
        for scope in self._scopes:
            scope.cancel()

    async def wait(self) -> None:
        """Return once every step has ended; if the caller is cancelled meanwhile, cancel them, wait, re-raise."""
        caught: BaseException | None = None
        while self._pending:
            self._done = self._loop.create_future()
            try:
                if caught is None:
                    await self._done
                else:
                    # anyio delivers a scope's cancellation again at every turn of the loop: once the steps are
                    # cancelled, wait for them shielded, or this loop would spin while they finish shielded work.
                    with anyio.CancelScope(shield=True):
                        await self._done
            except asyncio.CancelledError as exc:
                caught = caught or exc
                self.cancel()
        if self._errors:
            raise BaseExceptionGroup("unhandled errors in a group of steps", self._errors)
        if caught is not None:
            raise caught
