"""SagaAdmin: what an operator does to a store's sagas, with no tool to run unless given a registry."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import anyio

from saga_runtime._engine import Actions, Drives, EngineConfig, SagaHook, journal
from saga_runtime._exceptions import SagaError
from saga_runtime._planner import RegistryPlanner, replay
from saga_runtime._records import (
    ACTIVE,
    APPROVED,
    DRAINING,
    END_REASONS,
    KEY_ENV,
    PAUSED,
    REJECTED,
    ApprovalRequest,
    PurgeReport,
    QueueInfo,
    QueueState,
    SagaHold,
    SagaResult,
    SagaStatus,
    SagaSummary,
    SecretKeyring,
    VerifyResult,
    now,
    summary_from_rows,
)
from saga_runtime._storage import SagaStore, queues_of, retention, sagas, waiting_counts
from saga_runtime._tools import Resources, ToolRegistry

__all__ = ["BulkSummary", "SagaAdmin"]

# Sagas read per page when a bulk action lists those it acts on.
_PAGE = 500
# Ended with effects still out there.
_NOT_UNDONE = frozenset({SagaStatus.COMPENSATION_FAILED, SagaStatus.PARKED})


@dataclass(frozen=True)
class BulkSummary:
    """What a bulk action did, each saga once: `results` (id → saga, None if left to a worker), `errors` (id →
    why it failed). Falsy when any failed."""

    action: str
    results: dict[str, SagaResult | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        """Return the ids it failed on, or that ended with effects not undone."""
        bad = [
            saga_id for saga_id, result in self.results.items() if result is not None and result.status in _NOT_UNDONE
        ]
        return sorted([*bad, *self.errors])

    def __bool__(self) -> bool:
        return not self.failed

    def __str__(self) -> str:
        counts = Counter(
            "left to a worker" if result is None else result.status.value for result in self.results.values()
        )
        parts = [f"{count} {what}" for what, count in sorted(counts.items())]
        if self.errors:
            parts.append(f"{len(self.errors)} failed")
        total = len(self.results) + len(self.errors)
        return f"{self.action}: {total} saga(s)" + (f": {', '.join(parts)}" if parts else "")


class SagaAdmin:
    """Read, verify, export and replay the sagas of `store`; decide approvals; unpark; retry compensations.

    Each action behaves as the `SagaExecutor` method of that name. Without `registry` no tool runs here: what
    needs one is left to a worker's `serve()` / `recover()`; with it, it runs here inside the registry's lifespan
    (left by `aclose()` or `async with`). `secret_key` and `hooks` as for `SagaExecutor`.
    """

    def __init__(
        self,
        store: SagaStore,
        *,
        registry: ToolRegistry | None = None,
        secret_key: str | bytes | Sequence[str | bytes] | None = None,
        hooks: Sequence[SagaHook] = (),
    ) -> None:
        if registry is not None and not isinstance(registry, ToolRegistry):
            raise TypeError(f"registry must be a ToolRegistry or None, got {type(registry).__name__}")
        self.store = store
        self.registry = registry
        tools = registry if registry is not None else ToolRegistry()
        self._resources = Resources(tools.lifespan_function)
        config = EngineConfig(
            registry=tools,
            store=store,
            executor_id=f"admin-{uuid.uuid4().hex[:12]}",
            lease_timeout=30.0,
            compensation_timeout=300.0,
            thread_limiter=anyio.CapacityLimiter(40),
            call_limiter=None,
            keyring=SecretKeyring.configured(secret_key if secret_key is not None else os.environ.get(KEY_ENV)),
            resources=self._resources,
            hooks=tuple(hooks),
        )
        self._actions = Actions(
            Drives(config),
            RegistryPlanner(tools, config.keyring),
            max_recovery_attempts=5,
            recovery_concurrency=32,
        )

    async def __aenter__(self) -> SagaAdmin:
        """Enter the registry's lifespan now (else before the first tool runs)."""
        await self._resources.enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Leave the registry's lifespan, if entered."""
        await self._resources.exit()

    def __repr__(self) -> str:
        tools = None if self.registry is None else self.registry.names()
        return f"SagaAdmin(store={self.store.url!r}, tools={tools!r})"

    # -- reading

    async def get_saga(self, saga_id: str) -> SagaResult | None:
        """Return a stored saga's result (its steps and approvals), or None."""
        return await sagas.get_saga(self.store, saga_id)

    async def list_sagas(
        self,
        status: SagaStatus | str | None = None,
        *,
        limit: int = 100,
        offset: int = 0,
        queue: str | None = None,
        reason: str | None = None,
    ) -> list[SagaSummary]:
        """Return summaries of stored sagas, newest first, optionally only those with `status`, of `queue`, and
        ended for `reason` (`SagaResult.end_reason`)."""
        if queue is None:
            return await sagas.list_sagas(self.store, status, limit, offset, reason=reason)
        if reason is not None and reason not in END_REASONS:
            raise ValueError(f"reason must be one of {list(END_REASONS)}, got {reason!r}")
        wanted = None if status is None else SagaStatus(status)
        rows = await queues_of(self.store).list_queue_rows(_queue_name(queue), wanted, int(limit), int(offset))
        summaries = [summary_from_rows(saga, count) for saga, count in rows]
        return await sagas.queue_waits(self.store, [s for s in summaries if reason is None or s.end_reason == reason])

    # -- queues (API.md §19) --------------------------------------------------------------------------------------

    async def queues(self) -> list[QueueInfo]:
        """Return each queue holding sagas not finished, or paused, drained or served: counts, state, limits."""
        return await queues_of(self.store).queue_infos()

    async def pause_queue(self, name: str) -> QueueInfo:
        """Pause queue `name`: no worker starts its sagas (what runs goes on) until `resume_queue`; stored."""
        return await self._set_queue(name, PAUSED)

    async def resume_queue(self, name: str) -> QueueInfo:
        """Let workers start queue `name`'s sagas again after a pause or a drain (PostgreSQL: at once)."""
        return await self._set_queue(name, ACTIVE)

    async def drain_queue(self, name: str) -> QueueInfo:
        """Drain queue `name`: start nothing new, let what runs finish; `queues()` says "drained" once idle."""
        return await self._set_queue(name, DRAINING)

    async def _set_queue(self, name: str, state: QueueState) -> QueueInfo:
        name = _queue_name(name)
        await journal.set_queue_state(self.store, name, state, now())
        return next(info for info in await queues_of(self.store).queue_infos() if info.name == name)

    async def waiting_counts(self) -> dict[str, int]:
        """Return how many sagas wait for each kind of thing (`SagaResult.waiting_for["kind"]`), as sampled."""
        return await waiting_counts(self.store)

    async def verify_saga(self, saga_id: str) -> VerifyResult:
        """Check a stored saga's hash chain; falsy, naming the broken records, if altered."""
        return await sagas.verify_saga(self.store, saga_id)

    async def export_saga(self, saga_id: str) -> dict[str, Any]:
        """Return a saga as a JSON-able, versioned document; raise `KeyError` if it is not stored."""
        return await sagas.export_saga(self.store, saga_id)

    async def replay(self, saga_id: str) -> SagaResult:
        """Rebuild a saga from its records, calling no tool; raise `ReplayDivergenceError` if they disagree."""
        return await replay(self.store, saga_id)

    # -- retention (API.md §14) -------------------------------------------------------------------------------

    async def purge(
        self,
        *,
        older_than: timedelta | float,
        statuses: Sequence[SagaStatus | str] | None = None,
        archive: Any = None,
        dry_run: bool = False,
        limit: int | None = None,
    ) -> PurgeReport:
        """Purge terminal sagas finished over `older_than` ago to tombstones, as `store.purge` does."""
        return await retention.purge(
            self.store, older_than=older_than, statuses=statuses, archive=archive, dry_run=dry_run, limit=limit
        )

    async def hold(self, saga_id: str, *, reason: str) -> None:
        """Hold a saga: never purged until released; raise `KeyError` if no saga has the id."""
        await retention.hold(self.store, saga_id, reason)

    async def unhold(self, saga_id: str) -> bool:
        """Release a saga's hold; return whether it was held."""
        return await retention.unhold(self.store, saga_id)

    async def holds(self) -> list[SagaHold]:
        """Return every hold, oldest first."""
        return await retention.holds(self.store)

    # -- approvals ---------------------------------------------------------------------------------------------

    async def pending_approvals(self, *, limit: int = 100) -> list[ApprovalRequest]:
        """Return the undecided approval requests in the store, oldest first."""
        return await self._actions.pending(limit)

    async def approve(
        self,
        saga_id: str,
        step_id: str,
        *,
        by: str,
        note: str | None = None,
        args_digest: str | None = None,
        resume: bool = True,
    ) -> SagaResult:
        """Allow a waiting step, recorded once; with `registry` and `resume` the saga goes on here, else a worker's."""
        return await self._actions.decide(
            saga_id, step_id, APPROVED, by=by, note=note, digest=args_digest, resume=self._here(resume)
        )

    async def reject(
        self, saga_id: str, step_id: str, *, by: str, note: str | None = None, resume: bool = True
    ) -> SagaResult:
        """Refuse a waiting step, recorded once; `resume` as for `approve` (the saga then compensates)."""
        return await self._actions.decide(
            saga_id, step_id, REJECTED, by=by, note=note, digest=None, resume=self._here(resume)
        )

    def _here(self, resume: bool) -> bool:
        """Tell whether a decided saga goes on here."""
        return resume and self.registry is not None

    # -- operator actions

    async def unpark(self, saga_id: str, *, compensate: bool = False) -> SagaResult | None:
        """Make a PARKED saga live again, or (`compensate=True`) give up on it: it becomes COMPENSATING.

        Compensated here with `registry` (result returned), else by a later `recover()` (None). With `registry`, a
        saga waiting for missing tools is given up the same way; their steps end COMPENSATION_FAILED.
        """
        await self._resources.enter()
        return await self._actions.unpark(saga_id, compensate=compensate, tools=self.registry is not None)

    async def retry_compensation(self, saga_id: str) -> SagaResult:
        """Reopen a COMPENSATION_FAILED saga's compensations: run here with `registry`, else by a later `recover()`.

        Steps already COMPENSATED are never compensated again.
        """
        await self._resources.enter()
        return await self._actions.retry_compensation(saga_id)

    async def cancel(self, saga_id: str, *, reason: str | None = None, by: str | None = None) -> SagaResult:
        """Cancel a saga and return it as it stands; an unknown id raises `SagaNotFoundError`.

        QUEUED ends COMPENSATED at once; RUNNING is compensated by its owner within `lease_timeout / 3`; WAITING
        has its requests rejected (`decided_by="cancel"`) and compensates; a terminal saga is unchanged.
        `by` (who asks: a person, an operator) is recorded as the cancel's `by`; this admin's executor id when None.
        """
        if by is not None and (not isinstance(by, str) or not by.strip()):
            raise ValueError(f"by must be a non-empty str or None (who asks), got {by!r}")
        return await self._actions.cancel(saga_id, reason, None if by is None else by.strip())

    # -- bulk operator actions

    async def retry_compensations(self, *, since: datetime | timedelta | None = None) -> BulkSummary:
        """Retry every COMPENSATION_FAILED saga (ended after `since`: a time or an age) once; return the summary."""
        cutoff = now() - since if isinstance(since, timedelta) else since
        ids = await self._matching(SagaStatus.COMPENSATION_FAILED, cutoff)
        whole = []  # a purged saga's tombstone keeps its status but has nothing left to retry
        for saga_id in ids:
            loaded = await self.store.load_saga(saga_id)
            if loaded is not None and loaded[0].purged_at is None:
                whole.append(saga_id)
        return await self._each("retry-compensation", whole, self.retry_compensation)

    async def unpark_all(self, *, compensate: bool = False) -> BulkSummary:
        """Unpark every PARKED saga once; return the summary."""

        async def unpark(saga_id: str) -> SagaResult | None:
            return await self.unpark(saga_id, compensate=compensate)

        ids = await self._matching(SagaStatus.PARKED, None)
        return await self._each("unpark", ids, unpark)

    async def _matching(self, status: SagaStatus, since: datetime | None) -> list[str]:
        """Return the ids of every saga in `status` since `since`, all listed before any is acted on."""
        ids: list[str] = []
        offset = 0
        while True:
            page = await sagas.list_sagas(self.store, status, _PAGE, offset)
            ids += [s.saga_id for s in page if since is None or (s.finished_at or s.updated_at) >= since]
            if len(page) < _PAGE:
                return list(dict.fromkeys(ids))  # once, even if listed on two pages
            offset += _PAGE

    @staticmethod
    async def _each(action: str, ids: list[str], act: Callable[[str], Awaitable[SagaResult | None]]) -> BulkSummary:
        summary = BulkSummary(action)
        for saga_id in ids:
            try:
                summary.results[saga_id] = await act(saga_id)
            except (SagaError, KeyError) as exc:
                summary.errors[saga_id] = str(exc.args[0]) if isinstance(exc, KeyError) else str(exc)
        return summary


def _queue_name(name: object) -> str:
    """Return a queue name as given; raise ValueError for what no queue can be named (nothing is stored)."""
    if not isinstance(name, str) or not name or len(name.encode()) > 255 or "\x00" in name:
        raise ValueError(f"a queue name must be non-empty text of at most 255 bytes, got {name!r}")
    return name
