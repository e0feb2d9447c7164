"""What every SQL store shares: the schema per dialect, its migrations, the SQL text, and row <-> value conversion.

The schema (DESIGN.md) has one shape on every database; only column types differ. Values reach SQL as parameters
only: tool names, step ids, args and results never become SQL text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from saga_runtime._exceptions import SchemaVersionError, StoreError
from saga_runtime._records import SagaRow, SagaStatus, StepRow, StepStatus

__all__ = [
    "LIVE_STATUSES",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "DialectName",
    "Migration",
    "Queries",
    "RowCodec",
    "schema_too_new",
]

DialectName = Literal["sqlite", "postgresql", "mysql"]

# Column order of each table; the Python attribute of `grp` is StepRow.group.
SAGA_COLUMNS = (
    "saga_id",
    "kind",
    "plan",
    "plan_hash",
    "status",
    "owner",
    "lease_expires_at",
    "budget",
    "cost",
    "tokens",
    "metadata",
    "error",
    "created_at",
    "updated_at",
    "finished_at",
    "recovery_attempts",
    "parked_from",
)
STEP_COLUMNS = (
    "saga_id",
    "seq",
    "step_id",
    "grp",
    "tool_name",
    "args",
    "idempotency_key",
    "status",
    "attempts",
    "result",
    "error",
    "error_type",
    "started_at",
    "finished_at",
    "compensated_at",
    "compensation_error",
    "compensation_attempts",
    "prev_hash",
    "hash",
)

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
]
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
        steps = ", ".join(STEP_COLUMNS)
        saga_marks = ", ".join("?" * len(SAGA_COLUMNS))
        step_marks = ", ".join("?" * len(STEP_COLUMNS))
        if dialect == "mysql":
            saga_set = ", ".join(f"{c} = VALUES({c})" for c in SAGA_COLUMNS[1:])
            # ON DUPLICATE KEY fires on any unique key: a new step whose idempotency key belongs to another
            # step must fail (as it does elsewhere), not overwrite that step. NULL into NOT NULL fails in strict mode;
            # it comes first, as MySQL assigns left to right.
            step_set = ", ".join(
                [
                    "idempotency_key = IF(saga_id = VALUES(saga_id) AND step_id = VALUES(step_id), "
                    "VALUES(idempotency_key), NULL)",
                    *(f"{c} = VALUES({c})" for c in STEP_COLUMNS[3:] if c != "idempotency_key"),
                ]
            )
            saga_upsert = f"ON DUPLICATE KEY UPDATE {saga_set}"
            step_upsert = f"ON DUPLICATE KEY UPDATE {step_set}"
            # Affected rows is 1 when inserted, 0 when the id was taken (the client never sets FOUND_ROWS).
            insert_if_absent = "ON DUPLICATE KEY UPDATE saga_id = saga_id"
            # After waiting on a concurrent insert of the same id, read the committed row, not the snapshot.
            self.lock_suffix = " FOR UPDATE"
        else:
            saga_set = ", ".join(f"{c} = excluded.{c}" for c in SAGA_COLUMNS[1:])
            step_set = ", ".join(f"{c} = excluded.{c}" for c in STEP_COLUMNS[3:])
            saga_upsert = f"ON CONFLICT (saga_id) DO UPDATE SET {saga_set}"
            step_upsert = f"ON CONFLICT (saga_id, step_id) DO UPDATE SET {step_set}"
            insert_if_absent = "ON CONFLICT (saga_id) DO NOTHING"
            self.lock_suffix = ""
        q = _placeholders
        self.insert_saga = q(dialect, f"INSERT INTO sagas ({sagas}) VALUES ({saga_marks}) {insert_if_absent}")
        self.upsert_saga = q(dialect, f"INSERT INTO sagas ({sagas}) VALUES ({saga_marks}) {saga_upsert}")
        self.upsert_steps = q(dialect, f"INSERT INTO steps ({steps}) VALUES ({step_marks}) {step_upsert}")
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
            f"UPDATE sagas SET owner = ?, lease_expires_at = ? WHERE saga_id = ? AND {live} "
            "AND (owner IS NULL OR owner = ? OR lease_expires_at IS NULL OR lease_expires_at < ?)",
        )
        # MySQL counts changed rows, not matched ones (aiomysql never sets CLIENT_FOUND_ROWS): a claim that
        # rewrote its own lease with the same values reports 0, so a 0 is checked with this.
        self.owns = q(dialect, f"SELECT COUNT(*) FROM sagas WHERE saga_id = ? AND owner = ? AND {live}")
        # Recovery's scan, on the (status, lease_expires_at) index. PostgreSQL and MySQL/MariaDB lock the rows
        # they return and skip those another claimer holds; SQLite's BEGIN IMMEDIATE already excludes writers.
        self.expired = q(
            dialect,
            f"SELECT saga_id FROM sagas WHERE {live} AND (lease_expires_at IS NULL OR lease_expires_at < ?) "
            "ORDER BY created_at, saga_id LIMIT ?" + ("" if dialect == "sqlite" else " FOR UPDATE SKIP LOCKED"),
        )
        # PostgreSQL returns the renewed ids with the UPDATE; the others read them back in the same transaction.
        self.renew_returns = dialect == "postgresql"

    def _in(self, sql: str, count: int) -> str:
        return _placeholders(self.dialect, sql.replace("(*)", "(" + ", ".join("?" * count) + ")"))

    def renew(self, count: int) -> str:
        """Return the UPDATE extending `owner`'s leases on `count` ids (params: lease, owner, live..., ids...)."""
        sql = "UPDATE sagas SET lease_expires_at = ? WHERE owner = ? AND status IN (?, ?) AND saga_id IN (*)"
        return self._in(sql + (" RETURNING saga_id" if self.renew_returns else ""), count)

    def owned(self, count: int) -> str:
        """Return the query of which of `count` ids `owner` holds (params: owner, live..., ids...)."""
        return self._in("SELECT saga_id FROM sagas WHERE owner = ? AND status IN (?, ?) AND saga_id IN (*)", count)

    def take(self, count: int) -> str:
        """Return the UPDATE giving `count` sagas to an owner, counting the claim (params: owner, lease, ids...)."""
        return self._in(
            "UPDATE sagas SET owner = ?, lease_expires_at = ?, recovery_attempts = recovery_attempts + 1 "
            "WHERE saga_id IN (*)",
            count,
        )

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

