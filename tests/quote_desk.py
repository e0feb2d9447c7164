"""Quote tools for the join-mode tests, live and after a crash: the test decides who finishes, fails, and when.

A gated call waits for the test to release it, so the test (not the scheduler or a clock) decides the order:
a saga runs in a task group next to a script that waits for the members to start, then releases them.
`anyio.wait_all_tasks_blocked()` lets the engine settle what one release caused before the next.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from saga_runtime import SagaExecutor, SagaResult, StepContext, ToolRegistry

# A handshake that never completes would hang a broken engine; this bound turns the hang into a failure.
HANDSHAKE = 10.0

T = TypeVar("T")


def price(name: str) -> int:
    """Return the price Quote gives for `name`."""
    return 100 + ord(name[0])


def quote(name: str) -> dict[str, Any]:
    """Return the result Quote gives for `name`."""
    return {"quote": name, "price": price(name)}


def quotes(names: str, tool: str = "Quote") -> list[dict[str, Any]]:
    """Return plan steps of `tool`, one per name, each with its name as step id."""
    return [{"id": n, "tool": tool, "args": {"name": n}} for n in names]


def group(tool: str, names: str, join: str, gid: str = "q", **extra: Any) -> dict[str, Any]:
    """Return a group dict of one step per name (its id the name)."""
    return {"group": quotes(names, tool), "join": join, "id": gid, **extra}


def use(ref: str = "q", step_id: str = "use") -> dict[str, Any]:
    """Return a Use step whose argument is a `$ref` to `ref`."""
    return {"id": step_id, "tool": "Use", "args": {"quote": {"$ref": ref}}}


HOLD: dict[str, Any] = {"id": "hold", "tool": "Hold", "args": {"name": "hold"}}


def statuses(result: SagaResult) -> dict[str, str]:
    """Return each step's status name by id."""
    return {s.step_id: s.status.value for s in result.steps}


async def scripted(work: Callable[[], Awaitable[T]], script: Callable[[], Awaitable[None]]) -> T:
    """Run `work` in a task next to `script` (which releases the tools); return what `work` returned."""
    out: list[T] = []

    async def main() -> None:
        out.append(await work())

    with anyio.fail_after(HANDSHAKE):
        async with anyio.create_task_group() as tg:
            tg.start_soon(main)
            await script()
    return out[0]


class Desk:
    """Quote tools whose gated calls wait to be released; failing names raise once released.

    `gated` names the calls that wait; None gates every call.
    """

    def __init__(self, gated: str | None = None) -> None:
        self.gated = None if gated is None else set(gated)
        self.started: dict[str, anyio.Event] = {}
        self.go: dict[str, anyio.Event] = {}
        self.failing: set[str] = set()
        self.log: list[tuple[Any, ...]] = []
        self.registry = ToolRegistry()
        desk = self

        @self.registry.tool
        class Quote:
            """A provider's quote; its effect is a reservation, released by compensate()."""

            async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
                return await desk.work(name, ctx)

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                desk.log.append(("undo", ctx.args["name"], result))

        @self.registry.tool
        class Peek:
            """A read-only quote: nothing to undo."""

            async def execute(self, name: str, ctx: StepContext) -> dict[str, Any]:
                return await desk.work(name, ctx)

        @self.registry.tool
        class Hold:
            """An earlier effect that a failing saga must undo."""

            async def execute(self, name: str) -> dict[str, Any]:
                desk.log.append(("do", name))
                return {"held": name}

            async def compensate(self, result: Any, ctx: StepContext) -> None:
                desk.log.append(("undo", ctx.args["name"], result))

        @self.registry.tool
        class Use:
            """A later step: records what its `$ref` gave it."""

            async def execute(self, quote: Any) -> Any:
                desk.log.append(("use", quote))
                return quote

        @self.registry.tool
        class Boom:
            """A later step that fails."""

            async def execute(self) -> None:
                desk.log.append(("do", "boom"))
                raise RuntimeError("boom")

    def _event(self, table: dict[str, anyio.Event], name: str) -> anyio.Event:
        if name not in table:
            table[name] = anyio.Event()
        return table[name]

    async def work(self, name: str, ctx: StepContext) -> dict[str, Any]:
        """Start, wait to be released if gated, then succeed or fail as the test said."""
        self.log.append(("do", name, ctx.idempotency_key, ctx.attempt))
        if self.gated is None or name in self.gated:
            self._event(self.started, name).set()
            try:
                await self._event(self.go, name).wait()
            except anyio.get_cancelled_exc_class():
                self.log.append(("cancelled", name))
                raise
        if name in self.failing:
            raise RuntimeError(f"{name} is down")
        return quote(name)

    async def wait_started(self, *names: str) -> None:
        """Return once every named call has started."""
        for name in names:
            await self._event(self.started, name).wait()

    def release(self, *names: str) -> None:
        """Let the named calls finish, in this order, in one go (no yield in between)."""
        for name in names:
            self._event(self.go, name).set()

    def releasing(self, started: str, *batches: str) -> Callable[[], Awaitable[None]]:
        """Return a script: wait for `started` to start, then release each batch, the engine settling in between."""

        async def script() -> None:
            await self.wait_started(*started)
            for i, batch in enumerate(batches):
                if i:
                    await anyio.wait_all_tasks_blocked()
                self.release(*batch)

        return script

    async def race(self, plan: list[Any], started: str, *batches: str) -> SagaResult:
        """Run `plan` on a fresh executor while `releasing(started, *batches)` releases its calls."""
        return await scripted(lambda: SagaExecutor(self.registry).run(plan), self.releasing(started, *batches))

    def ran(self) -> Counter[str]:
        """Return how often each name was executed."""
        return Counter(entry[1] for entry in self.log if entry[0] == "do")

    def undone(self) -> list[tuple[Any, ...]]:
        """Return the compensations made, in order: (name, result given)."""
        return [entry[1:] for entry in self.log if entry[0] == "undo"]

    def cancelled(self) -> list[str]:
        """Return the calls cancelled while they waited."""
        return [entry[1] for entry in self.log if entry[0] == "cancelled"]

    def used(self) -> list[Any]:
        """Return what the later Use steps received."""
        return [entry[1] for entry in self.log if entry[0] == "use"]
