"""What every SQL store shares: the schema per dialect, its migrations and the SQL text (rows <-> values: _codec).

The schema (DESIGN.md) has one shape on every database; only column types differ. Values reach SQL as parameters
only: tool names, step ids, args and results never become SQL text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from saga_runtime._exceptions import SchemaVersionError, StoreError
from saga_runtime._records import SagaStatus
from saga_runtime._storage._codec import LEASE_SQL, NOW_SQL, SAGA_COLUMNS, STEP_COLUMNS, DialectName, RowCodec

__all__ = [
    "LIVE_STATUSES",
    "MIGRATIONS",
    "QUEUED_CHANNEL",
    "SAGA_COLUMNS",
    "SCHEMA_VERSION",
    "SEALED_SAGAS_VERSION",
    "STEP_COLUMNS",
    "DialectName",
    "Migration",
    "Queries",
    "RowCodec",
    "schema_too_new",
]

# The PostgreSQL channel a submit notifies (its payload the queue's name), so idle workers start it at once.
QUEUED_CHANNEL = "saga_runtime_queued"

# Column types per dialect. Ids are exact, case- and space-sensitive everywhere: "C" collation on PostgreSQL,
# bytes on MySQL (its string collations ignore case or trailing spaces), SQLite's default BINARY collation.
_TYPES: dict[DialectName, dict[str, str]] = {
    "sqlite": {
        "id": "TEXT",
        "short": "TEXT",
        "text": "TEXT",
        "json": "TEXT",
        "time": "TEXT",
        "int": "INTEGER",
        "bigint": "INTEGER",
        "float": "REAL",
    },
    "postgresql": {
        "id": 'TEXT COLLATE "C"',
        "short": "TEXT",
        "text": "TEXT",
        "json": "JSONB",
        "time": "TIMESTAMPTZ",
        "int": "INTEGER",
        "bigint": "BIGINT",
        "float": "DOUBLE PRECISION",
    },
    "mysql": {
        "id": "VARBINARY(512)",
        "short": "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "text": "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "json": "JSON",
        "time": "DATETIME(6)",
        "int": "INTEGER",
        "bigint": "BIGINT",
        "float": "DOUBLE",
    },
}


def _schema_v1(dialect: DialectName) -> list[str]:
    t = _TYPES[dialect]
    table_suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if dialect == "mysql" else ""
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


def _schema_v2(dialect: DialectName) -> list[str]:
    # Recovery counts its claims of a saga, and parks one that failed too often, keeping the status it left.
    # One ALTER where the dialect allows it: MySQL's DDL commits on its own, so one statement is all or nothing.
    # `parked_from` holds a status name, as `status` does (the same type, so every status fits).
    t = _TYPES[dialect]
    columns = [f"ADD COLUMN recovery_attempts {t['int']} NOT NULL DEFAULT 0", f"ADD COLUMN parked_from {t['short']}"]
    if dialect == "sqlite":  # one column per ALTER TABLE; its DDL is transactional anyway
        return [f"ALTER TABLE sagas {column}" for column in columns]
    return ["ALTER TABLE sagas " + ", ".join(columns)]


def _schema_v3(dialect: DialectName) -> list[str]:
    # Saga rows are sealed (a `seal` column), and JSON is stored as text: PostgreSQL's JSONB and MySQL's JSON
    # rewrite numbers (1e16 comes back an int, -0.0 as 0, 1e23 as another float), which broke the seals of records
    # nobody touched. MariaDB's JSON is text already; the change makes its columns plain LONGTEXT like MySQL's.
    # Existing JSON keeps its value (a JSONB document becomes its text); its saga rows stay unsealed (legacy).
    t = _TYPES[dialect]
    if dialect == "sqlite":  # JSON is TEXT already
        return [f"ALTER TABLE sagas ADD COLUMN seal {t['short']}"]
    if dialect == "postgresql":
        text = "TEXT"
        sagas = [f"ALTER COLUMN {c} TYPE {text} USING {c}::text" for c in ("plan", "budget", "metadata")]
        steps = [f"ALTER COLUMN {c} TYPE {text} USING {c}::text" for c in ("args", "result")]
        # PostgreSQL's DDL is transactional: the migration is all or nothing.
        return [
            "ALTER TABLE sagas " + ", ".join([f"ADD COLUMN seal {t['short']}", *sagas]),
            "ALTER TABLE steps " + ", ".join(steps),
        ]
    # MySQL's DDL commits statement by statement: the steps' change comes first, as it can run twice harmlessly
    # (should the second statement fail, the next open runs both again).
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


def _schema_approvals(dialect: DialectName) -> list[str]:
    # Approval requests live in a table of their own (a step may wait for a person's decision): one row per
    # request, its decision written once by a conditional UPDATE (`decision IS NULL`), sealed like a step row.
    t = _TYPES[dialect]
    table_suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if dialect == "mysql" else ""
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


def _schema_queues(dialect: DialectName) -> list[str]:
    # Sagas submitted to a queue: its name (NULL: not queued, or a submit that stopped half-way), the key its
    # key_concurrency counts, the priority (lower first), the earliest start, when a worker started it (the rate
    # windows), and an operator's request to cancel it (its reason). No save writes them: the queue is set once,
    # at submit, the start at its claim. `queue_locks` holds one row per queue, locked by a claim counting limits.
    t = _TYPES[dialect]
    table_suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if dialect == "mysql" else ""
    columns = [
        f"ADD COLUMN queue {t['short']}",
        f"ADD COLUMN queue_key {t['short']}",
        f"ADD COLUMN priority {t['int']} NOT NULL DEFAULT 0",
        f"ADD COLUMN not_before {t['time']}",
        f"ADD COLUMN started_at {t['time']}",
        f"ADD COLUMN cancel_request {t['text']}",
    ]
    alter = (
        [f"ALTER TABLE sagas {column}" for column in columns]
        if dialect == "sqlite"
        else ["ALTER TABLE sagas " + ", ".join(columns)]
    )
    return [
        *alter,
        "CREATE INDEX sagas_queue ON sagas (queue, status, priority, created_at)",
        f"CREATE TABLE queue_locks (name {t['short']} NOT NULL PRIMARY KEY){table_suffix}",
    ]


def _schema_tool_versions(dialect: DialectName) -> list[str]:
    # Each step records the version of its tool, and whether `reconcile` settled its unknown outcome.
    t = _TYPES[dialect]
    columns = [
        f"ADD COLUMN tool_version {t['short']} NOT NULL DEFAULT '1'",
        f"ADD COLUMN reconciled {t['int']} NOT NULL DEFAULT 0",
    ]
    if dialect == "sqlite":
        return [f"ALTER TABLE steps {column}" for column in columns]
    return ["ALTER TABLE steps " + ", ".join(columns)]


def _schema_retention(dialect: DialectName) -> list[str]:
    # Retention (API.md §14): a purged saga's row stays as a tombstone (`purged_at` set), so its id never runs
    # again; holds live beside the record. The index gives a purge the oldest finished sagas in order, without a
    # sort of them all per batch (the statuses are filtered on the way).
    t = _TYPES[dialect]
    table_suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if dialect == "mysql" else ""
    return [
        f"ALTER TABLE sagas ADD COLUMN purged_at {t['time']}",
        # MySQL/MariaDB have no partial index; `purged_at IS NULL` is a lookup on its first column there.
        "CREATE INDEX sagas_retention ON sagas (purged_at, finished_at, saga_id)"
        if dialect == "mysql"
        else "CREATE INDEX sagas_retention ON sagas (finished_at, saga_id) WHERE purged_at IS NULL",
        f"""CREATE TABLE holds (
            saga_id {t["id"]} NOT NULL PRIMARY KEY,
            reason {t["text"]} NOT NULL,
            held_at {t["time"]} NOT NULL
        ){table_suffix}""",
    ]


def _schema_history(dialect: DialectName) -> list[str]:
    # A saga's takeovers and its cancel, JSON text written with the (sealed) saga row.
    return [f"ALTER TABLE sagas ADD COLUMN history {_TYPES[dialect]['text']}"]


def _schema_messages(dialect: DialectName) -> list[str]:
    # Messages sent to saga functions (API.md §18): one row each, its id the sender's idempotency key (or a random
    # one), so a key used again stores nothing. A saga receives one by recording its id in its (sealed) history.
    t = _TYPES[dialect]
    table_suffix = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if dialect == "mysql" else ""
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


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of the schema: the statements that take a database from `version - 1` to `version`."""

    version: int
    description: str
    statements: Callable[[DialectName], Sequence[str]]


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
]
#: The version from which saga rows carry a seal (one written before, untouched since, has none).
SEALED_SAGAS_VERSION = 3
SCHEMA_VERSION = MIGRATIONS[-1].version

