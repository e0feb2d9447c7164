"""What every SQL store shares: the schema per dialect, its migrations and the SQL text (rows <-> values: _codec).

The schema (DESIGN.md) has one shape on every database; only column types differ. Values reach SQL as parameters
only: tool names, step ids, args and results never become SQL text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from saga_runtime._exceptions import SchemaVersionError, StoreError
from saga_runtime._records import END_REASONS, SagaStatus
from saga_runtime._storage._codec import SAGA_COLUMNS, STEP_COLUMNS, DialectName, RowCodec
from saga_runtime._storage._flavour import Flavour

__all__ = [
    "DECIDED_CHANNEL",
    "LIVE_STATUSES",
    "MIGRATIONS",
    "QUEUED_CHANNEL",
    "SAGA_COLUMNS",
    "SCHEMA_VERSION",
    "SEALED_SAGAS_VERSION",
    "STEP_COLUMNS",
    "DialectName",
    "Flavour",
    "Migration",
    "Queries",
    "RowCodec",
    "ids_param",
    "in_list",
    "json_columns_modified",
    "json_columns_retyped",
    "json_text_already",
    "schema_too_new",
    "unasked",
    "version_table_ddl",
]

# The PostgreSQL channel a submit notifies (its payload the queue's name), so idle workers start it at once.
QUEUED_CHANNEL = "saga_runtime_queued"
# The channel of decisions, cancels, unparks, retries and messages: idle workers' recovery goes on at once.
DECIDED_CHANNEL = "saga_runtime_decided"


def unasked(owner: str, table: str = "") -> str:
    """Return the SQL condition an owner-conditional write adds: no cancel request its owner has not taken in.

    `owner` is the expression of the expected owner (a placeholder, or a column of the values written).
    """
    return f"({table}cancel_request IS NULL OR {table}cancel_seen = {owner})"


def _schema_v1(dialect: Flavour) -> list[str]:
    t = dialect.types
    table_suffix = dialect.table_suffix
    return [
        f"""CREATE TABLE sagas (
            saga_id {t["id"]} NOT NULL PRIMARY KEY,
            kind {t["short"]} NOT NULL,
            plan {t["json"]},
            plan_hash {t["short"]},
            status {t["short"]} NOT NULL,
            owner {t["short"]},
            lease_expires_at {t["time"]},
            budget {t["json"]},
            cost {t["float"]} NOT NULL DEFAULT 0,
            tokens {t["bigint"]} NOT NULL DEFAULT 0,
            metadata {t["json"]} NOT NULL,
            error {t["text"]},
            created_at {t["time"]} NOT NULL,
            updated_at {t["time"]} NOT NULL,
            finished_at {t["time"]}
        ){table_suffix}""",
        f"""CREATE TABLE steps (
            saga_id {t["id"]} NOT NULL,
            seq {t["int"]} NOT NULL,
            step_id {t["id"]} NOT NULL,
            grp {t["int"]} NOT NULL,
            tool_name {t["text"]} NOT NULL,
            args {t["json"]},
            idempotency_key {t["id"]} NOT NULL,
            status {t["short"]} NOT NULL,
            attempts {t["int"]} NOT NULL DEFAULT 0,
            result {t["json"]},
            error {t["text"]},
            error_type {t["text"]},
            started_at {t["time"]},
            finished_at {t["time"]},
            compensated_at {t["time"]},
            compensation_error {t["text"]},
            compensation_attempts {t["int"]} NOT NULL DEFAULT 0,
            prev_hash {t["short"]},
            hash {t["short"]},
            PRIMARY KEY (saga_id, step_id),
            CONSTRAINT steps_idempotency_key UNIQUE (idempotency_key)
        ){table_suffix}""",
        # Recovery looks for live sagas whose lease ran out; list_sagas reads newest first.
        "CREATE INDEX sagas_status_lease ON sagas (status, lease_expires_at)",
        "CREATE INDEX sagas_created ON sagas (created_at, saga_id)",
    ]


def _schema_v2(dialect: Flavour) -> list[str]:
    # Recovery counts its claims of a saga, and parks one that failed too often, keeping the status it left.
    # One ALTER where the dialect allows it: MySQL's DDL commits on its own, so one statement is all or nothing.
    # `parked_from` holds a status name, as `status` does (the same type, so every status fits).
    t = dialect.types
    columns = [f"ADD COLUMN recovery_attempts {t['int']} NOT NULL DEFAULT 0", f"ADD COLUMN parked_from {t['short']}"]
    return dialect.alter("sagas", columns)


def _schema_v3(dialect: Flavour) -> list[str]:
    # Saga rows are sealed (a `seal` column), and JSON is stored as text: PostgreSQL's JSONB and MySQL's JSON
    # rewrite numbers (1e16 comes back an int, -0.0 as 0, 1e23 as another float), which broke the seals of records
    # nobody touched. MariaDB's JSON is text already; the change makes its columns plain LONGTEXT like MySQL's.
    # Existing JSON keeps its value (a JSONB document becomes its text); its saga rows stay unsealed (legacy).
    # Each dialect's flavour names which of the three below is its own.
    return dialect.json_as_text(dialect.types)


def json_text_already(t: Mapping[str, str]) -> list[str]:
    """Migration 3 where JSON is TEXT already: the seal column only."""
    return [f"ALTER TABLE sagas ADD COLUMN seal {t['short']}"]


def json_columns_retyped(t: Mapping[str, str]) -> list[str]:
    """Migration 3 where DDL is transactional and a column's type changes with a cast (JSONB to its text)."""
    text = "TEXT"
    sagas = [f"ALTER COLUMN {c} TYPE {text} USING {c}::text" for c in ("plan", "budget", "metadata")]
    steps = [f"ALTER COLUMN {c} TYPE {text} USING {c}::text" for c in ("args", "result")]
    # PostgreSQL's DDL is transactional: the migration is all or nothing.
    return [
        "ALTER TABLE sagas " + ", ".join([f"ADD COLUMN seal {t['short']}", *sagas]),
        "ALTER TABLE steps " + ", ".join(steps),
    ]


