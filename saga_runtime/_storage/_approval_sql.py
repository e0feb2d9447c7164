"""The approvals table's SQL (schema 3): columns, statements and row codecs.

A decision is one conditional UPDATE (`... AND decision IS NULL`): the database picks the winner of two
concurrent deciders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from saga_runtime._records import ApprovalRow, SagaStatus
from saga_runtime._storage._codec import SAGA_COLUMNS, STEP_COLUMNS, RowCodec
from saga_runtime._storage._flavour import Flavour
from saga_runtime._storage._sql import _placeholders

__all__ = ["APPROVAL_COLUMNS", "ApprovalQueries", "approval_params", "approval_row"]

APPROVAL_COLUMNS = (
    "saga_id",
    "step_id",
    "seq",
    "tool_name",
    "args",
    "args_digest",
    "requested_at",
    "deadline",
    "decision",
    "decided_by",
    "decided_at",
    "note",
    "prev_hash",
    "hash",
)

_WAITING = SagaStatus.WAITING.value


class ApprovalQueries:
    """The statements on the approvals table of one dialect."""

    def __init__(self, dialect: Flavour) -> None:
        q = _placeholders
        clock = dialect.now_sql  # leases use the database's clock
        columns = ", ".join(APPROVAL_COLUMNS)
        marks = ", ".join("?" * len(APPROVAL_COLUMNS))
        absent = dialect.insert_ignore("saga_id", None)
        # Affects 0 rows if recorded already.
        self.insert = q(dialect, f"INSERT INTO approvals ({columns}) VALUES ({marks}) {absent}")
        self.load = q(dialect, f"SELECT {columns} FROM approvals WHERE saga_id = ? ORDER BY seq")
        decide = (
            "UPDATE approvals SET decision = ?, decided_by = ?, decided_at = ?, note = ?, hash = ? "
            "WHERE saga_id = ? AND step_id = ? AND decision IS NULL AND "
        )
        # People decide before the deadline, the deadline after. Params: five values, saga_id, step_id, time.
        self.decide = q(dialect, decide + "(deadline IS NULL OR deadline > ?)")
        self.expire = q(dialect, decide + "deadline IS NOT NULL AND deadline <= ?")
        # With RETURNING (PostgreSQL): the decision makes its saga due (wake_at) in the same statement and commit.
        # Params: as decide/expire, then the wake time. Returns one row per decision recorded.
        self.decide_wake: dict[bool, str] | None = None
        if dialect.returning:
            wake = (
                " RETURNING saga_id), w AS (UPDATE sagas SET wake_at = ? FROM d "
                "WHERE sagas.saga_id = d.saga_id AND sagas.status = 'WAITING') SELECT saga_id FROM d"
            )
            self.decide_wake = {
                by_deadline: q(dialect, "WITH d AS (" + decide + condition + wake)
                for by_deadline, condition in (
                    (False, "(deadline IS NULL OR deadline > ?)"),
                    (True, "deadline IS NOT NULL AND deadline <= ?"),
                )
            }
        # Lets a retried decision find its lost try's commit.
        self.decided_as = q(dialect, "SELECT COUNT(*) FROM approvals WHERE saga_id = ? AND step_id = ? AND hash = ?")
        cols = ", ".join(f"a.{c}" for c in APPROVAL_COLUMNS)
        pending = (
            f"SELECT {cols} FROM approvals a JOIN sagas s ON s.saga_id = a.saga_id "
            "WHERE a.decision IS NULL AND s.status = ?"
        )
        order = " ORDER BY a.requested_at, a.saga_id, a.seq LIMIT ?"
        self.pending = q(dialect, pending + order)
        self.due = q(dialect, pending + " AND a.deadline IS NOT NULL AND a.deadline <= ?" + order)
        # Unheld WAITING plan sagas (and saga functions': a plan of their own) due by `wake_at` (the index of
        # (status, wake_at) finds them), all decided: for recovery. Params: WAITING, now, the clock's, limit, offset.
        self.ready = q(
            dialect,
            "SELECT s.saga_id FROM sagas s WHERE s.status = ? AND s.wake_at <= ? "
            "AND (s.kind = 'plan' OR s.plan IS NOT NULL) "
            f"AND (s.owner IS NULL OR s.lease_expires_at IS NULL OR s.lease_expires_at < {clock}) "
            "AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.saga_id = s.saga_id AND a.decision IS NULL) "
            "ORDER BY s.wake_at, s.saga_id LIMIT ? OFFSET ?",
        )
        # Due again once the lease runs out (its claimer may die before it writes the saga's next wait).
        claim = (
            f"UPDATE sagas SET owner = ?, lease_expires_at = {dialect.lease_sql}, updated_at = ?, wake_at = ? "
            "WHERE saga_id = ? AND status = ? "
            f"AND (owner IS NULL OR owner = ? OR lease_expires_at IS NULL OR lease_expires_at < {clock})"
        )
        self.claim = q(dialect, claim)
        # With RETURNING (PostgreSQL), one statement claims and reads the claimed saga with its steps (one round
        # trip); the others run the claim, then `Queries.load`, in one transaction.
        self.claim_load: str | None = None
        if dialect.returning:
            step_cols = ", ".join(f"st.{c}" for c in STEP_COLUMNS)
            # Its commit does not wait for the disk where the flavour can say so (`unsynced_commit`, for this
            # transaction only): a claim lost with a crash of the server leaves the saga unowned, and the
            # claimer's first write (an owner-conditional one, made durable at once, with the claim before it) is
            # refused.
            quick = dialect.unsynced_commit
            self.claim_load = q(
                dialect,
                f"WITH c AS ({claim} RETURNING {', '.join(SAGA_COLUMNS)})"
                + (f", quick AS ({quick}) " if quick is not None else " ")
                + f"SELECT {', '.join(f'c.{c}' for c in SAGA_COLUMNS)}, {step_cols} "
                + ("FROM c CROSS JOIN quick " if quick is not None else "FROM c ")
                + "LEFT JOIN steps st ON st.saga_id = c.saga_id ORDER BY st.seq",
            )
        self.holds = q(dialect, "SELECT COUNT(*) FROM sagas WHERE saga_id = ? AND owner = ? AND status = ?")
        self.waiting = _WAITING


def approval_params(codec: RowCodec, row: ApprovalRow) -> tuple[Any, ...]:
    """Return an approval row's parameters, in APPROVAL_COLUMNS order."""
    return (
        row.saga_id,
        row.step_id,
        row.seq,
        row.tool_name,
        codec.json_in(row.args, f"the arguments of the approval of step {row.step_id!r}"),
        row.args_digest,
        codec.time_in(row.requested_at),
        codec.time_in(row.deadline),
        row.decision,
        row.decided_by,
        codec.time_in(row.decided_at),
        row.note,
        row.prev_hash,
        row.hash,
    )