VERSION_TABLE_DDL: dict[DialectName, str] = {
    name: (
        f"CREATE TABLE schema_version (version {types['int']} NOT NULL PRIMARY KEY, "
        f"description {types['short']} NOT NULL, applied_at {types['time']} NOT NULL)"
        + (" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4" if name == "mysql" else "")
    )
    for name, types in _TYPES.items()
}


def schema_too_new(found: int, supported: int, url: str) -> StoreError:
    """Return the error for a database whose schema is newer than this library knows."""
    return SchemaVersionError(
        f"the database at {url} has schema version {found}, newer than this saga-runtime knows "
        f"({supported}): upgrade saga-runtime (pip install -U saga-runtime) to use it",
        url=url,
        found=found,
        supported=supported,
    )


def _placeholders(dialect: DialectName, sql: str) -> str:
    """Return `sql` with its `?` placeholders in the driver's style (`$n` for asyncpg, `%s` for pymysql)."""
    if dialect == "sqlite":
        return sql
    if dialect == "mysql":
        return sql.replace("?", "%s")
    parts = sql.split("?")
    return "".join(part + (f"${i}" if i < len(parts) else "") for i, part in enumerate(parts, 1))


class Queries:
    """The SQL text of one dialect, built once per store so the hot path only sends it."""

    def __init__(self, dialect: DialectName) -> None:
        self.dialect = dialect
        sagas = ", ".join(SAGA_COLUMNS)
        # The lease column (RowCodec.saga_params gives what is left of it) is written on the database's clock.
        lease, clock = LEASE_SQL[dialect], NOW_SQL[dialect]
        saga_marks = ", ".join(lease if c == "lease_expires_at" else "?" for c in SAGA_COLUMNS)
        saga_sets = ", ".join(f"{c} = {lease if c == 'lease_expires_at' else '?'}" for c in SAGA_COLUMNS[1:])
        if dialect == "mysql":
            saga_set = ", ".join(f"{c} = VALUES({c})" for c in SAGA_COLUMNS[1:])
            saga_upsert = f"ON DUPLICATE KEY UPDATE {saga_set}"
            # Affected rows is 1 when inserted, 0 when the id was taken (the client never sets FOUND_ROWS).
            insert_if_absent = "ON DUPLICATE KEY UPDATE saga_id = saga_id"
            # After waiting on a concurrent insert of the same id, read the committed row, not the snapshot.
            self.lock_suffix = " FOR UPDATE"
        else:
            saga_set = ", ".join(f"{c} = excluded.{c}" for c in SAGA_COLUMNS[1:])
            saga_upsert = f"ON CONFLICT (saga_id) DO UPDATE SET {saga_set}"
            insert_if_absent = "ON CONFLICT (saga_id) DO NOTHING"
            self.lock_suffix = ""
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
        self.read_version = "SELECT MAX(version) FROM schema_version"
        self.table_exists = q(
            dialect,
            {
                "sqlite": "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
                "postgresql": "SELECT COUNT(*) FROM pg_catalog.pg_tables "
                "WHERE tablename = ? AND schemaname = current_schema()",
                "mysql": "SELECT COUNT(*) FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_name = ?",
            }[dialect],
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
            f"UPDATE sagas SET owner = ?, lease_expires_at = {lease} WHERE saga_id = ? AND {live} "
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
            f"SELECT {sagas} FROM sagas WHERE saga_id = ?" + ("" if dialect == "sqlite" else " FOR UPDATE"),
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
            "ORDER BY created_at, saga_id LIMIT ?" + ("" if dialect == "sqlite" else " FOR UPDATE SKIP LOCKED"),
        )
        # -- queues: set once at submit; a claim counts the queue's limits under its lock row, then starts sagas --
        enqueue = (
            "UPDATE sagas SET queue = ?, queue_key = ?, priority = ?, not_before = ? "
            "WHERE saga_id = ? AND status = ? AND queue IS NULL"
        )
        if dialect == "postgresql":
            # Idle workers LISTEN: the notification goes out when this statement commits.
            enqueue = (
                f"WITH queued AS ({enqueue} RETURNING queue) SELECT pg_notify('{QUEUED_CHANNEL}', queue) FROM queued"
            )
        self.enqueue = q(dialect, enqueue)
        self.queue_lock_insert = q(
            dialect,
            "INSERT INTO queue_locks (name) VALUES (?) ON DUPLICATE KEY UPDATE name = name"
            if dialect == "mysql"
            else "INSERT INTO queue_locks (name) VALUES (?) ON CONFLICT (name) DO NOTHING",
        )
        self.queue_lock = q(
            dialect, "SELECT name FROM queue_locks WHERE name = ?" + ("" if dialect == "sqlite" else " FOR UPDATE")
        )
        self.queue_running = q(
            dialect, f"SELECT queue_key, COUNT(*) FROM sagas WHERE queue = ? AND {live} GROUP BY queue_key"
        )
        self.queue_depth = q(dialect, "SELECT COUNT(*) FROM sagas WHERE queue = ? AND status = ?")
        self.queue_started = q(dialect, "SELECT COUNT(*) FROM sagas WHERE queue = ? AND started_at > ?")
        # PostgreSQL locks only the rows it returns and skips those another claimer holds. MySQL/MariaDB's
        # locking scans lock rows they then pass over (a recovery scan of the same table), so skipping there would
        # start sagas out of order: it waits for such a row a moment, and re-reads it (no longer QUEUED if taken).
        self.queue_waiting = q(
            dialect,
            "SELECT saga_id, queue_key FROM sagas WHERE queue = ? AND status = ? "
            "AND (not_before IS NULL OR not_before <= ?) ORDER BY priority, created_at, saga_id LIMIT ? OFFSET ?"
            + {"sqlite": "", "postgresql": " FOR UPDATE SKIP LOCKED", "mysql": " FOR UPDATE"}[dialect],
        )
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
        self.cancel_asked = q(dialect, "SELECT COUNT(*) FROM sagas WHERE saga_id = ? AND cancel_request = ?")
        # PostgreSQL returns the renewed ids with the UPDATE; the others read them back in the same transaction.
        self.renew_returns = dialect == "postgresql"
        self._lease = lease

    def _in(self, sql: str, count: int) -> str:
        return _placeholders(self.dialect, sql.replace("(*)", "(" + ", ".join("?" * count) + ")"))

    def renew(self, count: int) -> str:
        """Return the UPDATE extending `owner`'s leases on `count` ids (params: lease, owner, live..., ids...)."""
        sql = (
            f"UPDATE sagas SET lease_expires_at = {self._lease} WHERE owner = ? AND status IN (?, ?) AND saga_id IN (*)"
        )
        return self._in(sql + (" RETURNING saga_id" if self.renew_returns else ""), count)

    def owned(self, count: int) -> str:
        """Return the query of which of `count` ids `owner` holds (params: owner, live..., ids...)."""
        return self._in("SELECT saga_id FROM sagas WHERE owner = ? AND status IN (?, ?) AND saga_id IN (*)", count)

    def take(self, count: int) -> str:
        """Return the UPDATE giving `count` sagas to an owner (params: owner, lease, ids...)."""
        return self._in(
            f"UPDATE sagas SET owner = ?, lease_expires_at = {self._lease} WHERE saga_id IN (*)",
            count,
        )

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


# The statuses of a live saga (one a lease is held on), in the order the lease queries take them. PARKED is not
# live: no lease query (claim_saga, renew_leases, claim_expired) ever touches a parked saga.
LIVE_STATUSES = (SagaStatus.RUNNING.value, SagaStatus.COMPENSATING.value)