def json_columns_modified(t: Mapping[str, str]) -> list[str]:
    """Migration 3 where DDL commits statement by statement (MySQL): the steps' change comes first, as it can run
    twice harmlessly (should the second statement fail, the next open runs both again)."""
    text = t["text"]
    return [
        "ALTER TABLE steps " + ", ".join(f"MODIFY {c} {text}" for c in ("args", "result")),
        "ALTER TABLE sagas "
        + ", ".join(
            [
                f"ADD COLUMN seal {t['short']}",
                f"MODIFY plan {text}",
                f"MODIFY budget {text}",
                f"MODIFY metadata {text} NOT NULL",
            ]
        ),
    ]


def _schema_approvals(dialect: Flavour) -> list[str]:
    # Approval requests live in a table of their own (a step may wait for a person's decision): one row per
    # request, its decision written once by a conditional UPDATE (`decision IS NULL`), sealed like a step row.
    t = dialect.types
    table_suffix = dialect.table_suffix
    return [
        f"""CREATE TABLE approvals (
            saga_id {t["id"]} NOT NULL,
            step_id {t["id"]} NOT NULL,
            seq {t["int"]} NOT NULL,
            tool_name {t["text"]} NOT NULL,
            args {t["json"]},
            args_digest {t["short"]} NOT NULL,
            requested_at {t["time"]} NOT NULL,
            deadline {t["time"]},
            decision {t["short"]},
            decided_by {t["text"]},
            decided_at {t["time"]},
            note {t["text"]},
            prev_hash {t["short"]},
            hash {t["short"]},
            PRIMARY KEY (saga_id, step_id)
        ){table_suffix}""",
        # The pending requests, oldest first (the inbox, and recovery's deadline scan).
        "CREATE INDEX approvals_requested ON approvals (requested_at)",
    ]


def _schema_queues(dialect: Flavour) -> list[str]:
    # Sagas submitted to a queue: its name (NULL: not queued, or a submit that stopped half-way), the key its
    # key_concurrency counts, the priority (lower first), the earliest start, when a worker started it (the rate
    # windows), and an operator's request to cancel it (its reason). No save writes them: the queue is set once,
    # at submit, the start at its claim. `queue_locks` holds one row per queue, locked by a claim counting limits.
    t = dialect.types
    table_suffix = dialect.table_suffix
    columns = [
        f"ADD COLUMN queue {t['short']}",
        f"ADD COLUMN queue_key {t['short']}",
        f"ADD COLUMN priority {t['int']} NOT NULL DEFAULT 0",
        f"ADD COLUMN not_before {t['time']}",
        f"ADD COLUMN started_at {t['time']}",
        f"ADD COLUMN cancel_request {t['text']}",
    ]
    alter = dialect.alter("sagas", columns)
    return [
        *alter,
        "CREATE INDEX sagas_queue ON sagas (queue, status, priority, created_at)",
        f"CREATE TABLE queue_locks (name {t['short']} NOT NULL PRIMARY KEY){table_suffix}",
    ]


def _schema_tool_versions(dialect: Flavour) -> list[str]:
    # Each step records the version of its tool, and whether `reconcile` settled its unknown outcome.
    t = dialect.types
    columns = [
        f"ADD COLUMN tool_version {t['short']} NOT NULL DEFAULT '1'",
        f"ADD COLUMN reconciled {t['int']} NOT NULL DEFAULT 0",
    ]
    return dialect.alter("steps", columns)