def approval_row(codec: RowCodec, r: Sequence[Any]) -> ApprovalRow:
    """Return the approval row of a record in APPROVAL_COLUMNS order."""
    requested_at = codec.time_out(r[6])
    assert requested_at is not None
    return ApprovalRow(
        saga_id=codec.id_out(r[0]),
        step_id=codec.id_out(r[1]),
        seq=int(r[2]),
        tool_name=r[3],
        args=codec.json_out(r[4]),
        args_digest=r[5],
        requested_at=requested_at,
        deadline=codec.time_out(r[7]),
        decision=r[8],
        decided_by=r[9],
        decided_at=codec.time_out(r[10]),
        note=r[11],
        prev_hash=r[12],
        hash=r[13],
    )


def due_work_sql(dialect: Flavour, queues: int) -> str:
    """Return the one query of an idle worker's looks (`SagaStore.due_work`): whether a QUEUED saga of `queues`
    queues may start, a schedule is due, a request passed its deadline, a waiting saga is ready, each an EXISTS on
    the index its own look uses, and whether a live saga's lease ran out. Params: the queue names, the clock's; the
    clock's; WAITING, now; WAITING, now, the clock's; the clock's."""
    clock = dialect.now_sql
    marks = ", ".join("?" for _ in range(max(queues, 1)))
    looks = (
        f"SELECT 1 FROM sagas WHERE status = 'QUEUED' AND queue IN ({marks}) "
        f"AND (not_before IS NULL OR not_before <= {clock})",
        f"SELECT 1 FROM schedules WHERE paused = 0 AND next_tick <= {clock}",
        "SELECT 1 FROM approvals a JOIN sagas s ON s.saga_id = a.saga_id WHERE a.decision IS NULL AND s.status = ? "
        "AND a.deadline IS NOT NULL AND a.deadline <= ?",
        "SELECT 1 FROM sagas s WHERE s.status = ? AND s.wake_at <= ? AND (s.kind = 'plan' OR s.plan IS NOT NULL) "
        f"AND (s.owner IS NULL OR s.lease_expires_at IS NULL OR s.lease_expires_at < {clock}) "
        "AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.saga_id = s.saga_id AND a.decision IS NULL)",
        "SELECT 1 FROM sagas WHERE status IN ('RUNNING', 'COMPENSATING') "
        f"AND (lease_expires_at IS NULL OR lease_expires_at < {clock})",
    )
    return _placeholders(dialect, "SELECT " + ", ".join(f"EXISTS ({look})" for look in looks))
