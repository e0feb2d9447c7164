"""Groups: the steps of one group started together and ended by their join.

A group's steps that are not done yet have their intents committed in one write, then run concurrently
(`Siblings`); how the group ends is its join: `all` (a failure cancels the siblings and fails the saga), `first`
(the first success wins, the others are cancelled and compensated), `quorum`/`any` (every step runs; too few
successes fail the saga).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Sequence
from datetime import UTC, datetime
from itertools import repeat
from operator import attrgetter
from typing import Any

import pydantic

from saga_runtime._engine._cancellation import CANCELLED, Cancellation, CancelTaken, Siblings
from saga_runtime._engine._compensator import UNKNOWN, Compensator
from saga_runtime._engine._journal import Journal
from saga_runtime._engine._steps import StepRunner
from saga_runtime._engine._verdict import DONE, StepOutcome, Verdict
from saga_runtime._exceptions import SecretKeyError, describe
from saga_runtime._records import SecretKeyring, StepRow, StepStatus, now, open_args, own_values, step_succeeded
from saga_runtime._tools import ToolRegistry, ToolSpec

__all__ = ["RUNNABLE", "GroupRunner"]

#: Steps a forward run (first or resumed) executes: never started, or started with an unknown outcome.
RUNNABLE = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.CANCELLED})

# Statuses read on every step, as module constants: Python 3.11 reads an enum class's attribute through
# EnumType.__getattr__'s slow hook, a module global at a fraction of its cost.
_PENDING, _COMPENSATION_FAILED = StepStatus.PENDING, StepStatus.COMPENSATION_FAILED
_SUCCESS = StepStatus.SUCCESS
if sys.version_info < (3, 12):
    # `asyncio.current_task()` is Python code on 3.11 (a frame a step): what it reads, the running loop's entry in
    # asyncio's table of current tasks, read here. (C code from 3.12, which keeps the table otherwise.)
    _running_loop = asyncio.get_running_loop
    _current_tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[Any]] = asyncio.tasks._current_tasks  # type: ignore[attr-defined]

    def _current_task() -> asyncio.Task[Any] | None:
        return _current_tasks.get(_running_loop())

else:
    _current_task = asyncio.current_task

_Call = tuple[StepRow, ToolSpec, dict[str, Any]]
_step_id = attrgetter("step_id")
_NONE_EACH = repeat(None)  # no step's arguments given (see `GroupRunner.run`)
_clock = datetime.now  # (read as `now()` reads it: in UTC)


def succeeded(row: StepRow) -> bool:
    """Tell whether a step's execute succeeded and counts (also when it was undone later with the saga)."""
    return step_succeeded(row.status, row.error, row.finished_at)


