"""Dynamic sagas: `async with executor.saga(...) as saga`, one group per `saga.call` / `saga.group`.

Calls are identified by position, so a saga re-entered after a crash is served its recorded results first.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, NoReturn

import anyio
import pydantic

from saga_runtime._engine import (
    HOLDABLE,
    WAIT_POLL,
    Budget,
    CallDriver,
    Claim,
    Drives,
    EngineConfig,
    SagaEngine,
    journal,
    receive,
)
from saga_runtime._exceptions import (
    ApprovalPendingError,
    ApprovalRejectedError,
    BudgetExceededError,
    IdempotencyConflictError,
    PlanValidationError,
    ReplayDivergenceError,
    ResultNotStorableError,
    SagaFailedError,
    SagaNotFoundError,
    SecretKeyError,
    StepFailedError,
    UnknownToolError,
)
from saga_runtime._planning import MAX_ID_BYTES, Step, call_args, stored_as_is, stored_kwargs, valid_id
from saga_runtime._records import (
    ApprovalRow,
    KeyMaker,
    SagaResult,
    SagaRow,
    SagaStatus,
    SecretKeyring,
    StepRow,
    StepStatus,
    canonical_json,
    function_of,
    mask_secrets,
    now,
    own_copy,
    result_from_rows,
    step_succeeded,
    to_json_value,
)
from saga_runtime._starting import checked_json, child_call, target
from saga_runtime._storage import approvals_of, sagas
from saga_runtime._tools import BUILTIN_TOOLS, CHILD_TOOL, ToolRegistry, ToolSpec, builtin_tool_message

__all__ = ["DynamicSaga"]

logger = logging.getLogger("saga_runtime")

Call = tuple[str, Mapping[str, Any]] | tuple[str, Mapping[str, Any], str] | Step

_UNKNOWN = (StepStatus.RUNNING, StepStatus.CANCELLED)
# Read on every call, as a module constant: Python 3.11 reads an enum class's attribute through a slow hook.
_SUCCESS = StepStatus.SUCCESS


class DynamicSaga:
    """A saga built call by call: `async with executor.saga(saga_id=...) as saga:`.

    An exception or cancellation leaving the block compensates the completed calls in reverse; `saga.result`
    holds the SagaResult once the block is left.
    """

    def __init__(
        self,
        drives: Drives | None,
        saga_id: str,
        *,
        budget: Budget | None,
        metadata: dict[str, Any],
        replay: bool,
        approval_required: Iterable[str] | None = None,
        config: EngineConfig | None = None,
    ) -> None:
        self._drives = drives
        config = drives.config if drives is not None else config
        assert config is not None
        self._config = config
        self._store = config.store
        self._registry = config.registry
        self._driver: CallDriver | None = None  # the engine's driver this saga feeds while it runs live
        self._function: str | None = None  # a saga function's name: its code runs over its record (API.md §18)
        self.saga_id = saga_id
        self._key = KeyMaker(saga_id)  # its calls' idempotency keys
        self._budget = budget
        self._metadata = metadata
        self._replay_requested = replay
        self._engine: SagaEngine | None = None
        self._claim: Claim | None = None  # held while the block runs live
        self._record: list[StepRow] = []  # a re-entered saga's record, in call order
        self._stored: tuple[SagaRow, list[StepRow]] | None = None
        self._next_seq = 0
        self._next_group = 0
        self._charges_seen = 0
        self._sleeps_seen = 0
        self._recvs_seen = 0
        self._published = 0  # events set and stream values written, by position
        self._entered = False
        self._closed = False
        self.result: SagaResult | None = None
        self._approval_required = frozenset(approval_required or ())  # besides tools registered approval=True
        self._plain_tools: dict[str, ToolSpec] = {}  # the tools whose new calls `call` runs itself, by name
        self._requests: dict[str, ApprovalRow] = {}  # a recorded saga's requests, by step id
        self._waiting: ApprovalPendingError | None = None  # once set, every later call raises it

    # -- entering and leaving

    @property
    def keyring(self) -> SecretKeyring | None:
        """Return the executor's keys for secret arguments (None without a key)."""
        return self._config.keyring

    @property
    def registry(self) -> ToolRegistry:
        """Return the registry the saga's calls are checked against (its executor's)."""
        return self._registry

    @property
    def replaying(self) -> bool:
        """Tell whether every call is served from the record (a replay, or a finished saga)."""
        return self._engine is None

    async def __aenter__(self) -> DynamicSaga:
        if self._entered:
            raise RuntimeError("a DynamicSaga is entered once; call executor.saga() again for another block")
        self._entered = True
        drives, store = self._drives, self._store
        assert drives is not None  # a saga function's saga is not entered: its driver runs it
        if drives.config.resources is not None:
            await drives.config.resources.enter()  # a failing lifespan stores nothing
        # plan_hash holds the head of the call chain (none yet); see saga_runtime._records._chain.
        row = drives.new_saga(self.saga_id, "dynamic", budget=_account(self._budget, 0), metadata=self._metadata)
        if self._replay_requested:
            stored = await store.load_saga(self.saga_id)
            if stored is None:
                raise ReplayDivergenceError(
                    f"saga {self.saga_id!r} is not in {store.url}: there is nothing to replay",
                    saga_id=self.saga_id,
                )
            self._adopt_record(*stored)
            await self._read_requests()
            return self
        existing = await journal.create(store, row.copy(), [])
        if existing is None:
            engine = await self._go_live(drives.claim(row, take="new"))
            engine.emit("saga_started")
            return self
        saga, rows = existing
        self._adopt_record(saga, rows)
        if saga.status.is_terminal:
            await self._read_requests()
            return self  # finished: served from the record
        waited = saga.status is SagaStatus.WAITING
        engine = await self._go_live(
            drives.claim(saga, rows, take="waiting" if waited else "orphan"),
            reentered=True,
            waited=waited,
        )
        if engine.compensating:
            # Died while being undone: finish that, then the block replays the record.
            claim, self._claim, self._engine, self._driver = self._claim, None, None, None
            assert claim is not None
            try:
                self.result = await engine.compensate()
            except BaseException as exc:
                await claim.close(exc)
                raise
            await claim.close()
            self._adopt_record(engine.saga, list(engine.rows.values()))
            return self
        engine.emit("saga_started")
        logger.info("saga %s: re-entered with %d recorded calls", self.saga_id, len(self._record))
        return self

    async def _read_requests(self) -> None:
        """Read the approval requests of a saga served from its record."""
        if any(row.status in (StepStatus.REJECTED, StepStatus.WAITING) for row in self._record):
            self._requests = {row.step_id: row for row in await approvals_of(self._store, self.saga_id)}

    async def _go_live(self, claim: Claim, *, reentered: bool = False, waited: bool = False) -> SagaEngine:
        """Claim the saga and run calls live; the claim is left in __aexit__, in the same task."""
        held = await claim.__aenter__()
        if held is None:
            raise claim.in_progress(
                "it can be re-entered once that executor is gone (its lease expired) or has finished it"
            )
        try:
            engine = held.start(where="while this block ran")
            if reentered:
                await engine.gate.load()
            if waited:
                await engine.resume()  # served from the record up to the waiting call
        except BaseException as exc:
            await held.close(exc)
            raise
        self._claim, self._engine, self._driver = held, engine, CallDriver(engine)
        return engine

    @property
    def _keeper(self) -> Any:
        """The renewal of the live saga's lease (a test stops it to play a process that died)."""
        assert self._claim is not None
        assert self._claim.session is not None
        return self._claim.session.keeper

    def _adopt_record(self, saga: SagaRow, rows: list[StepRow]) -> None:
        # A saga function's record is served to its own code; a replay (nothing runs) may read it too.
        borrowed = self._function is None and not self._replay_requested and function_of(saga.plan) is not None
        if saga.kind != "dynamic" or borrowed:
            what = "a plan saga" if saga.kind != "dynamic" else "a saga function's saga"
            raise IdempotencyConflictError(
                f"saga {self.saga_id!r} is {what}; a dynamic saga needs an id of its own",
                saga_id=self.saga_id,
            )
        self._stored = (saga, rows)
        self._record = sorted(rows, key=lambda r: r.seq)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self._closed = True
        driver, claim = self._driver, self._claim
        if driver is None or claim is None:
            if self.result is None and self._stored is not None:
                self.result = result_from_rows(*self._stored)
            return False
        try:
            # Taken over, or WAITING for a decision: nothing more is written.
            self.result = await driver.end(exc) or self.result
        finally:
            await claim.close(exc)  # raises LeaseLostError if the lease was lost
        return False

    def check_all_served(self) -> None:
        """Fail a saga function whose code returned before making every call its record holds (a divergence)."""
        driver = self._driver
        if driver is not None and driver.diverged is None and self._next_seq < len(self._record):
            row = self._record[self._next_seq]
            driver.diverged = ReplayDivergenceError(
                f"saga {self.saga_id!r} returned after {self._next_seq} calls, but the record holds call "
                f"#{self._next_seq + 1} {row.tool_name}({_brief(row.args)}); a resumed saga function must make the "
                "same calls in the same order",
                saga_id=self.saga_id,
                position=self._next_seq,
            )

    @classmethod
    def running(cls, driver: CallDriver, engine: SagaEngine, function: str) -> DynamicSaga:
        """Return the saga a saga function's code is given: its calls fed to `driver` (driving `engine`), recorded
        ones served."""
        saga = engine.saga
        budget = Budget.from_json(saga.budget)
        self = cls(None, saga.saga_id, budget=budget, metadata=dict(saga.metadata), replay=False, config=engine.config)
        self._function = function
        self._entered = True
        self._engine, self._driver = engine, driver
        rows = engine.rows
        self._record = sorted(rows.values(), key=lambda r: r.seq) if rows else []  # (none: run from its start)
        self._stored = (saga, self._record)
        return self

    async def detach(self) -> None:
        """Leave the saga unfinished, its lease released on exit, for a re-entry or any `recover()`."""
        self._check_open()
        engine = self._engine
        if engine is not None and not engine.fenced:
            engine.detached = True
            engine.stop()

    def _check_not_cancelled(self) -> None:
        """Raise `SagaFailedError` once an operator's cancel stopped the saga: no call or wait goes on after it."""
        engine = self._engine
        if engine is not None and engine.verdict.halted is not None:
            raise SagaFailedError(
                f"saga {self.saga_id!r} was cancelled ({engine.verdict.halted}); nothing more runs, it compensates",
                saga_id=self.saga_id,
                status=engine.saga.status.value,
            )

    def _check_open(self) -> None:
        if not self._entered or self._closed:
            raise RuntimeError("use the saga inside its `async with executor.saga(...) as saga:` block")
        driver = self._driver
        if driver is not None and driver.diverged is not None:
            raise driver.diverged  # nothing more is called once the code left its record

    # -- calls

    async def call(self, tool: str, /, **args: Any) -> Any:
        """Run one call as its own group; return its stored (JSON round-tripped) result.

        A failure raises `StepFailedError` after retries (an unknown outcome is compensated first).
        """
        # A live saga's next call, new and plain (arguments validated once, stored as they are; no decision to wait
        # for), is run here: its row built as `group` would build it, handed to the driver with its arguments
        # validated, without a group's checks (a saga function's every call comes this way).
        engine, driver = self._engine, self._driver
        kwargs: dict[str, Any] | None = None
        if not (
            engine is None
            or driver is None
            or self._closed
            or driver.diverged is not None
            or self._waiting is not None
            or self._next_seq < len(self._record)
            or type(tool) is not str
            or tool in self._approval_required
            or ((spec := self._plain_tools.get(tool)) is None and (spec := self._plain_tool(tool)) is None)
        ):
            seq = self._next_seq
            step_id = f"{tool}-{seq}"
            # Not an operator's cancel, nor an id taken (the group says what is wrong with those).
            if driver.cancellation.halted is None and step_id not in driver.calls and step_id not in driver.requests:
                # Stored as they are and taken as they are by plain fields: checked in one walk; else the long way.
                kwargs = stored_kwargs(spec, args)
                if kwargs is None and stored_as_is(args):
                    with contextlib.suppress(pydantic.ValidationError):
                        kwargs = spec.validate_args(args)
        if kwargs is None:  # anything but a new plain call, live: the group of one does it (and says what is wrong)
            (result,) = await self.group([(tool, args)])
            return result
        assert driver is not None
        assert spec is not None
        group, key, version = self._next_group, self._key(step_id), spec.version
        # (`call`'s own dict of its **args as the row's: nobody else holds it. A tool of the default version "1",
        # the usual one, is given no keyword: binding one costs a third of the row's construction.)
        if version == "1":
            row = StepRow(self.saga_id, seq, step_id, group, tool, args, key)
        else:
            row = StepRow(self.saga_id, seq, step_id, group, tool, args, key, tool_version=version)
        self._next_seq, self._next_group = seq + 1, group + 1
        ok = await driver.run_new(row, kwargs, spec)
        succeeded = row.status is _SUCCESS
        if not (ok and succeeded and driver.defers):  # done with (see `run_new`), else ended
            await driver.ran_new(row)
            succeeded = row.status is _SUCCESS
        result = row.result
        if succeeded and type(result) is not dict and type(result) is not list:
            return result  # a scalar: `_outcome`'s own copy is itself
        return self._outcome(row)

    def _plain_tool(self, tool: str) -> ToolSpec | None:
        """Return the spec of a registered tool a new call of which `call` runs itself (no decision to wait for, no
        secret to encrypt; not a built-in one, which the group refuses), kept for the saga's next calls; else None.
        """
        spec = None if tool in BUILTIN_TOOLS else self._registry.find(tool)
        if spec is None or spec.approval or spec.secrets:
            return None
        self._plain_tools[tool] = spec
        return spec

    async def group(
        self,
        calls: Sequence[Call],
        *,
        join: str = "all",
        k: int | None = None,
        return_exceptions: bool = False,
    ) -> Any:
        """Run calls, each `(tool, args)`, `(tool, args, step_id)` or a `Step`, concurrently as one group.

        `join="all"`: results in the order given; a failure cancels and compensates the running siblings, then
        raises `StepFailedError` (with `return_exceptions=True` errors take their places instead). `"first"`: the
        first success, the others cancelled and undone. `"quorum"` (`k`) / `"any"`: the successes, in order.
        """
        self._check_open()
        if self._waiting is not None:
            raise self._waiting  # no call goes on until re-entered
        if join not in ("all", "first", "quorum", "any"):
            raise PlanValidationError([f"join must be all, first, quorum or any, got {join!r}"], saga_id=self.saga_id)
        return await self._run_calls(self._prepare(calls), join=join, k=k, return_exceptions=return_exceptions)

    async def _run_calls(
        self,
        prepared: list[tuple[str, dict[str, Any], str | None, dict[str, Any] | None]],
        *,
        join: str,
        k: int | None,
        return_exceptions: bool,
    ) -> Any:
        """Run prepared calls (checked: `_prepare`) as one group; see `group`."""
        engine = self._engine
        if engine is not None and engine.verdict.halted is not None:
            # An operator's cancel was taken in (the code caught the cut call's error): nothing more runs.
            tool, _, given, _ = prepared[0]
            why = f"not run: {engine.verdict.halted}"
            raise StepFailedError(
                f"saga {self.saga_id!r}: call #{self._next_seq + 1} ({tool}) was {why}",
                saga_id=self.saga_id,
                step_id=given or f"{tool}-{self._next_seq}",
                tool_name=tool,
                attempts=0,
                error=why,
                error_type="Cancelled",
            )
        needed = 1 if join == "any" else k
        if join == "quorum" and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(prepared)):
            raise PlanValidationError(
                [f"a quorum needs k from 1 to its {len(prepared)} calls, got {k!r}"], saga_id=self.saga_id
            )
        first = self._next_seq
        group = self._next_group
        # All checked before any is added: a refused group leaves no row.
        try:
            rows = [self._recorded_or_new(first + i, group, *call[:3]) for i, call in enumerate(prepared)]
        except ReplayDivergenceError as exc:
            if self._function is not None and self._driver is not None:
                self._driver.diverged = exc  # recorded as the saga's failure, whatever the code does with it
            raise
        self._next_seq += len(prepared)
        self._next_group += 1
        driver, engine = self._driver, self._engine
        ok = True
        if driver is not None and engine is not None:
            for row, (_, args, _, kwargs) in zip(rows, prepared, strict=True):
                if kwargs is not None and row.args is args:  # a new call: its arguments validated once
                    engine.validated(row, kwargs)
            keep_going = join == "all" and return_exceptions
            ok, refused = await driver.feed(
                rows, join=join, needed=needed, gated=self._gated(engine, rows), keep_going=keep_going
            )
            if driver.waiting is not None:
                self._wait_for(driver, rows)
            if refused and not keep_going:
                self._refuse(refused[0])
        if join != "all":
            return self._joined(rows, join, needed, ok)
        if not return_exceptions:
            # Raise for the failed call, not a sibling it cancelled.
            for row in sorted(rows, key=lambda r: r.error_type == "CancelledError"):
                self._outcome(row)
            return [self._outcome(row) for row in rows]
        outcomes: list[Any] = []
        for row in rows:
            try:
                outcomes.append(self._outcome(row))
            except (StepFailedError, BudgetExceededError, ApprovalRejectedError) as exc:
                outcomes.append(exc)
        return outcomes

    @contextlib.contextmanager
    def approvals_for(self, tools: Iterable[str]) -> Iterator[None]:
        """Within the block, calls of `tools` wait for a person's decision too (an LLM loop's policy); a re-run
        saga function runs the same block, so its calls are gated the same."""
        before = self._approval_required
        self._approval_required = before | frozenset(tools)
        try:
            yield
        finally:
            self._approval_required = before

    def _gated(self, engine: SagaEngine, rows: list[StepRow]) -> list[StepRow]:
        """Return a group's calls that need a person's decision."""
        registry, gate = self._registry, engine.gate
        return [
            row
            for row in rows
            if row.status in HOLDABLE
            and (
                registry.get(row.tool_name).approval
                or row.tool_name in self._approval_required
                or gate.request_of(row.step_id) is not None
            )
        ]

    def _wait_for(self, driver: CallDriver, rows: list[StepRow]) -> NoReturn:
        """Raise the ApprovalPendingError of a group whose call waits for a decision (the saga is WAITING)."""
        self.result = driver.waiting
        assert self._engine is not None
        gate = self._engine.gate
        row = next(row for row in rows if (request := gate.request_of(row.step_id)) and request.decision is None)
        then = "it resumes once decided" if self._function is not None else "then enter the saga again"
        self._waiting = ApprovalPendingError(
            f"saga {self.saga_id!r}: call {row.step_id!r} ({row.tool_name}) waits for a person's decision; "
            f"the saga is WAITING. Decide with executor.approve({self.saga_id!r}, {row.step_id!r}, by=...) or "
            f"reject(...), {then}",
            saga_id=self.saga_id,
            step_id=row.step_id,
            tool_name=row.tool_name,
            arguments=mask_secrets(own_copy(row.args)),
        )
        raise self._waiting

    def _refuse(self, row: StepRow) -> NoReturn:
        """Raise the ApprovalRejectedError of a refused call."""
        request = self._requests.get(row.step_id)
        if request is None and self._engine is not None:
            request = self._engine.gate.request_of(row.step_id)
        raise ApprovalRejectedError(
            f"saga {self.saga_id!r}: call {row.step_id!r} ({row.tool_name}) was {row.error or 'rejected'}, never run",
            saga_id=self.saga_id,
            step_id=row.step_id,
            tool_name=row.tool_name,
            by=None if request is None else request.decided_by,
            note=None if request is None else request.note,
        )

    def _joined(self, rows: list[StepRow], join: str, needed: int | None, ok: bool) -> Any:
        wins = [row for row in rows if step_succeeded(row.status, row.error, row.finished_at)]
        if ok and len(wins) >= (1 if join == "first" else needed or 1):
            return own_copy(wins[0].result) if join == "first" else [own_copy(row.result) for row in wins]
        failed = [row for row in rows if row.error is not None and row.error_type != "CancelledError"] or rows
        culprit = failed[0]
        raise StepFailedError(
            f"saga {self.saga_id!r}: the {join} group of {len(rows)} calls failed: {len(wins)} succeeded"
            f"{'' if join == 'first' else f', {needed} needed'}; first error: {culprit.error}",
            saga_id=self.saga_id,
            step_id=culprit.step_id,
            tool_name=culprit.tool_name,
            attempts=culprit.attempts,
            error=culprit.error,
            error_type=culprit.error_type,
        )

    def _prepare(self, calls: Sequence[Call]) -> list[tuple[str, dict[str, Any], str | None, dict[str, Any] | None]]:
        if isinstance(calls, str | bytes | Mapping) or not calls:
            raise PlanValidationError(
                ["saga.group() takes a non-empty list of (tool, args) pairs"], saga_id=self.saga_id
            )
        problems: list[str] = []
        prepared = []
        unknown = False
        registry = self._registry
        items: list[Any] = list(calls)  # may come straight from a model's output
        first = self._next_seq  # a call is numbered by its place in the saga, as a divergence names it
        for i, call in enumerate(items, start=first + 1):
            name: Any
            args: Any
            step_id: Any = None
            if isinstance(call, Step):
                name, args, step_id = call.tool, call.args, call.id
            elif isinstance(call, tuple) and len(call) in (2, 3):
                name, args = call[0], call[1]
                step_id = call[2] if len(call) == 3 else None
            else:
                problems.append(f"call #{i}: expected (tool, args), (tool, args, step_id) or a Step, got {call!r}")
                continue
            label = f"call #{i} ({name!r})"
            if isinstance(name, str) and name in BUILTIN_TOOLS:
                problems.append(f"{label}: {builtin_tool_message(name)}")
                continue
            if not isinstance(name, str) or name not in registry:
                unknown = True
                problems.append(f"{label}: unknown tool (available: {', '.join(registry.names()) or 'none'})")
                continue
            if not isinstance(args, Mapping):
                problems.append(f"{label}: args must be a mapping")
                continue
            if step_id is not None and (not valid_id(step_id) or "." in step_id):
                problems.append(
                    f"{label}: step_id must be non-empty Unicode text without '.' or NUL, of at most "
                    f"{MAX_ID_BYTES} bytes in UTF-8"
                )
                continue
            try:
                json_args, kwargs = call_args(registry.get(name), args, self._config.keyring, what=label)
            except pydantic.ValidationError as exc:
                problems.extend(f"{label}: {error['loc']}: {error['msg']}" for error in exc.errors(include_url=False))
                continue
            except (ResultNotStorableError, SecretKeyError) as exc:
                problems.append(f"{label}: {exc}")
                continue
            prepared.append((name, json_args, step_id, kwargs))
        ids = [step_id for _, _, step_id, _ in prepared if step_id is not None]
        if len(ids) != len(set(ids)):
            problems.append(f"the group gives one step_id to several calls: {sorted(ids)}")
        if problems:
            raise (UnknownToolError if unknown else PlanValidationError)(problems, saga_id=self.saga_id)
        return prepared

    def _recorded_or_new(self, seq: int, group: int, tool: str, args: dict[str, Any], step_id: str | None) -> StepRow:
        if step_id is not None:
            # Refused live for a reused step id: refused again on re-execution.
            known = self._engine.rows if self._engine is not None else {r.step_id: r for r in self._record}
            earlier = known.get(step_id)
            if earlier is not None and earlier.seq < seq:
                raise PlanValidationError([f"step id {step_id!r} is already used in this saga"], saga_id=self.saga_id)
        if seq < len(self._record):
            row = self._record[seq]
            # Secrets compare masked: each encryption differs.
            if row.tool_name != tool or canonical_json(mask_secrets(row.args)) != canonical_json(mask_secrets(args)):
                raise ReplayDivergenceError(
                    f"saga {self.saga_id!r} call #{seq + 1} is {tool}({_brief(args)}) but the record holds "
                    f"{row.tool_name}({_brief(row.args)}); a re-executed or replayed saga must make the same calls "
                    "in the same order",
                    saga_id=self.saga_id,
                    position=seq,
                )
            if self._engine is None and row.status in (StepStatus.PENDING, StepStatus.WAITING, *_UNKNOWN):
                raise ReplayDivergenceError(
                    f"saga {self.saga_id!r} call #{seq + 1} ({tool}) was recorded without an outcome; it cannot be "
                    "replayed",
                    saga_id=self.saga_id,
                    position=seq,
                )
            return row
        if self._engine is None:
            purged = self._stored[0].purged_at if self._stored is not None else None
            if purged is not None:  # a tombstone: its calls were removed, it never runs again (API.md §14)
                raise ReplayDivergenceError(
                    f"saga {self.saga_id!r} was purged at {purged.isoformat()}: its calls are no longer recorded "
                    "(they are in the purge's archive, if one was kept), so it cannot be replayed; use a new saga id",
                    saga_id=self.saga_id,
                    position=seq,
                )
            raise ReplayDivergenceError(
                f"saga {self.saga_id!r} call #{seq + 1} {tool}({_brief(args)}) was never recorded "
                f"(the record holds {len(self._record)} calls)",
                saga_id=self.saga_id,
                position=seq,
            )
        step_id = step_id or f"{tool}-{seq}"
        if step_id in self._engine.rows:
            raise PlanValidationError([f"step id {step_id!r} is already used in this saga"], saga_id=self.saga_id)
        return StepRow(
            saga_id=self.saga_id,
            seq=seq,
            step_id=step_id,
            group=group,
            tool_name=tool,
            args=args,
            idempotency_key=self._key(step_id),
            tool_version=spec.version if (spec := self._registry.find(tool)) is not None else "1",
        )

    def _outcome(self, row: StepRow) -> Any:
        # A copy: the caller must not change the record.
        if row.status is StepStatus.SUCCESS or (row.status is StepStatus.COMPENSATED and row.error is None):
            return own_copy(row.result)
        if row.status is StepStatus.COMPENSATION_FAILED and row.error is None:
            return own_copy(row.result)
        if row.status is StepStatus.REJECTED:
            self._refuse(row)
        if row.error_type == "BudgetExceededError":
            raise BudgetExceededError(
                f"saga {self.saga_id!r}: call {row.step_id!r} ({row.tool_name}) crossed the budget: {row.error}",
                saga_id=self.saga_id,
                cost=self._saga_row.cost,
                tokens=self._saga_row.tokens,
            )
        cause = self._engine.verdict.errors.get(row.step_id) if self._engine is not None else None
        raise StepFailedError(
            f"saga {self.saga_id!r}: call {row.step_id!r} ({row.tool_name}) failed: {row.error}",
            saga_id=self.saga_id,
            step_id=row.step_id,
            tool_name=row.tool_name,
            attempts=row.attempts,
            error=row.error,
            error_type=row.error_type,
        ) from cause

    @property
    def _saga_row(self) -> SagaRow:
        if self._engine is not None:
            return self._engine.saga
        assert self._stored is not None
        return self._stored[0]

    # -- child sagas

    async def child(
        self,
        fn_or_plan: Sequence[Any] | Callable[..., Any] | str,
        *,
        args: Mapping[str, Any] | None = None,
        saga_id: str | None = None,
    ) -> SagaResult:
        """Run another saga — a registered saga function (or its name) called with `args`, or a plan — as one step
        of this one; return its SagaResult (its `output`, its `parent_id` this saga's id).

        Its id defaults to `<this saga's id>/<step id>`. A child that does not end SUCCESS raises `StepFailedError`,
        its own effects already undone. When this saga compensates, a SUCCESS child is compensated as a whole (its
        steps in reverse). The child is resumed with this saga: a re-run reaching this call again finds the child's
        record (an ended child is returned from it, no tool called again; a live one is driven on, never a second).
        `args` with a plan raises `TypeError`; an unregistered function or bad arguments `PlanValidationError`
        (nothing stored).
        """
        self._check_open()
        if self._waiting is not None:
            raise self._waiting
        function = target(self._registry, fn_or_plan, args)
        try:
            call, stem = child_call(self._registry, function, fn_or_plan, args, keyring=self._config.keyring)
        except PlanValidationError as exc:
            raise PlanValidationError(exc.problems, saga_id=self.saga_id) from None
        step_id = f"{stem}-{self._next_seq}"
        child_id = f"{self.saga_id}/{step_id}" if saga_id is None else saga_id
        if not isinstance(child_id, str) or not valid_id(child_id):
            raise PlanValidationError(
                [
                    f"a child's saga_id must be non-empty Unicode text without NUL, of at most {MAX_ID_BYTES} bytes "
                    f"in UTF-8, got {child_id!r}"
                ],
                saga_id=self.saga_id,
            )
        call["saga_id"] = child_id
        if self._engine is not None and self._next_seq >= len(self._record):  # a new call: its id must be free
            stored = await self._store.load_saga(child_id)
            if stored is not None and stored[0].parent_id != self.saga_id:
                raise IdempotencyConflictError(
                    f"saga {child_id!r} exists and is not a child of {self.saga_id!r}: give the child another saga_id",
                    saga_id=child_id,
                )
        json_args, kwargs = call_args(self._registry.get(CHILD_TOOL), call, self._config.keyring, what="the child saga")
        await self._run_calls([(CHILD_TOOL, json_args, step_id, kwargs)], join="all", k=None, return_exceptions=False)
        result = await sagas.get_saga(self._store, child_id)
        if result is None:
            raise SagaNotFoundError(
                f"child saga {child_id!r} of {self.saga_id!r} is not in {self._store.url}", saga_id=child_id
            )
        return result

    # -- time

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds`, the wake time recorded at the saga's position: a resumed saga waits only what remains.

        In a saga function, a wait longer than the executor's `wait_threshold` releases the saga: it is WAITING,
        holds no lease and no worker slot, and `serve()` resumes it (its code run again over its record) once
        due. In a dynamic saga (`executor.saga()`) every wait stays in this process, under the lease.
        """
        given: object = seconds  # callers outside mypy's reach pass anything
        if isinstance(given, bool) or not isinstance(given, int | float) or not math.isfinite(given) or given < 0:
            raise ValueError(f"sleep takes a finite number of seconds >= 0, got {seconds!r}")
        self._check_open()
        position, self._sleeps_seen = self._sleeps_seen, self._sleeps_seen + 1
        driver = self._driver
        if driver is None:
            return  # served from the record: a replay waits for nothing
        self._check_not_cancelled()
        wake = await driver.sleep_until(position, float(seconds))
        remaining = (wake - now()).total_seconds()
        if remaining <= 0:
            return
        if self._function is not None and remaining > self._config.wait_threshold:
            await driver.release()  # WAITING until due: this code stops here, and runs again from its record
        await driver.settle()
        while remaining > 0:
            await anyio.sleep(min(remaining, WAIT_POLL))
            self._check_not_cancelled()  # an operator's cancel, taken in meanwhile, ends the wait
            remaining = (wake - now()).total_seconds()

    async def recv(self, topic: str, *, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - recorded, not a scope
        """Return the oldest message sent to this saga on `topic` (`executor.send`) not yet received, each received
        once; None once `timeout` seconds passed without one (None: wait as long as it takes).

        Recorded at the saga's position: a resumed saga receives the same message, and waits only what remains. A
        wait longer than `wait_threshold` releases a saga function (WAITING) until its message comes or the time
        is up; in a dynamic saga (`executor.saga()`) the wait stays in this process.
        """
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"recv takes a topic, a non-empty str, got {topic!r}")
        given: object = timeout
        if given is not None and (
            isinstance(given, bool) or not isinstance(given, int | float) or math.isnan(given) or given < 0
        ):
            raise ValueError(f"recv's timeout must be None or seconds >= 0, got {timeout!r}")
        self._check_open()
        position, self._recvs_seen = self._recvs_seen, self._recvs_seen + 1
        driver = self._driver
        saga = self._saga_row
        begun = next((e for e in saga.history if e.get("kind") == "recv" and e.get("position") == position), None)
        if begun is not None and begun.get("topic") != topic:
            error = ReplayDivergenceError(
                f"saga {self.saga_id!r} wait #{position + 1} is recv({topic!r}) but the record holds "
                f"recv({begun.get('topic')!r}); a resumed saga must wait for the same things in the same order",
                saga_id=self.saga_id,
                position=position,
            )
            if driver is not None and self._function is not None:
                driver.diverged = error
            raise error
        if driver is None:  # served from the record
            done = next(
                (e for e in saga.history if e.get("kind") == "received" and e.get("position") == position), None
            )
            return None if done is None else own_copy(done.get("value"))
        seconds = None if timeout is None or math.isinf(timeout) else float(timeout)
        value = await receive(driver, position, topic, seconds, releasable=self._function is not None)
        return own_copy(value)

    # -- events and streams

    async def set_event(self, key: str, value: Any) -> None:
        """Set the event `key` to `value` (a JSON value), recorded: `executor.get_event` reads its latest value."""
        await self._publish({"kind": "event", "key": key, "value": value}, key)

    async def write_stream(self, name: str, value: Any) -> None:
        """Append `value` (a JSON value) to the stream `name`: `executor.read_stream` yields it, in order."""
        await self._publish({"kind": "stream", "name": name, "value": value}, name)

    async def close_stream(self, name: str) -> None:
        """Close the stream `name`: its readers stop once they have every value."""
        await self._publish({"kind": "stream_closed", "name": name}, name)

    async def _publish(self, entry: dict[str, Any], label: str) -> None:
        if not isinstance(label, str) or not label:
            raise ValueError(f"an event key or stream name is a non-empty str, got {label!r}")
        if "value" in entry:
            entry["value"] = checked_json(entry["value"], "value")
        self._check_open()
        position, self._published = self._published, self._published + 1
        driver = self._driver
        if driver is None:
            return  # served from the record: a replay publishes nothing
        recorded = await driver.publish(position, entry)
        if recorded is not None and (recorded.get("kind"), recorded.get("key", recorded.get("name"))) != (
            entry["kind"],
            label,
        ):
            error = ReplayDivergenceError(
                f"saga {self.saga_id!r} publication #{position + 1} is {entry['kind']} {label!r} but the record holds "
                f"{recorded.get('kind')} {recorded.get('key', recorded.get('name'))!r}",
                saga_id=self.saga_id,
                position=position,
            )
            if self._function is not None:
                driver.diverged = error
            raise error

    # -- metadata

    @property
    def metadata(self) -> dict[str, Any]:
        """Return a copy of the saga's metadata (a deep one: changing it changes nothing stored)."""
        copied: dict[str, Any] = own_copy(self._saga_row.metadata)
        return copied

    async def set_metadata(self, **values: Any) -> None:
        """Merge JSON-able values into the saga's metadata, written at once (not in a replay)."""
        self._check_open()
        engine = self._engine
        if engine is None:
            return
        stored = to_json_value(values, what="the metadata", tool_name="(saga)")
        engine.record(metadata={**engine.saga.metadata, **stored})
        await engine.flush()

    # -- money

    async def charge(self, cost: float = 0.0, tokens: int = 0) -> None:
        """Add cost and tokens (written at once; not again on re-execution); raise `BudgetExceededError` over a cap."""
        self._check_open()
        engine = self._engine
        if engine is None:
            return  # a replay spends nothing
        self._charges_seen += 1
        account = engine.saga.budget or {}
        crossed_at = account.get("crossed_at")
        if self._charges_seen <= int(account.get("charges", 0)):
            # Recorded already: not counted again, but fails as it did.
            if crossed_at is not None and self._charges_seen >= crossed_at:
                raise BudgetExceededError(
                    f"saga {self.saga_id!r} is over budget (recorded: charge #{crossed_at} crossed it)",
                    saga_id=self.saga_id,
                    cost=engine.saga.cost,
                    tokens=engine.saga.tokens,
                )
            return
        engine.record(budget={**account, "charges": self._charges_seen})
        try:
            engine.account.charge(cost, tokens)
        except BudgetExceededError:
            if crossed_at is None:
                engine.record(budget={**(engine.saga.budget or {}), "crossed_at": self._charges_seen})
            raise
        finally:
            await engine.flush()

    @property
    def cost(self) -> float:
        """Return what the saga has spent so far."""
        return self._saga_row.cost

    @property
    def tokens(self) -> int:
        """Return the tokens the saga has used so far."""
        return self._saga_row.tokens


def _account(budget: Budget | None, charges: int) -> dict[str, Any] | None:
    if budget is None:
        return None
    return {**budget.to_json(), "charges": charges}


def _brief(args: Any) -> str:
    text = canonical_json(args)
    return text if len(text) <= 80 else text[:77] + "..."
