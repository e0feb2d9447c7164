"""Flavour: what one database's SQL differs in, declared by its dialect module (_sqlite, _postgres, _mysql).

The shared SQL modules (_sql, _codec, _approval_sql, _queue_sql, _sql_schedules, _sql_retention) build every
statement and convert every value from a flavour's declarations: they never ask which database it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

__all__ = ["Flavour", "Notices"]


@dataclass(frozen=True)
class Notices:
    """The statements that tell listening workers at once (PostgreSQL's LISTEN/NOTIFY), built by the dialect whose
    database has them; the shared SQL modules only place them."""

    #: An UPDATE setting a saga's queue -> one statement doing it and notifying the queue channel (the queue's name).
    enqueued: Callable[[str], str]
    #: A message's INSERT (params: saga_id, message_id, topic, body, sent_at; it returns a row if stored) -> one
    #: statement storing it, making its saga due if WAITING, and notifying the queue channel ("message:<saga id>").
    message_put: Callable[[str], str]
    #: Notify the queue channel with a payload (one `?`).
    queued: str
    #: Notify the channel of decisions, cancels, unparks, retries and messages (no parameter).
    decided: str


@dataclass(frozen=True, eq=False)
class Flavour:
    """One database's SQL: its column types, clauses, placeholders, locks, clocks and how values reach its driver."""

    #: Column types by role: id, short, text, json, time, int, bigint, float.
    types: Mapping[str, str]
    #: What follows a CREATE TABLE's columns (MySQL/MariaDB: the engine and character set).
    table_suffix: str
    #: `sql` with its `?` placeholders in the driver's style.
    placeholders: Callable[[str], str]
    #: "Now" in a lease comparison, and a lease written (the writer's `?` in each, where the clock is local).
    now_sql: str
    lease_sql: str
    #: The query a claim reads the database's clock with; None: the one machine's clock, a parameter.
    clock_sql: str | None
    #: A row read to be written in the same transaction: locked where the database needs it.
    lock_row: str
    #: A saga read after waiting on a concurrent insert of its id: locked where a plain read sees the old snapshot.
    lock_reread: str
    #: A scan taking rows another claimer may hold: locked, those held skipped.
    lock_skip: str
    #: A queue's scan of startable sagas (start order kept: see _sql._queue_waiting).
    lock_queue_scan: str
    #: A purge's scan of finished sagas (joined: only the saga rows locked).
    lock_purge_scan: str
    #: What an INSERT ends with to write nothing where `target` is taken (`column = column` where it cannot say so).
    insert_ignore: Callable[[str, str | None], str]
    #: What an INSERT ends with to rewrite `columns` of the row whose `target` is taken.
    upsert: Callable[[str, Sequence[str]], str]
    #: How many tables a name has in the current schema (one `?`: the table's name).
    table_exists: str
    #: The statements notifying listening workers (LISTEN/NOTIFY), where the database has them; else None.
    notices: Notices | None
    #: Whether UPDATE ... RETURNING serves.
    returning: bool
    #: A query making the current transaction's commit not wait for the disk (a claim's: see _approval_sql), or None.
    unsynced_commit: str | None
    #: ALTER TABLE takes one column at a time (its DDL is transactional anyway).
    alter_one_column: bool
    #: Whether an index may hold only the rows a WHERE picks.
    partial_indexes: bool
    #: Migration 3's statements: JSON columns kept as text, and the saga rows' seal column (the types given).
    json_as_text: Callable[[Mapping[str, str]], list[str]]
    #: A UTC time as the driver stores it.
    time_value: Callable[[datetime], Any]
    #: Leases are written and compared on the one machine's clock (times as given), not the database's.
    local_clock: bool
    #: What is left of a lease, as `lease_sql` takes it where the database keeps the clock.
    lease_length: Callable[[timedelta], Any]
    #: Ids are sent as bytes (exact comparison where string collations are not).
    ids_as_bytes: bool
    #: What stands for ` IN (*)`, a list of ids, where the list is one array parameter (one statement whatever its
    #: length, prepared once per connection); None: one placeholder per id.
    id_array: str | None = None
    #: What follows the table's name in a statement locking several saga rows by their ids, for the database to
    #: reach them by the primary key, so in saga_id order (the order every such statement locks them in).
    by_key: str = ""
    #: How full (percent) an insert leaves a page of the steps table, where an update that finds room on its row's
    #: page writes no index entry (PostgreSQL's HOT update): None, the database's own fill.
    steps_fillfactor: int | None = None
    #: Indexes can be renamed (ALTER INDEX ... RENAME TO): a rebuilt one is built beside the old one, then swapped in.
    index_renames: bool = False

    @property
    def notifies(self) -> bool:
        """Return whether statements notify listening workers (the flavour has `notices`)."""
        return self.notices is not None

    def alter(self, table: str, columns: Sequence[str]) -> list[str]:
        """Return the ALTER TABLE statements adding `columns` (one statement, where the database takes several)."""
        if self.alter_one_column:
            return [f"ALTER TABLE {table} {column}" for column in columns]
        return [f"ALTER TABLE {table} " + ", ".join(columns)]
