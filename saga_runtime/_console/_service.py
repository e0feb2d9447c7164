"""What the console does with a store: find sagas, read one with its verdict, and the four actions an operator takes.

Only the public API of the store and of `SagaAdmin` is used: `list_sagas`, `get_saga`, `verify_saga`, and
`approve`, `reject`, `retry_compensation`, `unpark`, `cancel`, `pending_approvals`, `queues`, `pause_queue`,
`resume_queue`, `drain_queue`.
"""

from __future__ import annotations

from dataclasses import dataclass

from saga_runtime._admin import SagaAdmin
from saga_runtime._exceptions import ApprovalError, SagaError, SagaInProgressError, StoreError
from saga_runtime._records import ApprovalRequest, QueueInfo, SagaResult, SagaStatus, SagaSummary, VerifyResult
from saga_runtime._storage import SagaStore, sagas

__all__ = ["ACTIONS", "CANCELLABLE", "QUEUE_ACTIONS", "ActionRefused", "Console", "Outcome"]

ACTIONS = ("approve", "reject", "retry-compensation", "unpark", "cancel")
QUEUE_ACTIONS = ("pause", "resume", "drain")
#: The statuses a saga can be cancelled in (a terminal one is left as it is).
CANCELLABLE = frozenset({SagaStatus.QUEUED, SagaStatus.RUNNING, SagaStatus.COMPENSATING, SagaStatus.WAITING})
_SEARCH_DEPTH = 2000  # the newest sagas an id search looks through (an exact id is always found)


class ActionRefused(Exception):
    """An action the console did not carry out; `http_status` says why, as an HTTP status."""

    def __init__(self, message: str, http_status: int) -> None:
        super().__init__(message)
        self.http_status = http_status


@dataclass(frozen=True)
class Outcome:
    """What an action did: a sentence for people, and the saga as it stands after it."""

    message: str
    result: SagaResult | None