class GroupRunner:
    """Run groups of one saga's steps (see the module docstring)."""

    __slots__ = (
        "_cancellation",
        "_compensator",
        "_ended_at",
        "_journal",
        "_keyring",
        "_registry",
        "_runner",
        "_validated",
        "_verdict",
    )

    def __init__(
        self,
        journal: Journal,
        verdict: Verdict,
        cancellation: Cancellation,
        runner: StepRunner,
        compensator: Compensator,
        registry: ToolRegistry,
        keyring: SecretKeyring | None = None,
    ) -> None:
        self._journal = journal
        self._verdict = verdict
        self._cancellation = cancellation  # what runs now, and the operator's halt that cancels it
        self._runner = runner
        self._compensator = compensator
        self._registry = registry
        self._keyring = keyring  # opens secret arguments for the tools
        # Arguments validated when the plan was, by step: (the args they were validated from, the kwargs).
        self._validated: dict[str, tuple[Any, dict[str, Any]]] = {}
        # When the last group's one step succeeded, run inline in this task: nothing paused since (see `ended_at`).
        self._ended_at: datetime | None = None

    def validated(self, row: StepRow, kwargs: dict[str, Any]) -> None:
        """Note that `kwargs` are `row`'s current arguments validated; the step will not validate them again."""
        self._validated[row.step_id] = (row.args, kwargs)

    def fail_before_start(self, row: StepRow, exc: BaseException) -> None:
        """Record that a step could not start (its arguments could not be prepared).

        A step that never ran is FAILED. One of unknown outcome (started before a crash, or timed out) may have had
        its effect, so it is never called FAILED (a FAILED step is never compensated): it stays of unknown outcome,
        and the saga fails, whatever the step's scope, so that it is compensated.
        """
        spec = self._registry.get(row.tool_name)
        error = f"the step could not start: {describe(exc)}"
        self._journal.not_started(row, error, type(exc).__name__)
        if spec.retry_scope == "saga" or row.status is not StepStatus.FAILED:
            self._verdict.fail(row, error)

    def _prepare(self, row: StepRow, known: tuple[Any, dict[str, Any]] | None = None) -> _Call | None:
        """Return the call of a step about to run (its tool, its arguments validated), or None if it cannot start.

        `known`: what `validated` noted of it, taken already (None: looked up here).
        """
        spec = self._registry.get(row.tool_name)
        if known is None and self._validated:
            known = self._validated.pop(row.step_id, None)
        if known is not None and known[0] is row.args:
            return row, spec, known[1]
        try:
            # Never objects of the record (see own_values); secrets in clear (open_args).
            kwargs = spec.validate_args(own_values(open_args(row, spec.secrets, self._keyring)))
        except (pydantic.ValidationError, SecretKeyError) as exc:
            self.fail_before_start(row, exc)
            return None
        return row, spec, kwargs

    @property
    def ended_at(self) -> datetime | None:
        """Return the reading of the clock that ended the last group run, if it was one step that succeeded inline
        (in the caller's task, no pause after its reading); else None."""
        return self._ended_at

    def run(
        self,
        rows: Sequence[StepRow],
        *,
        join: str = "all",
        needed: int | None = None,
        handed: bool = False,
        kwargs: Sequence[dict[str, Any] | None] | None = None,
    ) -> Coroutine[Any, Any, bool]:
        """Run the steps of one group concurrently; return whether the saga can go on (await it).

        `rows` are the group's steps; those not yet done (never started, or of unknown outcome) run. They are
        committed RUNNING (attempt n) with the outcomes of earlier groups in one write before any of them starts.
        `join` says how the group ends: `all` (a step failing with scope "saga" cancels its running siblings and
        fails the saga), `first` (the first success wins; its running siblings are cancelled and every loser is
        compensated at once; the group fails only if every step failed), `quorum`/`any` (every step runs to its
        end; the group fails, failing the saga, with fewer than `needed` successes).

        `handed`: nothing paused since the last group run ended (the plan driver's word): a sequential step's intent
        takes that group's reading of the clock (`ended_at`) rather than reading it again.

        `kwargs`: by step of `rows`, its current arguments validated (a plan's own, validated with it), or None
        (looked up as `validated` noted them, or validated as the step starts); None: each looked up so.
        """
        at = self._ended_at if handed else None
        self._ended_at = None
        if len(rows) == 1 and join == "all" and rows[0].status is _PENDING:
            # The sequential case: nothing in doubt, no siblings (no coroutine more).
            return self._run_one(rows[0], at, None if kwargs is None else kwargs[0])
        return self._run(rows, join, needed, kwargs)

    def run_one(self, row: StepRow, kwargs: dict[str, Any]) -> Coroutine[Any, Any, bool]:
        """Run a group of one step never started (join `all`) whose `kwargs` are its current arguments validated (a
        plan's own, validated with it); return whether the saga can go on (await it). What `run` does for it with
        `handed` (nothing paused since the last group run ended), without looking the arguments up."""
        at = self._ended_at
        self._ended_at = None
        return self._run_one(row, at, kwargs)

    def run_new(self, row: StepRow, kwargs: dict[str, Any], spec: ToolSpec) -> Coroutine[Any, Any, bool]:
        """Run a group of one step never started (join `all`) whose `kwargs` are its current arguments validated (a
        saga function's new call, validated as it was made), `spec` its tool's; return whether the saga can go on
        (await it). What `run` does for it without `handed` (the saga's code ran since the last group ended: its
        intent reads the clock), without looking the arguments or the tool up."""
        self._ended_at = None
        return self._run_one(row, None, kwargs, spec)

    async def _run(
        self, rows: Sequence[StepRow], join: str, needed: int | None, kwargs: Sequence[dict[str, Any] | None] | None
    ) -> bool:
        journal = self._journal
        announced = journal.announced
        # The saga's first group, its intents written with the saga itself: every step new and RUNNING, none in
        # doubt from before, none undone, no winner recorded. The three looks below find nothing for it: not taken.
        fresh = len(announced) == len(rows) and announced.issuperset(map(_step_id, rows))
        undoing: list[StepRow] = []
        if not fresh:
            for row in rows:  # outcomes in doubt from before: settled by reconcile, if the tool has one, first
                if row.status in UNKNOWN and not (
                    row.reconciled or row.compensation_attempts or row.step_id in announced
                ):
                    spec = self._registry.get(row.tool_name)
                    # Cut by an operator's cancel as a running call is (its outcome then stays unknown); once halted,
                    # no more tool code runs forward: the step is compensated as unknown.
                    if spec.reconcile is not None and not self._cancellation.halted:
                        await self._cancellation.inline(self._runner.reconcile(row, spec))
            if join == "first" and any(succeeded(row) for row in rows):
                await self._settle_first(rows)  # resumed: the recorded winner stands, the rest lose
                return self._nothing_left_out(rows)
            undoing = [row for row in rows if row.status in UNKNOWN and row.compensation_attempts > 0]
            if undoing:
                await self._finish_undoing(undoing, join)
        calls: list[_Call] = []
        validated, spec_of = self._validated, self._registry.get
        # The tool of the step before, and its spec: a group often calls one tool many times (one look-up for them).
        name: str | None = None
        tool: ToolSpec | None = None  # (set with `name`, at the first step: None, whatever the first step's tool)
        # (Each step's given arguments, or None for each: an endless `repeat`, hence no strict zip.)
        for row, given in zip(rows, _NONE_EACH if kwargs is None else kwargs, strict=False):
            if row.status not in RUNNABLE or (undoing and row in undoing):
                continue
            if given is None:
                # (`_prepare`, its common case written out: arguments noted by `validated`, one call less a step.)
                known = validated.pop(row.step_id, None) if validated else None
                if known is None or known[0] is not row.args:
                    if (call := self._prepare(row, known)) is not None:
                        calls.append(call)
                    continue
                given = known[1]
            if tool is None or row.tool_name != name:
                name = row.tool_name
                tool = spec_of(name)
            calls.append((row, tool, given))
        if self._verdict.failed:
            halted = self._cancellation.halted
            if halted:
                for row in rows:
                    if row.status is StepStatus.PENDING:
                        journal.explain(row, f"not run: {halted}", "Cancelled")
            await journal.flush()
            return False
        if not calls:
            return self.judge(rows, join, needed)
        calls = await self._announce(calls, join, fresh)
        if not calls:
            return self.judge(rows, join, needed)  # an operator's cancel was taken in: nothing started
        if len(calls) == 1 and join == "all":
            # One step needs no task group and has no siblings to cancel: run it inline (the sequential case).
            outcome = await self._cancellation.inline(self._runner.run(*calls[0]))
            if outcome is not None:  # (None: an operator's cancel cut it)
                self.fold(outcome)
            if calls[0][0].status is _SUCCESS and not journal.config.hooks:
                self._ended_at = calls[0][0].finished_at  # read as it succeeded, in this task (see `_run_one`)
        else:
            siblings = Siblings(self.fold, skip=DONE)  # (DONE bears on nothing: not folded)
            siblings.start_each(self._runner.run, calls, join)
            del calls  # (each step's coroutine holds its call: a tuple less a step for the GC while they run)
            await self._cancellation.together(siblings)
        if self._verdict.store_error is not None:
            raise self._verdict.store_error
        if join == "first":
            await self._settle_first(rows)
        return self.judge(rows, join, needed)

    async def _run_one(
        self, row: StepRow, at: datetime | None, kwargs: dict[str, Any] | None = None, spec: ToolSpec | None = None
    ) -> bool:
        """Run a group of one step never started (join `all`): what `run` does for it, without its bookkeeping.

        `kwargs`: its current arguments validated (see `run_one`); None: looked up, or validated, here. `spec`: its
        tool's (the registry's), known to the caller; None: looked up here."""
        if kwargs is None:
            # (`_prepare`, its common case written out: the arguments validated by whoever made the call, noted by
            # `validated`: a frame less a step.)
            validated = self._validated
            known = validated.pop(row.step_id, None) if validated else None
            if known is not None and known[0] is row.args:
                kwargs = known[1]
            elif (call := self._prepare(row, known)) is not None:
                _, spec, kwargs = call
        journal, verdict = self._journal, self._verdict
        if kwargs is None or verdict.failed:
            if verdict.failed:
                if self._cancellation.halted:
                    journal.explain(row, f"not run: {self._cancellation.halted}", "Cancelled")
                await journal.flush()
                return False
            return self.judge((row,), "all", None)
        if spec is None:
            spec = self._registry.get(row.tool_name)
        status, attempts, started_at = row.status, row.attempts, row.started_at
        journal.start(row, at or _clock(UTC), spec.version)  # (`now()`, written out: a frame less a call)
        journal.keep_lease()  # never start on an almost expired lease: extend it in the same write
        try:
            if not journal.wrote_now():
                await journal.flush(ahead=True)
        except BaseException as exc:
            journal.restore(row, status, attempts, started_at)  # never written: never ran
            if isinstance(exc, CancelTaken):  # an operator's cancel: nothing starts, the saga compensates
                journal.explain(row, f"not run: {self._cancellation.halted}", "Cancelled")
                return False
            raise
        journal.check_fence()  # fenced while the intent was being written: no step starts after the fence
        if journal.config.hooks:
            journal.emit("step_started", row)
        # What `Cancellation.inline` does, written out (no coroutine layer on the sequential path): an operator's
        # cancel cancels this task while the step runs; that cancel ends here.
        cancellation = self._cancellation
        try:
            cancellation.running = _current_task()  # (asyncio's own: the engine always runs in a task)
            if cancellation.halted:
                cancellation.cut_self()  # halted while the intent was written
            outcome = await self._runner.run(row, spec, kwargs)
            if outcome is not DONE:
                self.fold(outcome)
        except CANCELLED:
            if not cancellation.taken():
                raise
        finally:
            cancellation.running = None
        if verdict.store_error is not None:
            raise verdict.store_error
        if row.status is _COMPENSATION_FAILED:
            verdict.fail(row, f"its effect could not be undone: {row.compensation_error}")
        elif row.status is _SUCCESS and not journal.config.hooks:
            self._ended_at = row.finished_at  # read as it succeeded, in this task (hooks would run after it)
        return not verdict.failed

    def fold(self, outcome: StepOutcome, siblings: Siblings | None = None) -> None:
        """Fold what a step came to into the saga's fate (the only place that does); stop its `siblings` if it
        failed the saga, won its race, or could not be written."""
        row = outcome.row
        if row is None:
            return  # DONE
        verdict = self._verdict
        if outcome.error is not None:
            verdict.errors[row.step_id] = outcome.error
        if outcome.store_error is not None and verdict.store_error is None:
            verdict.store_error = outcome.store_error
        if outcome.fails is not None:
            verdict.fail(row, outcome.fails)
        if outcome.won:
            if row.group in verdict.winners:
                return  # the race was won already: the siblings were stopped then
            verdict.winners[row.group] = row.step_id
        if siblings is not None and outcome.stops:
            siblings.cancel()

    async def _finish_undoing(self, undoing: Sequence[StepRow], join: str) -> None:
        """Finish compensations that had begun (written ahead) when the process died; never run those steps forward."""
        await self._compensator.compensate_unknown(undoing)
        for row in undoing:
            # Undone, never completed: it cannot count as done. (A refused attempt's undo counts compensation
            # attempts too, so a step whose next attempt was running at the crash lands here: undone, not
            # re-run, and the saga fails rather than going on without it.)
            self._journal.explain(row, "its outcome was unknown after a crash; it was undone", "Crash")
            if join == "all" and self._registry.get(row.tool_name).retry_scope == "saga":
                self._verdict.fail(row, row.error or "undone")

    async def _announce(self, calls: list[_Call], join: str, fresh: bool = False) -> list[_Call]:
        """Commit the intents (RUNNING, attempt n) of the calls not yet announced; return every call to start.

        `fresh`: the calls are of the saga's first group, every step of it announced with the saga."""
        journal = self._journal
        ready: list[_Call] = []
        announced = journal.announced
        if fresh and len(calls) == len(announced):
            # Every call announced with the saga (its first group, all of it runs): nothing to sort out.
            announced.clear()
            ready, calls = calls, []
        elif announced:
            waiting: list[_Call] = []
            for call in calls:
                step_id = call[0].step_id
                if step_id in announced:
                    announced.discard(step_id)
                    ready.append(call)
                else:
                    waiting.append(call)
            calls = waiting
        before = [(row.status, row.attempts, row.started_at) for row, _, _ in calls]
        if calls:  # (the clock is read only for calls to announce: none when all were announced with the saga)
            started = now()
            for row, spec, _ in calls:
                # A step resumed after a crash (RUNNING or CANCELLED: outcome unknown) runs again with the same
                # idempotency key; its attempts keep counting.
                journal.start(row, started, spec.version)
            journal.keep_lease()  # never start on an almost expired lease: extend it in the same write
        try:
            if not journal.wrote_now():
                await journal.flush(ahead=True)
        except BaseException as exc:
            for (row, _, _), (status, attempts, started_at) in zip(calls, before, strict=True):
                journal.restore(row, status, attempts, started_at)  # never written: never ran
            if isinstance(exc, CancelTaken):  # an operator's cancel: nothing starts (the announced ones neither)
                for row, _, _ in calls:
                    journal.explain(row, f"not run: {self._cancellation.halted}", "Cancelled")
                return []
            raise
        journal.check_fence()  # fenced while the intent was being written: no step starts after the fence
        calls += ready
        if self._journal.config.hooks:
            for row, _, _ in calls:
                journal.emit("step_started", row)
        return calls

    def _nothing_left_out(self, rows: Sequence[StepRow]) -> bool:
        """Fail the saga if a step of the group has an effect its compensation could not undo; tell if it goes on.

        A race loser whose release failed, or a timed-out step (scope "step") whose undo failed, leaves an effect
        out in the world: the saga must not end SUCCESS with it forgotten. It fails, compensates, and ends
        COMPENSATION_FAILED, so `list_sagas(status="COMPENSATION_FAILED")` shows it and `retry_compensation()`
        undoes it once the cause is fixed.
        """
        for row in rows:
            if row.status is _COMPENSATION_FAILED:
                self._verdict.fail(row, f"its effect could not be undone: {row.compensation_error}")
        return not self._verdict.failed

    def judge(self, rows: Sequence[StepRow], join: str, needed: int | None) -> bool:
        """Decide whether a finished group lets the saga go on; fail the saga if not."""
        if not self._nothing_left_out(rows):
            return False
        if join == "all" or self._verdict.failed:
            return not self._verdict.failed
        wins = sum(1 for row in rows if succeeded(row))
        required = 1 if join == "first" else needed or 1
        if wins >= required:
            return True
        group = rows[0].group if rows else -1
        self._verdict.fail_with(
            f"every step of 'first' group {group} failed"
            if join == "first"
            else f"{join} group {group}: {wins} of {len(rows)} steps succeeded, {required} needed"
        )
        return False

    async def _settle_first(self, rows: Sequence[StepRow]) -> None:
        """Keep a `first` group's winner (the earliest success); compensate every other step at once."""
        wins = sorted((row for row in rows if succeeded(row)), key=lambda r: (r.finished_at or now(), r.seq))
        if not wins:
            return
        winner = wins[0]
        losers = [
            row for row in rows if row is not winner and (row.status is StepStatus.SUCCESS or row.status in UNKNOWN)
        ]
        for row in losers:
            self._journal.explain(row, f"lost the race to step {winner.step_id!r}", "LostRace")
        if losers:
            await self._compensator.compensate_unknown(losers, successes=True)
