"""Leases: a running saga's owner renews its lease, and stops (fencing) if another owner took it over."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

import anyio

from saga_runtime._engine import _journal
from saga_runtime._engine._journal import Journal
from saga_runtime._exceptions import describe
from saga_runtime._records import SagaStatus, now

__all__ = ["LeaseKeeper", "LeaseWheel"]

logger = logging.getLogger("saga_runtime")

# A compensating saga only records the cancel (see SagaEngine.cancel).
_CANCELLABLE = (SagaStatus.RUNNING, SagaStatus.COMPENSATING)


class LeaseWheel:
    """When the leases of one executor's sagas are due for renewal, on one event loop: one timer for them all.

    A saga's keeper is added with its due time (a renewal interval from now) and taken out when it stops; most
    sagas end before their first renewal is due, and then cost an entry in a dict, not a timer each. Every wait is
    the same interval, so the dict's order (insertion) is the order they fall due: the one timer waits for the
    first, and the keepers due are told in order.
    """

    __slots__ = ("_due", "_interval", "_timer", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self.loop = loop
        self._interval = interval
        self._due: dict[LeaseKeeper, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, keeper: LeaseKeeper) -> None:
        """Tell `keeper` (`keeper.due()`) when its renewal is due: an interval from now."""
        when = self.loop.time() + self._interval
        self._due[keeper] = when
        if self._timer is None:
            self._timer = self.loop.call_at(when, self._tick)

    def discard(self, keeper: LeaseKeeper) -> None:
        """Take a keeper out: it is not told (the timer, if it was the next, finds nothing due and waits on)."""
        self._due.pop(keeper, None)

    def _tick(self) -> None:
        self._timer = None
        due = self._due
        now_ = self.loop.time()
        while due:
            keeper, when = next(iter(due.items()))
            if when > now_:
                self._timer = self.loop.call_at(when, self._tick)
                return
            del due[keeper]
            keeper.due()


class LeaseKeeper:
    """Renew one running saga's lease every third of the lease timeout; fence the saga if the lease is lost.

    No timer of its own, no task, waits between renewals: its executor's `LeaseWheel` tells it when one is due.
    A renewal runs as a task owned by the keeper, and `stop()` cancels and awaits it.
    A store error only costs one renewal: the lease still has two thirds of its time when the next one is due.
    When the store says another executor owns the saga, the journal is fenced (it writes nothing more) and
    `on_lost` is called, which stops the saga's work instead of racing the new owner. A renewal also reads
    whether an operator asked to cancel the saga (`executor.cancel`); a RUNNING saga then is told (`on_cancel`,
    given the stored request): its running calls are cancelled and it compensates (a COMPENSATING one records it).
    """

    def __init__(
        self,
        journal: Journal,
        on_lost: Callable[[], None],
        *,
        on_cancel: Callable[[str], None] | None = None,
        wheel: LeaseWheel | None = None,
    ) -> None:
        self._journal = journal
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self._cancelled = False
        self._interval = journal.config.lease_timeout / 3
        # The wheel the executor's sagas share on this loop (`Claims.lease_wheel`), or one of its own.
        self._wheel = wheel if wheel is not None else LeaseWheel(asyncio.get_running_loop(), self._interval)
        self._loop = self._wheel.loop
        self._renewal: asyncio.Task[None] | None = None
        self._stopped = False
        self._lapsed = False  # the lease ran out unrenewed (told once, until it is renewed again)

    def start(self) -> LeaseKeeper:
        """Schedule the first renewal; return the keeper.

        The journal calls `on_lost` too when it learns of the loss itself (the store refused an owner-conditional
        write), whichever comes first.
        """
        self._journal.guard.on_lost = self._on_lost
        self._wheel.add(self)
        return self

    def due(self) -> None:
        """Renew the lease now (told by the wheel), in a task of the keeper's."""
        if not self._stopped:
            self._renewal = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        journal = self._journal
        saga = journal.saga
        config = journal.config
        if journal.saga_unwritten and not _finished(journal):
            # A change of status held for the next write (a WAITING saga gone on): written first, so the lease
            # renewed is that of a live saga.
            try:
                await journal.flush()
            except Exception as exc:  # the renewal says whether the saga is still this executor's
                logger.warning("saga %s: could not write it before renewing its lease: %s", saga.saga_id, exc)
        if not _finished(journal):
            renewed_at = now()
            expires = renewed_at + timedelta(seconds=config.lease_timeout)
            sent = journal.lease.mark()
            held: set[str] | None = None
            try:
                # Bounded: a store retrying a lost connection must not outlast the lease it is renewing.
                with anyio.fail_after(self._interval):
                    held = await _journal.renew(config.store, config.executor_id, [saga.saga_id], expires, renewed_at)
            except Exception as exc:
                logger.warning("saga %s: could not renew its lease, trying again: %s", saga.saga_id, describe(exc))
                if journal.lease.left() <= 0 and not self._lapsed and not _finished(journal):
                    # Not lost: nobody said another executor owns the saga. Tools already running go on; no tool
                    # starts until the store confirms the lease again (Journal.confirm_lease), which it does only
                    # if no other executor took the saga over meanwhile.
                    self._lapsed = True
                    logger.error(
                        "saga %s: its lease ran out while the store was unreachable; no step starts until the store "
                        "confirms it again (if another executor took the saga over meanwhile, this one stops then)",
                        saga.saga_id,
                    )
            if held is not None:
                if saga.saga_id in held:
                    journal.renewed(expires, sent)
                    await self._read_cancel()
                    if self._lapsed:
                        self._lapsed = False
                        logger.warning("saga %s: the store is back and the saga is still this executor's", saga.saga_id)
                elif not _finished(journal):  # not merely ended while the renewal was on its way
                    logger.error(
                        "saga %s: its lease was taken over by another executor; stopping here without writing",
                        saga.saga_id,
                    )
                    journal.fence(lost=True)  # calls on_lost
                    return
        if not self._stopped:
            self._wheel.add(self)

    async def _read_cancel(self) -> None:
        """Tell a RUNNING or COMPENSATING saga an operator asked to cancel it (once)."""
        saga = self._journal.saga
        if self._on_cancel is None or self._cancelled or saga.status not in _CANCELLABLE:
            return
        owner = self._journal.owner
        if owner is None:
            return
        try:
            with anyio.fail_after(self._interval):
                reason = await _journal.take_cancel(self._journal.config.store, saga.saga_id, owner)
        except Exception as exc:
            logger.warning("saga %s: could not read its cancel request: %s", saga.saga_id, describe(exc))
            return
        if reason is not None:
            self._cancelled = True
            self._on_cancel(reason)  # (logged as it is recorded)

    async def stop(self) -> None:
        """Cancel the next renewal, and one in flight, and wait for it to end."""
        self._stopped = True
        if self._journal.guard.on_lost is self._on_lost:
            self._journal.guard.on_lost = None
        self._wheel.discard(self)
        renewal = self._renewal
        if renewal is not None and not renewal.done():
            renewal.cancel()
            # Shielded from anyio scopes: the fence's own cancellation (the lease just lost) must not cut this
            # short and escape from a caller's cleanup; it is taken back by the fence scope right after.
            with anyio.CancelScope(shield=True):
                try:
                    await asyncio.shield(asyncio.wait([renewal]))
                except asyncio.CancelledError:
                    await asyncio.wait([renewal])  # the caller is leaving: still never leave the renewal behind
                    raise


def _finished(journal: Journal) -> bool:
    # A WAITING saga gave its lease up on purpose (its write cleared the owner): not a lease lost.
    return journal.saga.status.is_terminal or journal.saga.status is SagaStatus.WAITING
