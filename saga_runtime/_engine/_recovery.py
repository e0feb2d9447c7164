"""The recovery worker: take over sagas whose owner is gone (a saga function is resumed, a plain dynamic saga
compensated), and go on with WAITING sagas once due (read page by page: not every waiting saga function is)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import datetime
from typing import Any

import anyio
import anyio.lowlevel

from saga_runtime._engine import _journal
from saga_runtime._engine._approvals import Decisions
from saga_runtime._engine._calls import awaited_topic, due, due_with
from saga_runtime._engine._cancellation import Shelters
from saga_runtime._engine._claim import Claim, Drives
from saga_runtime._engine._driver import Planner, drive, work_of
from saga_runtime._engine._events import SagaEvent, emit
from saga_runtime._engine._journal import waits_for_tools
from saga_runtime._engine._lineage import through_parent
from saga_runtime._engine._saga import SagaEngine
from saga_runtime._engine._versions import unfit, unfit_note
from saga_runtime._exceptions import LeaseLostError, PlanValidationError, StoreError
from saga_runtime._records import (
    SagaResult,
    SagaRow,
    SagaStatus,
    StepRow,
    StepStatus,
    WaitingKind,
    function_of,
    now,
    saga_wake,
)
from saga_runtime._storage import approvals_of, cancel_requested, has, messages_for, queues_of, waits_of

__all__ = ["Recovery"]

logger = logging.getLogger("saga_runtime")

_WARNED_MAX = 10_000  # sagas remembered as warned about (then forgotten, and warned about again)


class Recovery:
    """Drive to an end the sagas nobody drives: orphans whose lease expired, and WAITING sagas now due."""

    __slots__ = ("_concurrency", "_decisions", "_drives", "_max_attempts", "_nudged", "_planner", "_resting", "_warned")

    def __init__(self, drives: Drives, planner: Planner, *, max_attempts: int, concurrency: int) -> None:
        self._drives = drives
        self._planner = planner
        self._decisions = Decisions(drives.config)
        self._max_attempts = max_attempts
        self._concurrency = concurrency
        # The sagas (and their missing tools) this worker warned about already.
        self._warned: set[tuple[str, tuple[str, ...]]] = set()
        # A decision, unpark or retry heard while a round ran: the next rest ends at once.
        self._nudged = False
        self._resting: anyio.Event | None = None

    def nudge(self) -> None:
        """End the current or next rest between rounds now: something was made ready for a worker to go on with."""
        self._nudged = True
        if self._resting is not None:
            self._resting.set()

    async def wake_workers(self, saga_id: str | None = None) -> None:
        """Wake idle workers to go on with what was just made ready (PostgreSQL: NOTIFY; memory: its own): the
        saga `saga_id` (they go straight to it), else whatever their recovery finds."""
        try:
            store = self._drives.config.store
            if has(store, "queues"):
                await queues_of(store).notify_workers("" if saga_id is None else saga_wake(saga_id))
        except StoreError as exc:  # what was recorded stands; workers find it within their interval
            logger.warning("could not wake the workers (they poll instead): %s", exc)

    async def rest(self, seconds: float) -> bool:
        """Wait `seconds` before the next round, or less when nudged; return whether it was nudged."""
        if not self._nudged:
            self._resting = resting = anyio.Event()
            with anyio.move_on_after(seconds):
                await resting.wait()
            self._resting = None
        nudged, self._nudged = self._nudged, False
        await anyio.lowlevel.checkpoint()
        return nudged

    def missing_tools(self, saga: SagaRow, rows: list[StepRow]) -> list[str]:
        """Return the tools of a saga's steps (those never started included) this executor's registry lacks, or
        cannot resume (a version it does not accept, arguments of an accepted older version it refuses).
        """
        return [text for _, text in self.lacking(saga, rows)]

    def lacking(self, saga: SagaRow, rows: list[StepRow]) -> list[tuple[WaitingKind, str]]:
        """Return what this executor lacks to run the saga ("tool" or "version", and which), as `missing_tools`."""
        return unfit(self._drives.config.registry, saga, rows)

    async def note_lacking(self, saga_id: str, lacking: list[tuple[WaitingKind, str]]) -> None:
        """Note on a saga left undriven what this executor lacks to run it (its `waiting_for`); never raises."""
        config = self._drives.config
        try:
            await _journal.note_waiting(config.store, saga_id, unfit_note(lacking, by=config.executor_id))
        except Exception as exc:  # a note never stops a worker
            logger.warning("saga %s: could not note why it waits: %s", saga_id, exc)

    async def recover(self, limit: int, shelters: Shelters | None = None) -> list[SagaResult]:
        """Go on with decided sagas, then take over every live saga whose owner is gone; return what finished.

        `shelters`: those of the `serve()` this recovery runs in (its stop lets their running calls return).
        """
        config = self._drives.config
        results = await self.go_on_waiting(limit, shelters)
        passed_over: set[str] = set()
        while True:
            started = now()
            claimed = await _journal.claim_expired(
                config.store, config.executor_id, self._drives.claims.lease_until(started), started, limit
            )
            fresh: list[tuple[SagaRow, list[StepRow]]] = []
            for saga, rows in claimed:
                lacking = self.lacking(saga, rows)
                # A child whose parent is live is driven through its parent only (saga_runtime._engine._children).
                if (
                    saga.saga_id in passed_over
                    or lacking
                    or (saga.parent_id and await through_parent(config.store, saga))
                ):
                    if lacking:
                        self._waits(saga, lacking)
                    passed_over.add(saga.saga_id)
                    await self._drives.claims.give_back(saga, config.executor_id)  # still its crashed owner's
                    continue
                fresh.append((saga, rows))
            results.extend(await self._recover_batch(fresh, shelters))
            if not fresh:
                if len(claimed) < limit:
                    return results
                # A full batch of sagas this executor cannot run hid the rest: look further.
                limit *= 2

    async def take_back(self, page: int = 500) -> list[SagaResult]:
        """Drive to an end the live sagas this executor's id still owns (the same process identity restarted).

        Their leases are not waited for: two live processes never share an id (documented), so none renews them.
        """
        config = self._drives.config
        batch = []
        for saga_id in await self._owned(page):
            if saga_id in self._drives:
                continue
            stored = await config.store.load_saga(saga_id)
            if (
                stored is not None
                and stored[0].owner == config.executor_id
                and not self.missing_tools(*stored)
                and not (
                    stored[0].parent_id and await through_parent(config.store, stored[0])
                )  # its parent takes it back
            ):
                batch.append(stored)
        if batch:
            logger.info("%s: taking back %d sagas it owned before a restart", config.executor_id, len(batch))
        return await self._recover_batch(batch)

    async def _owned(self, page: int) -> dict[str, datetime | None]:
        """Return the live sagas this executor's id owns in the store, each with its lease's expiry."""
        config = self._drives.config
        owned: dict[str, datetime | None] = {}
        for status in (SagaStatus.RUNNING, SagaStatus.COMPENSATING):
            offset = 0
            while rows := await config.store.list_rows(status, page, offset, owner=config.executor_id):
                owned.update((saga.saga_id, saga.lease_expires_at) for saga, _ in rows)
                offset += page
        return owned

    def _waits(self, saga: SagaRow, lacking: list[tuple[WaitingKind, str]]) -> None:
        """Say in the saga's error which tools it waits for; warn once per worker and saga, not at every pass."""
        missing = [text for _, text in lacking]
        waits_for_tools(saga, missing, unfit_note(lacking, by=self._drives.config.executor_id))
        self._warn_once(saga.saga_id, missing, saga.error or "")

    def _warn_once(self, saga_id: str, missing: list[str], message: str) -> bool:
        """Warn that the saga is left for what this worker lacks, once; return whether it warned (first time)."""
        if (saga_id, tuple(missing)) in self._warned:
            return False
        if len(self._warned) >= _WARNED_MAX:
            self._warned.clear()
        self._warned.add((saga_id, tuple(missing)))
        logger.warning("saga %s: %s", saga_id, message)
        return True

    async def _recover_batch(
        self, batch: list[tuple[SagaRow, list[StepRow]]], shelters: Shelters | None = None
    ) -> list[SagaResult]:
        """Drive a claimed batch of sagas, `concurrency` at a time; return the results, in batch order."""
        done: list[SagaResult | None] = [None] * len(batch)
        limiter = anyio.CapacityLimiter(self._concurrency)

        async def drive(index: int, saga: SagaRow, rows: list[StepRow]) -> None:
            begun = False
            try:
                async with limiter:
                    if shelters is not None and shelters.stopping:  # its worker stops: the next one takes it now
                        return
                    begun = True
                    done[index] = await self.drive_claimed(saga, rows, orphan=True, shelters=shelters)
            finally:
                if not begun:  # stopped (or cancelled) while it waited its turn: claimed, never driven
                    await self._drives.claims.give_back(saga, self._drives.config.executor_id)

        async with anyio.create_task_group() as tg:
            for index, (saga, rows) in enumerate(batch):
                tg.start_soon(drive, index, saga, rows)
        return [result for result in done if result is not None]

    async def drive_claimed(
        self,
        saga: SagaRow,
        rows: list[StepRow],
        *,
        orphan: bool = False,
        shelters: Shelters | None = None,
        queue: str | None = None,
    ) -> SagaResult | None:
        """Drive a saga this executor claimed (an orphan, or a queued saga it started from `queue`); None if lost.

        Claimed again right before it is driven: while it waited its turn, its lease may have run out and another
        executor taken it. Under a serving worker (`shelters`), its stop lets the running calls return.
        """
        bound = self._drives.config.compensation_timeout
        with nullcontext() if shelters is None else shelters.shelter(bound, saga.saga_id):
            try:
                async with self._drives.claim(saga, rows, take="orphan" if orphan else "queued") as held:
                    if held is not None:
                        if orphan and self._drives.config.hooks:
                            emit(
                                self._drives.config.hooks,
                                SagaEvent("saga_taken_over", saga.saga_id, status=saga.status.value),
                            )
                        return await self._recover_one(held, shelters, queue)
            except LeaseLostError as exc:
                logger.warning("saga %s: %s", saga.saga_id, exc)
        return None

    async def _recover_one(self, held: Claim, shelters: Shelters | None, queue: str | None) -> SagaResult | None:
        saga = held.saga
        if saga.recovery_attempts >= self._max_attempts:
            return await held.park(f"recovery failed {saga.recovery_attempts} times")
        if queue is not None and not saga.recovery_attempts:  # a start, not a crash
            logger.info("saga %s: starting, from queue %r", saga.saga_id, queue)
        else:
            attempt = saga.recovery_attempts + 1
            logger.info("saga %s: recovering (attempt %d), left %s", saga.saga_id, attempt, saga.status)
        try:
            try:
                work = work_of(self._planner, saga)
            except PlanValidationError as exc:
                if saga.kind != "plan":  # a saga function's code changed meanwhile: left for a worker that has it
                    await held.release()
                    self._warn_once(saga.saga_id, ["saga function"], f"left for a worker that can resume it: {exc}")
                    return None
                # The tools changed under the saga: no retry can help. Its problems only: the error's header is
                # for a refused plan, and this one's steps ran.
                ran = sum(1 for row in held.rows if row.attempts)
                return await held.park(
                    f"its plan no longer validates against this executor's tools, and {ran} step(s) of it ran "
                    f"already (a tool changed without a new version=): {'; '.join(exc.problems)}"
                )
            # No caller: if this worker stops, the saga stays for the next recovery.
            engine = held.start(detached=True, shelters=shelters)
            await _count_attempt(engine)
            engine.emit("saga_started", queue=queue)
            if work is not None and held.may_have_a_cancel:
                await _honour_cancel(engine)
            return await drive(engine, work, self._planner, resumed=bool(held.rows) or held.taken_over)
        except LeaseLostError as exc:
            logger.warning("saga %s: %s", saga.saga_id, exc)
            return None
        except Exception as exc:
            logger.error("saga %s: recovery attempt %d failed: %s", saga.saga_id, saga.recovery_attempts, exc)
            return None

    async def go_on_waiting(self, limit: int, shelters: Shelters | None = None) -> list[SagaResult]:
        """Reject the requests whose deadline passed; go on with each WAITING saga whose requests are decided."""
        await self._decisions.expire_due(limit)
        results: list[SagaResult] = []
        offset = 0
        store = self._drives.config.store
        if not has(store, "waits"):
            return results
        while page := await waits_of(store).waiting_sagas(now(), limit, offset):
            for saga_id in page:
                try:
                    # Listed as due (its wake time passed, or a message, decision or cancel came): claimed at once.
                    result = await self.go_on(saga_id, detached=True, shelters=shelters, look=False)
                except LeaseLostError as exc:
                    logger.warning("saga %s: %s", saga_id, exc)
                    continue
                except Exception as exc:
                    logger.error("saga %s: going on after its approvals failed: %s", saga_id, exc)
                    continue
                if result is not None:
                    results.append(result)
            offset += limit
            if len(page) < limit:
                return results
        return results

    async def go_on(
        self,
        saga_id: str,
        *,
        detached: bool = False,
        shelters: Shelters | None = None,
        look: bool = True,
        parent: str | None = None,
    ) -> SagaResult | None:
        """Drive a WAITING saga whose requests are all decided (a saga function: once due), until its next wait or
        its end. None when it is not for this executor (held elsewhere, undecided, not due, tools missing).

        A child saga whose parent is live is left (None) unless `parent` (that parent's step, which alone drives
        it) asks. It is claimed, and read as claimed, then let go if it may not go on. `look`: read it first, and
        claim it only if this executor has what it needs to run it (a saga listed as due: another worker may have it).
        """
        config = self._drives.config
        if config.resources is not None:
            await config.resources.enter()  # the tools' lifespan, before any of them runs
        store = config.store
        if look:
            stored = await store.load_saga(saga_id)
            if stored is None or stored[0].status is not SagaStatus.WAITING:
                return None
            if stored[0].parent_id and await through_parent(store, stored[0], parent=parent):
                return None  # its parent's step goes on with it
            if not await self._fit(*stored):
                return None
        async with self._drives.claim_waiting(saga_id) as held:
            if held is None:
                return None
            saga = held.saga
            if not look and saga.parent_id and await through_parent(store, saga, parent=parent):
                await self._let_go(held)  # its parent's step goes on with it
                return None
            function = function_of(saga.plan)
            if function is None and saga.kind != "plan":
                await held.release()  # a dynamic saga's code goes on when entered again
                return None
            lacking = [] if look else self.lacking(saga, held.rows)
            if lacking:
                await self._let_go(held, due_for_others=True)  # its release first: the note is written after it
                await self._note_unfit(saga.saga_id, lacking)
                return None
            cancel = None
            messages: Sequence[tuple[str, str, Any, datetime]] | None = None
            if function is not None:
                messages = None if awaited_topic(saga) is None else await messages_for(store, saga_id)
                # Due by a message for its recv, an operator's cancel is not read here: the saga's first write
                # (before any tool starts) is refused for it, and the engine takes it in then.
                if not due_with(saga, messages or []):
                    cancel = await cancel_requested(store, saga_id)
                    if cancel is None:  # not due: it waits on
                        await self._let_go(held)
                        return None
            else:
                cancel = await cancel_requested(store, saga_id)
            approvals = await approvals_of(store, saga_id) if _gated(saga, held.rows) else None
            if approvals is not None and any(request.decision is None for request in approvals):
                await self._let_go(held)  # decided meanwhile the other way round
                return None
            try:
                work = work_of(self._planner, saga)
            except PlanValidationError as exc:  # other tools, or no key: left for an executor that has them
                await self._let_go(held, due_for_others=True)
                logger.warning("saga %s: decided, left for an executor that can go on with it: %s", saga_id, exc)
                return None
            engine = held.start(detached=detached, shelters=shelters)
            engine.journal.saga_to(SagaStatus.RUNNING)  # written with the next write, before any tool starts
            engine.emit("saga_started")
            engine.messages = messages or None
            if approvals is not None:
                engine.gate.known(approvals)  # read once
            if cancel is not None:
                engine.cancel(cancel)
            return await drive(engine, work, self._planner, resumed=True)

    async def _let_go(self, held: Claim, *, due_for_others: bool = False) -> None:
        """Let a claimed WAITING saga go undriven. Its release writes its own wake time, so what made it due while
        it was held (a message, a decision, a cancel) is looked for again, and it is made due if found;
        `due_for_others`: due at once anyway (left for a worker that has what this one lacks)."""
        await held.release()
        store, saga = self._drives.config.store, held.saga
        try:
            if due_for_others or await self.may_go_on(saga, held.rows):
                await _journal.wake(store, saga.saga_id, now())
        except StoreError as exc:  # its next message or decision makes it due again
            logger.warning("saga %s: could not look at it again once let go: %s", saga.saga_id, exc)

    async def may_go_on(self, saga: SagaRow, rows: list[StepRow]) -> bool:
        """Tell, reading only, whether a WAITING saga may go on now: a saga function due (its wake time passed, its
        message came, or it is cancelled) with its requests decided; a plan whose requests are all decided."""
        store = self._drives.config.store
        if function_of(saga.plan) is not None and await due(store, saga):
            if not _gated(saga, rows):
                return True
            return all(r.decision is not None for r in await approvals_of(store, saga.saga_id))
        return _gated(saga, rows) and all(r.decision is not None for r in await approvals_of(store, saga.saga_id))

    async def _fit(self, saga: SagaRow, rows: list[StepRow]) -> bool:
        """Tell whether this executor has every tool a saga needs; if not, note it and warn of it once."""
        lacking = self.lacking(saga, rows)
        if lacking:
            await self._note_unfit(saga.saga_id, lacking)
            return False
        return True

    async def _note_unfit(self, saga_id: str, lacking: list[tuple[WaitingKind, str]]) -> None:
        """Warn once of the tools (or versions) a saga needs and this executor lacks, and note it on the saga."""
        missing = [text for _, text in lacking]
        if self._warn_once(saga_id, missing, f"decided, left for a worker that has its tool(s) {', '.join(missing)}"):
            await self.note_lacking(saga_id, lacking)


def _gated(saga: SagaRow, rows: list[StepRow]) -> bool:
    """Tell whether a WAITING saga may hold approval requests: a plan's, or a step waiting for a decision."""
    plan = saga.kind == "plan" and function_of(saga.plan) is None
    return plan or any(row.status is StepStatus.WAITING for row in rows)


async def _count_attempt(engine: SagaEngine) -> None:
    """Count the recovery attempt starting now, durably: a worker that dies driving the saga leaves it counted."""
    engine.journal.recovering()
    await engine.journal.flush()


async def _honour_cancel(engine: SagaEngine) -> None:
    """Tell a saga driven again of an operator's cancel request stored meanwhile."""
    request = await cancel_requested(engine.config.store, engine.saga.saga_id)
    if request is not None:
        engine.cancel(request)