def _schema_retention(dialect: Flavour) -> list[str]:
    # Retention (API.md §14): a purged saga's row stays as a tombstone (`purged_at` set), so its id never runs
    # again; holds live beside the record. The index gives a purge the oldest finished sagas in order, without a
    # sort of them all per batch (the statuses are filtered on the way).
    t = dialect.types
    table_suffix = dialect.table_suffix
    return [
        f"ALTER TABLE sagas ADD COLUMN purged_at {t['time']}",
        # Without partial indexes (MySQL/MariaDB), `purged_at IS NULL` is a lookup on its first column.
        "CREATE INDEX sagas_retention ON sagas (finished_at, saga_id) WHERE purged_at IS NULL"
        if dialect.partial_indexes
        else "CREATE INDEX sagas_retention ON sagas (purged_at, finished_at, saga_id)",
        f"""CREATE TABLE holds (
            saga_id {t["id"]} NOT NULL PRIMARY KEY,
            reason {t["text"]} NOT NULL,
            held_at {t["time"]} NOT NULL
        ){table_suffix}""",
    ]


def _schema_history(dialect: Flavour) -> list[str]:
    # A saga's takeovers and its cancel, JSON text written with the (sealed) saga row.
    return [f"ALTER TABLE sagas ADD COLUMN history {dialect.types['text']}"]


def _schema_schedules(dialect: Flavour) -> list[str]:
    # Schedules (API.md §18): a worker submits the due tick's saga, then moves `next_tick` on with one conditional
    # update; the index gives the due ones, earliest first. `plan` and `args` are JSON text, as the sagas' columns.
    t = dialect.types
    table_suffix = dialect.table_suffix
    return [
        f"""CREATE TABLE schedules (
            name {t["id"]} NOT NULL PRIMARY KEY,
            plan {t["text"]},
            fn_name {t["short"]},
            args {t["text"]},
            cron {t["short"]},
            every_seconds {t["float"]},
            tz {t["short"]} NOT NULL,
            queue {t["short"]} NOT NULL,
            next_tick {t["time"]} NOT NULL,
            last_tick {t["time"]},
            paused {t["int"]} NOT NULL DEFAULT 0
        ){table_suffix}""",
        "CREATE INDEX schedules_due ON schedules (paused, next_tick)",
    ]


def _schema_cancel_seen(dialect: Flavour) -> list[str]:
    # Which owner took in the saga's cancel request. An owner-conditional write is refused while a request is
    # stored that its owner has not taken in: the owner learns of a cancel at its next write, before any tool.
    return [f"ALTER TABLE sagas ADD COLUMN cancel_seen {dialect.types['short']}"]


def _schema_queue_control(dialect: Flavour) -> list[str]:
    # An operator's pause or drain of a queue (no row, or "active": it runs), and the limits the last worker
    # serving it was given (so `saga-runtime queues` can show them). A rate window counts a queue's recent starts
    # on (queue, started_at), so a claim's cost stays that of the window as the queue's history grows.
    t = dialect.types
    table_suffix = dialect.table_suffix
    return [
        f"""CREATE TABLE queue_states (
            name {t["short"]} NOT NULL PRIMARY KEY,
            state {t["short"]} NOT NULL,
            changed_at {t["time"]},
            concurrency {t["int"]},
            key_concurrency {t["int"]},
            rate_limit {t["int"]},
            rate_per {t["float"]},
            limits_at {t["time"]}
        ){table_suffix}""",
        "CREATE INDEX sagas_queue_started ON sagas (queue, started_at)",
    ]


def _schema_waiting(dialect: Flavour) -> list[str]:
    # Why a saga nobody drives does not move, as the last worker that looked noted it (JSON text; not sealed).
    return [f"ALTER TABLE sagas ADD COLUMN waiting_for {dialect.types['text']}"]


def _schema_children(dialect: Flavour) -> list[str]:
    # A child saga's parent (`saga.child()`, API.md §18): set once, at its creation; the parent drives it.
    return [f"ALTER TABLE sagas ADD COLUMN parent_id {dialect.types['id']}"]


def _schema_wake_at(dialect: Flavour) -> list[str]:
    # When a WAITING saga is due to be looked at (its sleep's end, its recv's deadline; a message, a decision or a
    # cancel: at once), indexed with its status: an idle worker asks only for the sagas due now. Sagas waiting
    # already are due at once (a worker looks at each once, and writes its real wake time).
    return [
        f"ALTER TABLE sagas ADD COLUMN wake_at {dialect.types['time']}",
        "CREATE INDEX sagas_wake ON sagas (status, wake_at)",
        "UPDATE sagas SET wake_at = updated_at WHERE status = 'WAITING'",
    ]


