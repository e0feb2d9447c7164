"""The tables' column orders, and RowCodec: rows to SQL parameter values and back, per dialect."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from saga_runtime._exceptions import StoreError
from saga_runtime._records import SagaRow, SagaStatus, StepRow, StepStatus, end_of, now, wake_time
from saga_runtime._storage._flavour import Flavour

__all__ = ["SAGA_COLUMNS", "STEP_COLUMNS", "DialectName", "RowCodec"]

#: The databases a dialect module serves (their names: URLs, logs; never a branch of shared code).
DialectName = Literal["sqlite", "postgresql", "mysql"]

# Column order of each table; the Python attribute of `grp` is StepRow.group.
# The statuses a saga has an end reason in (SUCCESS has none).
_ENDED = frozenset({SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_FAILED})
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
    "purged_at",
    "seal",
    "history",
    "waiting_for",
    "parent_id",
    "end_reason",  # written, never read back: SagaResult.end_reason comes from the (sealed) history
    "wake_at",  # not a field of the row: written from it (`wake_time`), read by the queries of due sagas only
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
    "tool_version",
    "reconciled",
)

# One encoder for every value (json.dumps with options builds a new one per call): compact, UTF-8, no NaN.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_CHECKED_JSON = _ENCODER.encode
_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
# The C encoder made once (`encode` makes one per call), without the cycle check: a cycle ends in RecursionError,
# and the callers then encode again with `_CHECKED_JSON` for the error to report.
_FAST: Any = (
    _C_ENCODER(None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False)
    if _C_ENCODER is not None
    else lambda value, _level: (_CHECKED_JSON(value),)  # pragma: no cover - CPython has the C encoder
)


def _JSON(value: Any) -> str:
    """Return `value` as compact JSON text (raising RecursionError on a cycle)."""
    return "".join(_FAST(value, 0))


_UNENCODABLE = (TypeError, ValueError, RecursionError)

# The JSON text of the plans written lately, by identity (the object is kept, so its id is not reused): a saga's
# row is written at its creation and at its end (and at each park, wait or lease change in between) with the same
# plan object, and writers never change a plan in place (see saga_seal), so the text is encoded once per saga.
# Held from a saga's first write to its last (a terminal status), at most _PLAN_TEXTS_KEPT plans (the oldest pushed
# out) and none larger than _PLAN_TEXT_LARGEST characters: at most a few MB however large plans are.
_PLAN_TEXTS: dict[int, tuple[Any, str]] = {}
_PLAN_TEXTS_KEPT = 256  # sagas in flight, about
_PLAN_TEXT_LARGEST = 16 * 1024
_TERMINAL = frozenset(status for status in SagaStatus if status.is_terminal)


def _remember_plan_text(plan: Any, text: str) -> None:
    if len(_PLAN_TEXTS) >= _PLAN_TEXTS_KEPT:
        with contextlib.suppress(StopIteration, KeyError, RuntimeError):  # (another thread took it)
            del _PLAN_TEXTS[next(iter(_PLAN_TEXTS))]  # the oldest out
    _PLAN_TEXTS[id(plan)] = (plan, text)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Microseconds from the epoch a float8 holds exactly (the years 1685 to 2255); its negative made once (`-x` in a
# comparison makes a new int at every run).
FLOAT_EXACT_MICROS = 1 << 53
_FAR_BEFORE = -FLOAT_EXACT_MICROS


class RowCodec:
    """Convert rows to SQL parameter values and back, for one dialect (its flavour says how values reach its driver).

    Times are stored in UTC and come back timezone-aware: fixed-width ISO text on SQLite (so text order is time
    order), TIMESTAMPTZ on PostgreSQL, naive-UTC DATETIME(6) on MySQL. Leases are judged on one clock: the
    database's where machines share it (a lease written as what is left of it), the local one on SQLite (one
    machine). JSON is stored as text on every database
    (schema version 3): it comes back exactly as written, so a float stays a float, 1e23 stays 1e23 and -0.0
    keeps its sign (PostgreSQL's JSONB and MySQL's JSON rewrite numbers).
    """

    # Whether a codec of this process (`step_micros`) has made a step row with a time 2**53 microseconds or more
    # from the epoch (outside the years 1685 to 2255), which a float8 does not hold exactly. Set before that row is
    # returned, never cleared: while it is False, every step row made so far has its times within, and PostgreSQL's
    # lone write reads them the cheaper way without looking at each (`_alone_statement`). One flag for the process,
    # not one per codec: a write's rows are made before its statement, whichever codec made them.
    far_step_times: ClassVar[bool] = False

    def __init__(self, dialect: Flavour, *, step_micros: bool = False) -> None:
        """`step_micros`: step rows' times go out as whole microseconds since the epoch (ints), for a dialect whose
        statements read them so (PostgreSQL's batch writer: no driver conversion of a timestamptz per time)."""
        self.dialect = dialect
        self._step_micros = step_micros
        # The start last converted to microseconds, and its microseconds: a step's row is written at its intent,
        # then with its outcome (the next save), its start the same datetime object in both (immutable: the identity
        # is the value). One tuple, replaced whole: a reader never sees one without the other.
        self._started: tuple[datetime | None, int] = (None, 0)
        self._bytes_ids = dialect.ids_as_bytes
        self._time_value = dialect.time_value
        # A driver taking a UTC time as it is (PostgreSQL's): step rows' times, UTC already, go without a call.
        probe = datetime(2000, 1, 1, tzinfo=UTC)
        self._utc_as_is = dialect.time_value(probe) is probe
        self._local_clock = dialect.local_clock
        self._lease_length = dialect.lease_length

    def time_in(self, value: datetime | None) -> Any:
        """Return a time as the driver stores it."""
        if value is None:
            return None
        if value.tzinfo is not UTC:
            value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return self._time_value(value)

    def lease_in(self, expires: datetime | None, since: datetime | None = None) -> Any:
        """Return a lease running until `expires` by a clock reading `since` (default: now), as the flavour's
        `lease_sql` takes it."""
        if expires is None or self._local_clock:
            return self.time_in(expires)
        return self._lease_length(expires - (now() if since is None else since))

    def now_in(self, now: datetime) -> tuple[Any, ...]:
        """Return the parameters of the flavour's `now_sql`: `now` on a local clock, none where the database reads its
        own."""
        return (self.time_in(now),) if self._local_clock else ()

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
            return _JSON(value)
        except _UNENCODABLE:
            pass
        try:
            return _CHECKED_JSON(value)
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
        """Return the parameters of a saga row, in SAGA_COLUMNS order (its lease as LEASE_SQL takes it)."""
        plan, budget, metadata, history, waiting_for = row.plan, row.budget, row.metadata, row.history, row.waiting_for
        plan_text: str | None
        budget_text: str | None
        metadata_text: str | None
        history_text: str | None
        waiting_text: str | None
        try:  # the hot path: the error message (naming the saga) is only built for a value that is not JSON
            # `_JSON` of each, inlined (a frame less per value).
            if plan is None:
                plan_text = None
            elif (known := _PLAN_TEXTS.get(id(plan))) is not None and known[0] is plan:
                plan_text = known[1]
                if row.status in _TERMINAL:  # the saga's last write: its plan need not be held any longer
                    _PLAN_TEXTS.pop(id(plan), None)
            else:
                plan_text = "".join(_FAST(plan, 0))
                if len(plan_text) <= _PLAN_TEXT_LARGEST and row.status not in _TERMINAL:
                    _remember_plan_text(plan, plan_text)
            budget_text = None if budget is None else "".join(_FAST(budget, 0))
            metadata_text = None if metadata is None else "".join(_FAST(metadata, 0))
            history_text = "".join(_FAST(history, 0)) if history else None
            waiting_text = None if waiting_for is None else "".join(_FAST(waiting_for, 0))
        except _UNENCODABLE:
            what = f"saga {row.saga_id!r}"
            json_in = self.json_in
            plan_text = json_in(plan, f"the plan of {what}")
            budget_text = json_in(budget, f"the budget of {what}")
            metadata_text = json_in(metadata, f"the metadata of {what}")
            history_text = json_in(history, f"the history of {what}") if history else None
            waiting_text = json_in(waiting_for, f"the waiting note of {what}")
        status = row.status
        return (
            row.saga_id,
            row.kind,
            plan_text,
            row.plan_hash,
            status._value_,  # not `.value`: a property, two Python calls
            row.owner,
            self.lease_in(row.lease_expires_at),
            budget_text,
            float(row.cost),
            int(row.tokens),
            metadata_text,
            row.error,
            self.time_in(row.created_at),
            self.time_in(row.updated_at),
            self.time_in(row.finished_at),
            int(row.recovery_attempts),
            None if row.parked_from is None else row.parked_from._value_,
            self.time_in(row.purged_at),
            row.seal,
            history_text,
            waiting_text,
            row.parent_id,
            end_of(status, (), history)[0] if status in _ENDED else None,
            self.time_in(wake_time(row)),
        )

    def step_params(self, row: StepRow) -> tuple[Any, ...]:
        """Return the parameters of a step row, in STEP_COLUMNS order."""
        args, result = row.args, row.result
        try:  # the hot path: the error message (naming the step) is only built for a value that is not JSON
            # `_JSON` of each, inlined (a frame less per value).
            args_text = None if args is None else "".join(_FAST(args, 0))
            # An int result (the usual small one) is its own text: no encoder, no join.
            result_text = (
                None if result is None else int.__repr__(result) if type(result) is int else "".join(_FAST(result, 0))
            )
        except _UNENCODABLE:
            what = f"step {row.step_id!r} ({row.tool_name}) of saga {row.saga_id!r}"
            args_text = self.json_in(args, f"the args of {what}")
            result_text = self.json_in(result, f"the result of {what}")
        started: Any = row.started_at
        finished: Any = row.finished_at
        compensated: Any = row.compensated_at
        if self._step_micros:  # `_micros` of each, inlined (UTC times, the engine's, without a call)
            if started is not None:
                last = self._started
                if last[0] is started:
                    started = last[1]
                else:
                    since = (started if started.tzinfo is UTC else self.time_in(started)) - _EPOCH
                    micros = (since.days * 86400 + since.seconds) * 1000000 + since.microseconds
                    if not _FAR_BEFORE < micros < FLOAT_EXACT_MICROS:
                        RowCodec.far_step_times = True  # (before the row is returned: see `far_step_times`)
                    self._started = (started, micros)
                    started = micros
            if finished is not None:
                since = (finished if finished.tzinfo is UTC else self.time_in(finished)) - _EPOCH
                finished = (since.days * 86400 + since.seconds) * 1000000 + since.microseconds
                if not _FAR_BEFORE < finished < FLOAT_EXACT_MICROS:
                    RowCodec.far_step_times = True
            if compensated is not None:
                since = (compensated if compensated.tzinfo is UTC else self.time_in(compensated)) - _EPOCH
                compensated = (since.days * 86400 + since.seconds) * 1000000 + since.microseconds
                if not _FAR_BEFORE < compensated < FLOAT_EXACT_MICROS:
                    RowCodec.far_step_times = True
        elif self._utc_as_is:  # `time_in` of each, inlined for the times it would return as they are
            if started is not None and started.tzinfo is not UTC:
                started = self.time_in(started)
            if finished is not None and finished.tzinfo is not UTC:
                finished = self.time_in(finished)
            if compensated is not None and compensated.tzinfo is not UTC:
                compensated = self.time_in(compensated)
        else:  # `time_in` of each, inlined for UTC times (the engine's): the flavour's conversion straight
            value = self._time_value
            if started is not None:
                started = value(started) if started.tzinfo is UTC else self.time_in(started)
            if finished is not None:
                finished = value(finished) if finished.tzinfo is UTC else self.time_in(finished)
            if compensated is not None:
                compensated = value(compensated) if compensated.tzinfo is UTC else self.time_in(compensated)
        return (
            row.saga_id,
            row.seq,
            row.step_id,
            row.group,
            row.tool_name,
            args_text,
            row.idempotency_key,
            row.status._value_,  # not `.value`: a property, two Python calls
            row.attempts,
            result_text,
            row.error,
            row.error_type,
            started,
            finished,
            compensated,
            row.compensation_error,
            row.compensation_attempts,
            row.prev_hash,
            row.hash,
            row.tool_version,
            1 if row.reconciled else 0,
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
            purged_at=self.time_out(r[17]),
            seal=r[18],
            history=self.json_out(r[19]) or [],
            waiting_for=self.json_out(r[20]),
            parent_id=None if r[21] is None else self.id_out(r[21]),
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
            tool_version=r[19],
            reconciled=bool(r[20]),
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