_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f+00:00"


class RowCodec:
    """Convert rows to SQL parameter values and back, for one dialect.

    Times are stored in UTC and come back timezone-aware: fixed-width ISO text on SQLite (so text order is time
    order), TIMESTAMPTZ on PostgreSQL, naive-UTC DATETIME(6) on MySQL. JSON goes in as text on every driver.
    """

    def __init__(self, dialect: DialectName) -> None:
        self.dialect = dialect
        self._bytes_ids = dialect == "mysql"

    def time_in(self, value: datetime | None) -> Any:
        """Return a time as the driver stores it."""
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if self.dialect == "sqlite":
            return value.strftime(_TIME_FORMAT)
        if self.dialect == "mysql":
            return value.replace(tzinfo=None)
        return value

    def time_out(self, value: Any) -> datetime | None:
        """Return a stored time as a timezone-aware UTC datetime."""
        if value is None:
            return None
        if isinstance(value, str):
            return datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    @staticmethod
    def json_in(value: Any, what: str) -> str | None:
        """Return a JSON value as text (None as SQL NULL); raise StoreError if it is not JSON."""
        if value is None:
            return None
        try:
            return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise StoreError(
                f"{what} cannot be stored as JSON ({exc}); store JSON-like values only "
                "(saga_runtime.to_json_value converts most Python values)"
            ) from None

    @staticmethod
    def json_out(value: Any) -> Any:
        """Return the JSON value of a stored column."""
        if value is None:
            return None
        if isinstance(value, bytes | bytearray):
            value = value.decode()
        return json.loads(value)

    def id_out(self, value: Any) -> str:
        """Return an id column as str (MySQL keeps ids as bytes for exact comparison)."""
        if isinstance(value, bytes | bytearray):
            return value.decode()
        assert isinstance(value, str)
        return value

    def saga_params(self, row: SagaRow) -> tuple[Any, ...]:
        """Return the parameters of a saga row, in SAGA_COLUMNS order."""
        what = f"saga {row.saga_id!r}"
        return (
            row.saga_id,
            row.kind,
            self.json_in(row.plan, f"the plan of {what}"),
            row.plan_hash,
            row.status.value,
            row.owner,
            self.time_in(row.lease_expires_at),
            self.json_in(row.budget, f"the budget of {what}"),
            float(row.cost),
            int(row.tokens),
            self.json_in(row.metadata, f"the metadata of {what}"),
            row.error,
            self.time_in(row.created_at),
            self.time_in(row.updated_at),
            self.time_in(row.finished_at),
            int(row.recovery_attempts),
            None if row.parked_from is None else row.parked_from.value,
        )

    def step_params(self, row: StepRow) -> tuple[Any, ...]:
        """Return the parameters of a step row, in STEP_COLUMNS order."""
        what = f"step {row.step_id!r} ({row.tool_name}) of saga {row.saga_id!r}"
        return (
            row.saga_id,
            row.seq,
            row.step_id,
            row.group,
            row.tool_name,
            self.json_in(row.args, f"the args of {what}"),
            row.idempotency_key,
            row.status.value,
            row.attempts,
            self.json_in(row.result, f"the result of {what}"),
            row.error,
            row.error_type,
            self.time_in(row.started_at),
            self.time_in(row.finished_at),
            self.time_in(row.compensated_at),
            row.compensation_error,
            row.compensation_attempts,
            row.prev_hash,
            row.hash,
        )

    def saga_row(self, r: Sequence[Any]) -> SagaRow:
        """Return the saga row of the first len(SAGA_COLUMNS) values of a record."""
        created_at = self.time_out(r[12])
        updated_at = self.time_out(r[13])
        assert created_at is not None
        assert updated_at is not None
        return SagaRow(
            saga_id=self.id_out(r[0]),
            kind=r[1],
            plan=self.json_out(r[2]),
            plan_hash=r[3],
            status=SagaStatus(r[4]),
            owner=r[5],
            lease_expires_at=self.time_out(r[6]),
            budget=self.json_out(r[7]),
            cost=float(r[8]),
            tokens=int(r[9]),
            metadata=self.json_out(r[10]),
            error=r[11],
            created_at=created_at,
            updated_at=updated_at,
            finished_at=self.time_out(r[14]),
            recovery_attempts=int(r[15]),
            parked_from=None if r[16] is None else SagaStatus(r[16]),
        )

    def step_row(self, r: Sequence[Any]) -> StepRow:
        """Return the step row of a record's values in STEP_COLUMNS order."""
        return StepRow(
            saga_id=self.id_out(r[0]),
            seq=int(r[1]),
            step_id=self.id_out(r[2]),
            group=int(r[3]),
            tool_name=r[4],
            args=self.json_out(r[5]),
            idempotency_key=self.id_out(r[6]),
            status=StepStatus(r[7]),
            attempts=int(r[8]),
            result=self.json_out(r[9]),
            error=r[10],
            error_type=r[11],
            started_at=self.time_out(r[12]),
            finished_at=self.time_out(r[13]),
            compensated_at=self.time_out(r[14]),
            compensation_error=r[15],
            compensation_attempts=int(r[16]),
            prev_hash=r[17],
            hash=r[18],
        )

    def rows_of_load(self, records: Sequence[Sequence[Any]]) -> tuple[SagaRow, list[StepRow]] | None:
        """Return the rows of a `Queries.load` result (saga columns then step columns, one record per step)."""
        if not records:
            return None
        n = len(SAGA_COLUMNS)
        saga = self.saga_row(records[0])
        steps = [self.step_row(record[n:]) for record in records if record[n] is not None]
        return saga, steps

    def rows_of_load_many(self, records: Sequence[Sequence[Any]]) -> list[tuple[SagaRow, list[StepRow]]]:
        """Return the rows of a `Queries.load_many` result, one (saga, steps) per saga, in the records' order."""
        grouped: dict[str, list[Sequence[Any]]] = {}
        for record in records:
            grouped.setdefault(self.id_out(record[0]), []).append(record)
        snapshots = [self.rows_of_load(group) for group in grouped.values()]
        return [snapshot for snapshot in snapshots if snapshot is not None]