def _schema_messages(dialect: Flavour) -> list[str]:
    # Messages sent to saga functions (API.md §18): one row each, its id the sender's idempotency key (or a random
    # one), so a key used again stores nothing. A saga receives one by recording its id in its (sealed) history.
    t = dialect.types
    table_suffix = dialect.table_suffix
    return [
        f"""CREATE TABLE messages (
            saga_id {t["id"]} NOT NULL,
            message_id {t["short"]} NOT NULL,
            topic {t["text"]} NOT NULL,
            body {t["text"]} NOT NULL,
            sent_at {t["time"]} NOT NULL,
            PRIMARY KEY (saga_id, message_id)
        ){table_suffix}""",
        "CREATE INDEX messages_sent ON messages (saga_id, sent_at)",
    ]


def _schema_end_reason(dialect: Flavour) -> list[str]:
    # How a saga ended (`SagaResult.end_reason` as a list shows it: the history's last "end" entry, else "failed" or
    # "cancelled"), written with the row, so `list --reason` is a query on its index, not a read of the history.
    # Rows written before are filled in from their history (its compact JSON: `{"kind":"end","reason":...`).
    terminal = "status IN ('COMPENSATED', 'COMPENSATION_FAILED')"
    fill = "UPDATE sagas SET end_reason = '{reason}' WHERE end_reason IS NULL AND {terminal} AND {where}"
    ended = 'history LIKE \'%"kind":"end","reason":"{reason}"%\''
    return [
        f"ALTER TABLE sagas ADD COLUMN end_reason {dialect.types['short']}",
        "CREATE INDEX sagas_end_reason ON sagas (end_reason, created_at, saga_id)",
        *(fill.format(reason=reason, terminal=terminal, where=ended.format(reason=reason)) for reason in END_REASONS),
        fill.format(reason="cancelled", terminal=terminal, where='history LIKE \'%"kind":"cancel"%\''),
        fill.format(reason="failed", terminal=terminal, where="1 = 1"),
    ]


def _schema_partial_indexes(dialect: Flavour) -> list[str]:
    # Indexes of the sagas table rebuilt to hold only the rows their queries can find: a saga that never queued
    # (queue NULL), never started from a queue (started_at NULL), waits on no clock (wake_at NULL), has no end
    # reason (end_reason NULL: running, or SUCCESS) or has not finished (finished_at NULL) has no entry in the
    # index of that column, so its create and its final write touch fewer index pages. Each query reading one
    # compares the column (`queue = ?`, `queue IN (...)`, `queue IS NOT NULL`, `started_at > ?`, `wake_at <= ?`,
    # `end_reason = ?`, `finished_at < ?`), which implies the predicate on SQLite and PostgreSQL alike: its plan
    # is unchanged (tests pin the plans). MySQL/MariaDB have no partial indexes (a NULL key is stored like any
    # other): nothing changes there.
    if not dialect.partial_indexes:
        return []
    rebuilt = (
        ("sagas_wake", "status, wake_at", "wake_at IS NOT NULL"),
        ("sagas_queue", "queue, status, priority, created_at", "queue IS NOT NULL"),
        ("sagas_queue_started", "queue, started_at", "started_at IS NOT NULL"),
        ("sagas_end_reason", "end_reason, created_at, saga_id", "end_reason IS NOT NULL"),
        # The purge's index: only tombstones were left out so far; now the unfinished sagas are too.
        ("sagas_retention", "finished_at, saga_id", "purged_at IS NULL AND finished_at IS NOT NULL"),
    )
    statements = []
    if dialect.index_renames:
        # Built beside the old ones first (a build lets the table be read), then swapped in at the end: an index's
        # drop keeps every reader out until the commit, only for the drops and renames, not for the builds.
        statements += [f"CREATE INDEX {name}_v17 ON sagas ({cols}) WHERE {where}" for name, cols, where in rebuilt]
        statements += [f"DROP INDEX {name}" for name, _, _ in rebuilt]
        statements += [f"ALTER INDEX {name}_v17 RENAME TO {name}" for name, _, _ in rebuilt]
    else:  # (SQLite: a migration holds the one write lock anyway, and readers go on)
        for name, columns, where in rebuilt:
            statements += [f"DROP INDEX {name}", f"CREATE INDEX {name} ON sagas ({columns}) WHERE {where}"]
    if dialect.steps_fillfactor is not None:  # pages filled from now on keep room for a step's update
        statements.append(f"ALTER TABLE steps SET (fillfactor = {dialect.steps_fillfactor})")
    return statements


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of the schema: the statements that take a database from `version - 1` to `version`."""

    version: int
    description: str
    statements: Callable[[Flavour], Sequence[str]]


# Ordered by version; a store applies, in one go at open, every migration above the database's version.
# Append new versions here; never edit one that has shipped.
MIGRATIONS: list[Migration] = [
    Migration(1, "sagas and steps", _schema_v1),
    Migration(2, "recovery attempts and parked sagas", _schema_v2),
    Migration(3, "sealed saga rows, JSON kept as text", _schema_v3),
    Migration(4, "approval requests", _schema_approvals),
    Migration(5, "queues", _schema_queues),
    Migration(6, "tool versions and reconciled steps", _schema_tool_versions),
    Migration(7, "retention: tombstones and holds", _schema_retention),
    Migration(8, "saga history: takeovers and cancels", _schema_history),
    Migration(9, "messages sent to saga functions", _schema_messages),
    Migration(10, "schedules", _schema_schedules),
    Migration(11, "queue states (pause, drain, limits) and indexes of queue claims", _schema_queue_control),
    Migration(12, "a cancel request taken in by the saga's owner", _schema_cancel_seen),
    Migration(13, "why a saga waits: a worker's note", _schema_waiting),
    Migration(14, "child sagas: a saga's parent", _schema_children),
    Migration(15, "when a waiting saga is due (indexed)", _schema_wake_at),
    Migration(16, "how a saga ended, indexed", _schema_end_reason),
    Migration(
        17,
        "partial indexes (no entry for a saga that never queued, waited, ended or finished); room for step updates",
        _schema_partial_indexes,
    ),
]
#: The version from which saga rows carry a seal (one written before, untouched since, has none).
SEALED_SAGAS_VERSION = 3
SCHEMA_VERSION = MIGRATIONS[-1].version


def version_table_ddl(dialect: Flavour) -> str:
    """Return the CREATE TABLE of the schema's version table."""
    types = dialect.types
    return (
        f"CREATE TABLE schema_version (version {types['int']} NOT NULL PRIMARY KEY, "
        f"description {types['short']} NOT NULL, applied_at {types['time']} NOT NULL){dialect.table_suffix}"
    )