class Console:
    """The store and its operator's actions (`SagaAdmin`) behind the pages and the API."""

    def __init__(self, store: SagaStore, admin: SagaAdmin, *, can_resume: bool) -> None:
        self.store = store
        self.admin = admin
        self.can_resume = can_resume  # the tools were given: a decision goes on with the saga here

    async def find(
        self,
        status: SagaStatus | None,
        search: str,
        *,
        limit: int,
        offset: int,
        queue: str = "",
        reason: str | None = None,
    ) -> tuple[list[SagaSummary], bool]:
        """Return a page of sagas (of `queue`, of one end `reason`, if given), newest first, and whether there are
        more after it."""
        search = search.strip()
        if queue:
            found = await self.admin.list_sagas(
                status,
                limit=limit + 1 + (offset if search else 0),
                offset=0 if search else offset,
                queue=queue,
                reason=reason,
            )
            if search:
                found = [s for s in found if search in s.saga_id][offset:]
            return found[:limit], len(found) > limit
        if not search:
            found = await sagas.list_sagas(self.store, status, limit=limit + 1, offset=offset, reason=reason)
            return found[:limit], len(found) > limit
        listed = await sagas.list_sagas(self.store, status, limit=_SEARCH_DEPTH, reason=reason)
        matches = [s for s in listed if search in s.saga_id]
        exact = await sagas.get_saga(self.store, search)
        if exact is not None and (status is None or exact.status is status) and reason in (None, exact.end_reason):
            if all(s.saga_id != search for s in matches):
                matches.insert(0, await self._summary_of(exact))
            matches.sort(key=lambda s: s.saga_id != search)  # the exact id first
        return matches[offset : offset + limit], len(matches) > offset + limit

    async def _summary_of(self, result: SagaResult) -> SagaSummary:
        return SagaSummary(
            saga_id=result.saga_id,
            status=result.status,
            kind=result.kind,
            created_at=result.created_at,
            updated_at=result.finished_at or result.created_at,
            finished_at=result.finished_at,
            step_count=len(result.steps),
            cost=result.cost,
            tokens=result.tokens,
            error=result.error,
            end_reason=result.end_reason,
            waiting_for=result.waiting_for,
        )

    async def saga(self, saga_id: str) -> tuple[SagaResult, VerifyResult] | None:
        """Return a saga's record and the verdict of its hash chain, or None if the store has no such saga."""
        result = await sagas.get_saga(self.store, saga_id)
        if result is None:
            return None
        return result, await sagas.verify_saga(self.store, saga_id)

    async def pending(self, limit: int = 100) -> list[ApprovalRequest]:
        """Return the requests waiting for a decision, oldest first, across sagas."""
        return await self.admin.pending_approvals(limit=limit)

    async def queues(self) -> list[QueueInfo]:
        """Return every queue: its sagas by state, the oldest queued, paused or draining, the known limits."""
        return await self.admin.queues()

    async def queue_act(self, action: str, name: str) -> str:
        """Pause, resume or drain queue `name`; return what it did; raise `ActionRefused` when it cannot."""
        if action not in QUEUE_ACTIONS:
            raise ActionRefused(f"no queue action {action!r}: the console takes {', '.join(QUEUE_ACTIONS)}", 404)
        change = {"pause": self.admin.pause_queue, "resume": self.admin.resume_queue, "drain": self.admin.drain_queue}
        try:
            info = await change[action](name)
        except ValueError as exc:
            raise ActionRefused(str(exc), 400) from None
        except StoreError as exc:
            raise ActionRefused(f"the store failed: {exc}", 503) from None
        return f"queue {name} is {info.state}"

    async def act(
        self, action: str, saga_id: str, step_id: str = "", by: str = "", note: str = "", args_digest: str = ""
    ) -> Outcome:
        """Carry out one action; raise `ActionRefused` (with an HTTP status) when it cannot be done."""
        if action not in ACTIONS:
            raise ActionRefused(f"no action {action!r}: the console takes {', '.join(ACTIONS)}", 404)
        if not saga_id:
            raise ActionRefused("the saga id is missing", 400)
        try:
            if await sagas.get_saga(self.store, saga_id) is None:
                raise ActionRefused(f"no saga {saga_id!r} in the store", 404)
            if action in ("approve", "reject"):
                return await self._decide(action, saga_id, step_id, by, note, args_digest)
            if action == "unpark":
                await self.admin.unpark(saga_id)
                return Outcome(f"saga {saga_id} is live again; the next recovery takes it over", None)
            if action == "cancel":
                return await self._cancel(saga_id, by, note)
            if not self.can_resume:
                raise ActionRefused(
                    "retrying a compensation runs your tools: start the console with --tools module:registry", 409
                )
            result = await self.admin.retry_compensation(saga_id)
            return Outcome(f"saga {saga_id}: compensations retried; it is {result.status.value}", result)
        except (ApprovalError, SagaInProgressError) as exc:
            raise ActionRefused(str(exc), 409) from None
        except KeyError as exc:
            raise ActionRefused(str(exc.args[0]) if exc.args else "not found", 404) from None
        except StoreError as exc:
            raise ActionRefused(f"the store failed: {exc}", 503) from None
        except SagaError as exc:
            raise ActionRefused(f"{type(exc).__name__}: {exc}", 409) from None

    async def _cancel(self, saga_id: str, by: str, note: str) -> Outcome:
        # Who asks is recorded as the cancel's `by`, as a decision's ("console" when the form left it empty).
        result = await self.admin.cancel(saga_id, reason=note.strip() or None, by=by.strip() or "console")
        if result.status.is_terminal:
            return Outcome(f"saga {saga_id} is {result.status.value}", result)
        return Outcome(f"saga {saga_id}: cancel requested; its owner stops it and compensates", result)

    async def _decide(self, action: str, saga_id: str, step_id: str, by: str, note: str, args_digest: str) -> Outcome:
        if not step_id:
            raise ActionRefused("the step id is missing", 400)
        if not by.strip():
            raise ActionRefused("say who decides: the decision is recorded with a name", 400)
        if action == "approve":
            result = await self.admin.approve(
                saga_id,
                step_id,
                by=by.strip(),
                note=note or None,
                args_digest=args_digest or None,
                resume=self.can_resume,
            )
        else:
            result = await self.admin.reject(saga_id, step_id, by=by.strip(), note=note or None, resume=self.can_resume)
        decided = "approved" if action == "approve" else "rejected"
        message = f"saga {saga_id}: step {step_id} {decided} by {by.strip()}; the saga is {result.status.value}"
        if result.status is SagaStatus.WAITING and not result.pending_approvals and not self.can_resume:
            message += " (a worker goes on with it)"
        return Outcome(message, result)
