"""Dialect: what the one SQL store needs of a database, one object per database (no subclass of the store).

A dialect holds the database's connections (a file's one connection, a pool), its statements (`Queries`), its row
codec, its batch writer, and its error table: which driver errors are one write's doing (`write_errors`), lost
connections and duplicates (each driver module's `map_exceptions`, raised as StoreError subclasses).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import ClassVar

from saga_runtime._storage._approval_sql import ApprovalQueries
from saga_runtime._storage._batch import Outcome, Write
from saga_runtime._storage._codec import RowCodec
from saga_runtime._storage._flavour import Flavour
from saga_runtime._storage._open import redact_url
from saga_runtime._storage._outage import Outage
from saga_runtime._storage._sql import DialectName, Queries
from saga_runtime._storage._sqlwrite import Transaction

__all__ = ["Dialect"]


class Dialect(abc.ABC):
    """One database's statements, codec, connections, batch writer and error table, for `SQLStore`."""

    name: ClassVar[DialectName]
    # What its SQL differs in: every statement and the codec are built from it (never from `name`).
    flavour: ClassVar[Flavour]
    # The driver errors that are one write's doing (a batch failing with one is written again write by write);
    # None: any error but a lost connection may be.
    write_errors: ClassVar[tuple[type[BaseException], ...] | None] = None
    # An UPDATE reports the rows it changed, not those it matched (MySQL): 0 also when it rewrote the same values.
    counts_changed_rows: ClassVar[bool] = False

    def __init__(self, url: str, *, retry_for: float, writers: int) -> None:
        self.url = redact_url(url)
        self.retry_for = retry_for
        # Batches written at once: SQLite has one writer; a pool has more.
        self.writers = writers
        self.queries = Queries(self.flavour)
        self.approval_queries = ApprovalQueries(self.flavour)
        self.codec = RowCodec(self.flavour)
        # Set by the store as it closes: no connection is kept for later from then on.
        self.closed = False
        # Whether the database answers: an outage is logged once as it starts and once as it ends.
        self.outage = Outage(self.url)

    @abc.abstractmethod
    def transaction(self, *, begin: bool) -> AbstractAsyncContextManager[Transaction]:
        """Return a context holding a connection, in one transaction if `begin`, else in autocommit.

        With `begin`, the transaction commits when the block ends and rolls back if it raises. Without, each
        statement commits on its own: for reads and single-statement writes, one round trip instead of three.
        Driver errors raised inside come out as StoreError subclasses.
        """

    @abc.abstractmethod
    def schema_transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """Return a transaction that holds the database's schema lock, so one process migrates at a time."""

    def claim_transaction(self) -> AbstractAsyncContextManager[Transaction]:
        """Return the transaction recovery claims expired sagas in (a dialect may pick its isolation)."""
        return self.transaction(begin=True)

    @abc.abstractmethod
    async def write_batch(self, writes: Sequence[Write]) -> Sequence[Outcome | Exception]:
        """Write a batch, each write's condition checked with it, atomically; return each write's outcome."""

    @asynccontextmanager
    async def queue_wakeups(self, wake: Callable[[str], None]) -> AsyncIterator[bool]:
        """Hear of no submit: workers poll (yields False); a database with notifications calls `wake(queue)`."""
        yield False

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every connection of the dialect."""