def schema_too_new(found: int, supported: int, url: str) -> StoreError:
    """Return the error for a database whose schema is newer than this library knows."""
    return SchemaVersionError(
        f"the database at {url} has schema version {found}, newer than this saga-runtime knows "
        f"({supported}): upgrade saga-runtime (pip install -U saga-runtime) to use it",
        url=url,
        found=found,
        supported=supported,
    )


def _placeholders(dialect: Flavour, sql: str) -> str:
    """Return `sql` with its `?` placeholders in the driver's style (`$n` for asyncpg, `%s` for pymysql)."""
    return dialect.placeholders(sql)


def numbered_placeholders(sql: str) -> str:
    """Return `sql` with its `?` placeholders numbered (`$1`, `$2`, ...)."""
    parts = sql.split("?")
    return "".join(part + (f"${i}" if i < len(parts) else "") for i, part in enumerate(parts, 1))


def format_placeholders(sql: str) -> str:
    """Return `sql` with its `?` placeholders as `%s`."""
    return sql.replace("?", "%s")


def insert_ignore_on_conflict(column: str, target: str | None) -> str:
    """Return the clause of an INSERT writing nothing where `target` (or any unique key) is taken."""
    return "ON CONFLICT DO NOTHING" if target is None else f"ON CONFLICT ({target}) DO NOTHING"


def insert_ignore_on_duplicate(column: str, target: str | None) -> str:
    """Return the clause of an INSERT writing nothing where a unique key is taken (`column = column`)."""
    return f"ON DUPLICATE KEY UPDATE {column} = {column}"


def upsert_on_conflict(target: str, columns: Sequence[str]) -> str:
    """Return the clause of an INSERT rewriting `columns` of the row whose `target` is taken."""
    return f"ON CONFLICT ({target}) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in columns)


def upsert_on_duplicate(target: str, columns: Sequence[str]) -> str:
    """Return the clause of an INSERT rewriting `columns` of the row whose unique key is taken."""
    return "ON DUPLICATE KEY UPDATE " + ", ".join(f"{c} = VALUES({c})" for c in columns)


def _queue_waiting(dialect: Flavour, *, keyed: bool, after: bool) -> str:
    """Return the scan of a queue's QUEUED sagas due by the claim's clock, in start order.

    Params: queue, QUEUED, now; with `keyed`, queue, the live statuses and key_concurrency (keys at their limit,
    counted with the claim's own starts, are left out in the database, so sagas of a free key behind any number of
    blocked ones are found); with `after`, the last row looked at (priority twice, created_at twice, saga_id: the
    page goes on past it); then the page's size. Returns saga_id, queue_key, priority, created_at.
    """
    sql = (
        "SELECT saga_id, queue_key, priority, created_at FROM sagas WHERE queue = ? AND status = ? "
        "AND (not_before IS NULL OR not_before <= ?)"
    )
    if keyed:
        sql += (
            " AND (queue_key IS NULL OR queue_key NOT IN (SELECT queue_key FROM sagas WHERE queue = ? "
            "AND status IN (?, ?) AND queue_key IS NOT NULL GROUP BY queue_key HAVING COUNT(*) >= ?))"
        )
    if after:
        sql += " AND (priority > ? OR (priority = ? AND (created_at > ? OR (created_at = ? AND saga_id > ?))))"
    sql += " ORDER BY priority, created_at, saga_id LIMIT ?"
    # PostgreSQL locks only the rows it returns and skips those another claimer holds. MySQL/MariaDB's locking
    # scans lock rows they then pass over (a recovery scan of the same table), so skipping there would start
    # sagas out of order: it waits for such a row a moment, and re-reads it (no longer QUEUED if taken).
    return sql + dialect.lock_queue_scan


class Queries:
    """The SQL text of one dialect, built once per store so the hot path only sends it."""

    def __init__(self, dialect: Flavour) -> None:
        self.dialect = dialect
        sagas = ", ".join(SAGA_COLUMNS)
        # The lease column (RowCodec.saga_params gives what is left of it) is written on the database's clock.
        lease, clock = dialect.lease_sql, dialect.now_sql
        saga_marks = ", ".join(lease if c == "lease_expires_at" else "?" for c in SAGA_COLUMNS)
        saga_sets = ", ".join(f"{c} = {lease if c == 'lease_expires_at' else '?'}" for c in SAGA_COLUMNS[1:])
        saga_upsert = dialect.upsert("saga_id", SAGA_COLUMNS[1:])
        # MySQL: affected rows is 1 when inserted, 0 when the id was taken (the client never sets FOUND_ROWS).
        insert_if_absent = dialect.insert_ignore("saga_id", "saga_id")
        # After waiting on a concurrent insert of the same id, read the committed row, not the snapshot (MySQL).
        self.lock_suffix = dialect.lock_reread
        q = _placeholders
        self.insert_saga = q(dialect, f"INSERT INTO sagas ({sagas}) VALUES ({saga_marks}) {insert_if_absent}")
        self.upsert_saga = q(dialect, f"INSERT INTO sagas ({sagas}) VALUES ({saga_marks}) {saga_upsert}")
        saga_cols = ", ".join(f"s.{c}" for c in SAGA_COLUMNS)
        step_cols = ", ".join(f"st.{c}" for c in STEP_COLUMNS)
        # One statement reads a saga and its steps: one round trip, one consistent snapshot on every database.
        self.load = q(
            dialect,
            f"SELECT {saga_cols}, {step_cols} FROM sagas s LEFT JOIN steps st ON st.saga_id = s.saga_id "
            "WHERE s.saga_id = ? ORDER BY st.seq",
        )
        count = "(SELECT COUNT(*) FROM steps st WHERE st.saga_id = s.saga_id)"
        order = "ORDER BY s.created_at DESC, s.saga_id DESC LIMIT ? OFFSET ?"
        self.list_all = q(dialect, f"SELECT {saga_cols}, {count} FROM sagas s {order}")
        self.list_status = q(dialect, f"SELECT {saga_cols}, {count} FROM sagas s WHERE s.status = ? {order}")
        owned = f"SELECT {saga_cols}, {count} FROM sagas s WHERE s.owner = ?"
        self._list_owned = (q(dialect, f"{owned} {order}"), q(dialect, f"{owned} AND s.status = ? {order}"))
        # On the (end_reason, created_at, saga_id) index: the page of one end reason, however long the history.
        ended = f"SELECT {saga_cols}, {count} FROM sagas s WHERE s.end_reason = ?"
        self._list_reason = (q(dialect, f"{ended} {order}"), q(dialect, f"{ended} AND s.status = ? {order}"))
        self.read_version = "SELECT MAX(version) FROM schema_version"
        self.table_exists = q(
            dialect,
            dialect.table_exists,
        )
        self.record_version = q(
            dialect, "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)"
        )
        # -- leases (DESIGN.md invariant 5); the live statuses are parameters too, LIVE_STATUSES in order --------
        self._saga_cols = saga_cols
        self._step_cols = step_cols
        live = "status IN (?, ?)"
        # One conditional UPDATE: the database decides, row-locked, whether the saga is free for `owner`.
        self.claim = q(
            dialect,
            f"UPDATE sagas SET owner = ?, lease_expires_at = {lease}, cancel_seen = NULL WHERE saga_id = ? AND {live} "
            f"AND (owner IS NULL OR owner = ? OR lease_expires_at IS NULL OR lease_expires_at < {clock})",
        )
        # MySQL counts changed rows, not matched ones (aiomysql never sets CLIENT_FOUND_ROWS): a claim that
        # rewrote its own lease with the same values reports 0, so a 0 is checked with this.
        self.owns = q(dialect, f"SELECT COUNT(*) FROM sagas WHERE saga_id = ? AND owner = ? AND {live}")
        # A saga row read under a lock for the rest of the transaction (SQLite: BEGIN IMMEDIATE locks it all), then
        # rewritten whole where its status is still the one read: the conditional changes of operators
        # (retry_compensation's reopening, unpark), which re-seal the row.
        self.lock_saga = q(
            dialect,
            f"SELECT {sagas} FROM sagas WHERE saga_id = ?" + dialect.lock_row,
        )
        self.rewrite_saga = q(
            dialect,
            f"UPDATE sagas SET {saga_sets} WHERE saga_id = ? AND status = ?",
        )
        # A started saga given back to its queue: no longer counted in the rate window.
        self.unstart = q(dialect, "UPDATE sagas SET started_at = NULL WHERE saga_id = ? AND started_at IS NOT NULL")
        self.sealed_since = q(dialect, "SELECT applied_at FROM schema_version WHERE version = ?")
        # Recovery's scan, on the (status, lease_expires_at) index. PostgreSQL and MySQL/MariaDB lock the rows
        # they return and skip those another claimer holds; SQLite's BEGIN IMMEDIATE already excludes writers.
        self.expired = q(
            dialect,
            f"SELECT saga_id FROM sagas WHERE {live} AND (lease_expires_at IS NULL OR lease_expires_at < {clock}) "
            "ORDER BY created_at, saga_id LIMIT ?" + dialect.lock_skip,
        )
        # -- queues: set once at submit; a claim counts the queue's limits under its lock row, then starts sagas --
        enqueue = (
            "UPDATE sagas SET queue = ?, queue_key = ?, priority = ?, not_before = ? "
            "WHERE saga_id = ? AND status = ? AND queue IS NULL"
        )
        if dialect.notices is not None:
            # Idle workers LISTEN: the notification goes out when this statement commits.
            enqueue = dialect.notices.enqueued(enqueue)
        self.enqueue = q(dialect, enqueue)
        self.queue_lock_insert = q(
            dialect,
            f"INSERT INTO queue_locks (name) VALUES (?) {dialect.insert_ignore('name', 'name')}",
        )
        self.queue_lock = q(dialect, "SELECT name FROM queue_locks WHERE name = ?" + dialect.lock_row)
        self.queue_running = q(
            dialect, f"SELECT queue_key, COUNT(*) FROM sagas WHERE queue = ? AND {live} GROUP BY queue_key"
        )
        self.queue_depth = q(dialect, "SELECT COUNT(*) FROM sagas WHERE queue = ? AND status = ?")
        # The starts in a rate window, counted up to the limit (no more is needed) newest first on the
        # (queue, started_at) index: its cost is the window's, never the queue's history (a plan cached for any
        # window still walks the index, stopping at the limit).
        self.queue_started = q(
            dialect,
            "SELECT COUNT(*) FROM (SELECT 1 FROM sagas WHERE queue = ? AND started_at > ? "
            "ORDER BY started_at DESC LIMIT ?) recent",
        )
        # A claim's "now" (rate windows, `not_before`, the start it stamps): the database's clock, read once the
        # queue's lock is held, so every worker counts on one clock. SQLite: the one machine's, a parameter.
        self.queue_clock = dialect.clock_sql
        self._queue_waiting = {
            (keyed, after): q(dialect, _queue_waiting(dialect, keyed=keyed, after=after))
            for keyed in (False, True)
            for after in (False, True)
        }
        self.queue_start = q(
            dialect,
            f"UPDATE sagas SET {saga_sets}, started_at = ? WHERE saga_id = ? AND status = ?",
        )
        # A cancel request on a live or waiting saga, recorded once; its owner reads it at its lease renewals.
        self.request_cancel = q(
            dialect,
            "UPDATE sagas SET cancel_request = ? WHERE saga_id = ? AND status IN (?, ?, ?) AND cancel_request IS NULL",
        )
        self.cancel_request = q(dialect, "SELECT cancel_request FROM sagas WHERE saga_id = ?")
        # A message, a decision or a cancel makes a WAITING saga due (params: when, saga_id, WAITING).
        self.wake = q(dialect, "UPDATE sagas SET wake_at = ? WHERE saga_id = ? AND status = ?")
        self.note_waiting = q(
            dialect,
            "UPDATE sagas SET waiting_for = ? WHERE saga_id = ? AND owner IS NULL AND status IN (?, ?, ?, ?)",
        )
        self.waiting_noted = q(dialect, "SELECT COUNT(*) FROM sagas WHERE saga_id = ? AND waiting_for = ?")
        self.cancel_asked = q(dialect, "SELECT COUNT(*) FROM sagas WHERE saga_id = ? AND cancel_request = ?")
        # The owner takes a request in: its writes pass again (see UNASKED); a new owner must take it in anew.
        self.take_cancel = q(
            dialect,
            "UPDATE sagas SET cancel_seen = ? WHERE saga_id = ? AND owner = ? AND cancel_request IS NOT NULL",
        )
        self.cancel_taken = q(
            dialect, "SELECT cancel_request FROM sagas WHERE saga_id = ? AND owner = ? AND cancel_seen = ?"
        )
        # PostgreSQL returns the renewed ids with the UPDATE; the others read them back in the same transaction.
        self.renew_returns = dialect.returning
        self._lease = lease

    def queue_waiting(self, *, keyed: bool, after: bool) -> str:
        """Return the scan of a queue's startable sagas, in start order (see `_queue_waiting` for its params)."""
        return self._queue_waiting[keyed, after]

    def _in(self, sql: str, count: int) -> str:
        return in_list(self.dialect, sql, count)

    def ids(self, ids: Sequence[str]) -> tuple[Any, ...]:
        """Return the parameters of the `IN (*)` list of `renew`, `owned`, `take` and `load_many`."""
        return ids_param(self.dialect, ids)

    def renew(self, count: int) -> str:
        """Return the UPDATE extending `owner`'s leases on `count` ids (params: lease, owner, live..., ids...)."""
        # The rows locked in saga_id order, as a batch of writes locks them: in the order of the plan's index walk
        # (the owner's or the (status, lease) one), two statements locking the same sagas could deadlock.
        held = "owner = ? AND status IN (?, ?) AND saga_id IN (*)"
        if self.renew_returns:
            # PostgreSQL: locked by a subquery, sorted then locked row by row (it re-checks each locked row's
            # condition on its newest version), then updated.
            sql = (
                f"UPDATE sagas SET lease_expires_at = {self._lease} FROM (SELECT saga_id FROM sagas WHERE {held} "
                f"ORDER BY saga_id{self.dialect.lock_row}) AS locked WHERE sagas.saga_id = locked.saga_id "
                "RETURNING sagas.saga_id"
            )
        else:
            sql = f"UPDATE sagas{self.dialect.by_key} SET lease_expires_at = {self._lease} WHERE {held}"
        return self._in(sql, count)

    def owned(self, count: int) -> str:
        """Return the query of which of `count` ids `owner` holds (params: owner, live..., ids...)."""
        return self._in("SELECT saga_id FROM sagas WHERE owner = ? AND status IN (?, ?) AND saga_id IN (*)", count)

    def take(self, count: int) -> str:
        """Return the UPDATE giving `count` sagas to an owner (params: owner, lease, ids...)."""
        return self._in(
            f"UPDATE sagas SET owner = ?, lease_expires_at = {self._lease}, cancel_seen = NULL WHERE saga_id IN (*)",
            count,
        )

    def list_reason(self, by_status: bool) -> str:
        """Return the list of the sagas that ended for one reason (params: reason, [status,] limit, offset)."""
        return self._list_reason[by_status]

    def list_owned(self, by_status: bool) -> str:
        """Return the list of the sagas an owner holds (params: owner, [status,] limit, offset)."""
        return self._list_owned[by_status]

    def load_many(self, count: int) -> str:
        """Return the read of `count` sagas and their steps, sagas in created order, steps by seq."""
        return self._in(
            f"SELECT {self._saga_cols}, {self._step_cols} FROM sagas s LEFT JOIN steps st ON st.saga_id = s.saga_id "
            "WHERE s.saga_id IN (*) ORDER BY s.created_at, s.saga_id, st.seq",
            count,
        )


def in_list(dialect: Flavour, sql: str, count: int) -> str:
    """Return `sql` with its ` IN (*)` a list of `count` ids: one array parameter where the flavour has `id_array`,
    else one placeholder per id (`ids_param` gives its parameters)."""
    if dialect.id_array is not None:
        return _placeholders(dialect, sql.replace(" IN (*)", dialect.id_array))
    return _placeholders(dialect, sql.replace(" IN (*)", " IN (" + ", ".join("?" * count) + ")"))


def ids_param(dialect: Flavour, ids: Sequence[str]) -> tuple[Any, ...]:
    """Return the parameters of an `in_list` of `ids`."""
    return (list(ids),) if dialect.id_array is not None else tuple(ids)


# The statuses of a live saga (one a lease is held on), in the order the lease queries take them. PARKED is not
# live: no lease query (claim_saga, renew_leases, claim_expired) ever touches a parked saga.
LIVE_STATUSES = (SagaStatus.RUNNING.value, SagaStatus.COMPENSATING.value)
