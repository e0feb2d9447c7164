"""The hash chain over a saga's step records: an edited, removed or reordered record is detected.

Step rows change as a saga runs (RUNNING, then SUCCESS, then maybe COMPENSATED), so the chain links what never
changes and seals what does:

- `prev_hash` of a row is the hash of the previous row's identity (saga, position, step id, group, tool,
  idempotency key); the first row links to the saga id. Removing or reordering rows breaks these links.
- `hash` of a row seals its whole content, `prev_hash` included, with SHA-256, or HMAC-SHA-256 when a signing key
  is configured. Editing any field of a row breaks its seal.
- A plan saga's rows must be exactly the steps of its plan (whose hash is stored); a dynamic saga stores the
  head of its identity chain in `plan_hash`, so a removed last record is detected as well.

Updating one row re-seals that row only: a store write stays one row per changed step. A running saga hashes the
part of a row that never changes once (`Sealer`), then only the rest at each seal.

The saga row is sealed too (`seal_saga`, by the store when it writes the row changed): its kind, plan (by digest),
plan hash (a dynamic saga's chain head), status, budget, cost, tokens, metadata, error, times and the status it was
parked from. Removing a step together with its plan entry changes the plan, so it breaks the saga's seal. Not
sealed: the owner, the lease, `updated_at` and the count of recovery attempts, which leases and recovery change
outside any saga's run. A saga row written before the schema sealed saga rows (version 3) has no seal; it verifies
on its step rows alone (`VerifyResult.saga_sealed` is False), while a saga created since without a seal is
reported.

Without a signing key the chain proves the record is consistent: an edit by someone who does not also recompute
the hashes is found. With a signing key (HMAC-SHA-256), a row can only be sealed by someone holding the key, so a
re-sealed forgery is found too.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from saga_runtime._records._approvals import ApprovalRow, approval_problems
from saga_runtime._records._rows import (
    SagaRow,
    SagaStatus,
    StepRow,
    StepStatus,
    canonical_json,
    idempotency_key,
    plan_groups,
)
from saga_runtime._records._times import iso_json, iso_text, iso_text_micro

__all__ = [
    "Sealer",
    "VerifyResult",
    "chain_head",
    "extend_head",
    "identity_hash",
    "plan_digest",
    "planned_identities",
    "remember_plan_digest",
    "saga_seal",
    "seal",
    "seal_all",
    "seal_saga",
    "verify_rows",
]


_PLAIN = frozenset({str, int, bool, type(None)})


def _normal(value: Any) -> Any:
    """Return a JSON value in the one form every database gives back (integral floats as ints).

    A container of plain values (no float, no container) is returned as it is: it is its own form.
    """
    kind = type(value)
    if kind is dict:
        if _PLAIN.issuperset(map(type, value.values())):
            return value
        return {key: _normal(item) for key, item in value.items()}
    if kind is list:
        if _PLAIN.issuperset(map(type, value)):
            return value
        return [_normal(item) for item in value]
    if kind is float and value.is_integer():
        return int(value)
    return value


def _normal_copy(value: Any) -> Any:
    """Return `_normal(value)` in containers of its own (a copy to compare the value with later)."""
    kind = type(value)
    if kind is dict:
        if _PLAIN.issuperset(map(type, value.values())):  # (the usual arguments: no float, no container inside)
            return value.copy()
        return {key: _normal_copy(item) for key, item in value.items()}
    if kind is list:
        return [_normal_copy(item) for item in value]
    if kind is float and value.is_integer():
        return int(value)
    return value


_text = canonical_json
_quote = json.encoder.encode_basestring  # the text canonical_json writes for a str
_STATUS = {status: _quote(status.value) for status in StepStatus}
# The text of small ints (attempts, a small result), by value: an f-string formats an int in about four times the
# instructions of a lookup, and joins a str piece as it is. (An int, of type int exactly, is written as its str.)
_INTS = {number: str(number) for number in range(256)}

# The JSON text of str values written lately, by value: a saga's id is in every identity and seal of its rows, a
# plan's step ids and tool names in those of every saga of the plan, a step's key in its identity and its seal, a
# link (an identity hash) in each seal of its row. Quoting scans each character (about 40 instructions a
# character); a lookup hashes the str once (its hash is kept in the object). Emptied when full.
_QUOTED: dict[str, str] = {}
_QUOTED_KEPT = 4096


def _quoted(text: str) -> str:
    """Return `_quote(text)` for a str `text` (of type str exactly), remembering it (`_QUOTED.get` first)."""
    if len(_QUOTED) >= _QUOTED_KEPT:
        _QUOTED.clear()
    quoted = _QUOTED[text] = _quote(text)
    return quoted


def _time(value: datetime | None) -> str | None:
    return None if value is None else iso_text(value)


def identity_hash(row: StepRow | None, saga_id: str) -> str:
    """Return the hash of a row's identity (what never changes), or of the saga id for the link before the first."""
    if row is None:
        # (A str id written as canonical_json writes the array, without the encoder's call: once for each saga.)
        text = (
            f'["saga",{_QUOTED.get(saga_id) or _quoted(saga_id)}]' if type(saga_id) is str else _text(["saga", saga_id])
        )
    else:
        saga, seq, step, group, tool, key = (
            row.saga_id,
            row.seq,
            row.step_id,
            row.group,
            row.tool_name,
            row.idempotency_key,
        )
        # Plain str and int values (which the f-string writes as JSON; the test inlined: it runs for every link).
        if (
            type(seq) is int
            and type(group) is int
            and type(saga) is str
            and type(step) is str
            and type(tool) is str
            and type(key) is str
        ):
            get = _QUOTED.get
            text = (
                f"[{get(saga) or _quoted(saga)},{seq},{get(step) or _quoted(step)},{group},"
                f"{get(tool) or _quoted(tool)},{get(key) or _quoted(key)}]"
            )
        else:
            text = _text([saga, seq, step, group, tool, key])
    digest = hashlib.sha256(text.encode()).hexdigest()
    # Noted with its JSON text (hex: nothing to escape) for the seals linking to the row; written here, not in a
    # function of its own: a call less for each link.
    if len(_QUOTED) >= _QUOTED_KEPT:
        _QUOTED.clear()
    _QUOTED[digest] = f'"{digest}"'
    return digest


# A row's seal hashes the canonical JSON text of one array: saga id, seq, step id, group, tool, arguments
# (integral floats as ints, as every database gives them back), idempotency key, status, attempts, result,
# error, error type, started, finished and compensated times (ISO 8601), compensation error, compensation
# attempts, prev_hash, then the tool version and reconciled unless "1" and false (older seals stay valid). The
# text up to the idempotency key never changes as the step runs: `Sealer` hashes it once per row and copies the
# hash state for each seal, so a re-seal hashes the rest only. (The canonical text
# of an array is "[" + its elements' texts joined by "," + "]": the two parts are cut from two shorter arrays,
# or written directly, value by value, when the values are plain str, int and None.)


def _fixed(row: StepRow, args: Any) -> bytes:
    saga, seq, step, group, tool, key = row.saga_id, row.seq, row.step_id, row.group, row.tool_name, row.idempotency_key
    if (
        type(seq) is int
        and type(group) is int
        and type(saga) is str
        and type(step) is str
        and type(tool) is str
        and type(key) is str
    ):  # plain str and int values, which the f-string writes as JSON
        get = _QUOTED.get
        return (
            f"[{get(saga) or _quoted(saga)},{seq},{get(step) or _quoted(step)},{group},"
            f"{get(tool) or _quoted(tool)},{_text(args)},{get(key) or _quoted(key)},"
        ).encode()
    return (_text([saga, seq, step, group, tool, args, key])[:-1] + ",").encode()


def _changing(row: StepRow) -> bytes:
    result = row.result
    if not (result is None or type(result) is int or type(result) is str):
        result = _normal(result)
    parts = [
        row.status.value,
        row.attempts,
        result,
        row.error,
        row.error_type,
        _time(row.started_at),
        _time(row.finished_at),
        _time(row.compensated_at),
        row.compensation_error,
        row.compensation_attempts,
        row.prev_hash,
    ]
    if row.tool_version != "1" or row.reconciled:
        parts += [row.tool_version, row.reconciled]
    return _text(parts)[1:].encode()  # the array's elements and its closing bracket: the fixed part opened it


def _start(fixed: bytes, key: bytes | None) -> Any:
    """Return the hash state (SHA-256, or HMAC-SHA-256 with a key) fed with a row's fixed part."""
    if key is None:
        return hashlib.sha256(fixed)
    return hmac.new(key, fixed, hashlib.sha256)


def _finish(state: Any, changing: bytes, key: bytes | None) -> str:
    state.update(changing)
    digest: str = state.hexdigest()
    return digest if key is None else "hmac:" + digest


def _time_text(times: dict[int, tuple[datetime, str]], value: datetime) -> str:
    """Return the JSON text of a time, noting it in `times` (by identity: equal instants in other offsets have other
    text); `_changing_text` reads a time noted there itself."""
    text = iso_json(value)
    times[id(value)] = (value, text)
    return text


def _changing_text(row: StepRow, times: dict[int, tuple[datetime, str]]) -> bytes:
    """Return the text `_changing(row)` gives, written directly when every value is of a plain type.

    `times`: the JSON text of the times written before, by identity (a sealer's, kept across its seals: a row's
    start is in each of its seals after it). Read here, not through a call: a seal writes up to three times.
    The f-string has fewer pieces when the row holds no error and no compensation (the usual seal): joining each
    piece costs about as much as copying the text, so constant text is best written as one literal.
    """
    attempts, undo_attempts, result = row.attempts, row.compensation_attempts, row.result
    if type(attempts) is not int or type(undo_attempts) is not int or row.tool_version != "1" or row.reconciled:
        return _changing(row)
    # (An f-string writes an int, of type int exactly, as int.__repr__ does: `result_text` may be one.)
    if result is None:
        result_text: Any = "null"
    elif type(result) is int:
        result_text = _INTS.get(result) or result
    elif type(result) is str:
        result_text = _quote(result)
    else:
        result_text = _text(_normal(result))
    error, error_type, undo_error, link = row.error, row.error_type, row.compensation_error, row.prev_hash
    started, finished, compensated = row.started_at, row.finished_at, row.compensated_at
    try:
        if started is None:
            started_text = "null"
        elif (known := times.get(id(started))) is not None and known[0] is started:
            started_text = known[1]
        else:
            started_text = _time_text(times, started)
        if finished is None:
            finished_text = "null"
        elif (known := times.get(id(finished))) is not None and known[0] is finished:
            finished_text = known[1]
        else:
            finished_text = _time_text(times, finished)
        if error is None and error_type is None and compensated is None and undo_error is None:
            # The usual seal (an intent, a result): its four nulls written within the literal text around them.
            return (
                f"{_STATUS[row.status]},{_INTS.get(attempts) or attempts},{result_text},null,null,"
                f"{started_text},{finished_text},null,null,{_INTS.get(undo_attempts) or undo_attempts},"
                f"{'null' if link is None else _QUOTED.get(link) or _quote(link)}]"
            ).encode()
        return (
            f"{_STATUS[row.status]},{attempts},{result_text},"
            f"{'null' if error is None else _quote(error)},"
            f"{'null' if error_type is None else _quote(error_type)},"
            f"{started_text},{finished_text},"
            f"{'null' if compensated is None else _time_text(times, compensated)},"
            f"{'null' if undo_error is None else _quote(undo_error)},{undo_attempts},"
            f"{'null' if link is None else _QUOTED.get(link) or _quote(link)}]"
        ).encode()
    except (KeyError, TypeError, AttributeError):  # a value of another type: the general encoder says what it is
        return _changing(row)


def _seal_of(row: StepRow, key: bytes | None) -> str:
    text = _fixed(row, _normal(row.args)) + _changing_text(row, {})
    if key is None:
        return hashlib.sha256(text).hexdigest()
    return "hmac:" + hmac.new(key, text, hashlib.sha256).hexdigest()


def seal(row: StepRow, previous: StepRow | str | None, key: bytes | None) -> None:
    """Link `row` to the row before it (or to that row's identity hash, if known) and seal its content."""
    row.prev_hash = previous if isinstance(previous, str) else identity_hash(previous, row.saga_id)
    row.hash = _seal_of(row, key)


_sha256 = hashlib.sha256


class Sealer:
    """Seal the rows of one saga again and again as they change, hashing each row's fixed part only once.

    The hash state after a row's fixed part is kept with the identity and arguments it was computed from (the
    arguments object, and a copy of its content), so a snapshot of the row (`StepRow.copy`) finds it too: the
    engine replaces arguments (a `$ref` resolved is a new dict), and a tool that changed its arguments in place
    makes them unequal to the copy (unless it swapped a value for an equal one that JSON writes otherwise: 1 for
    true, 0 for false); either way the state is computed afresh. A seal is the one `seal` gives.
    """

    __slots__ = ("_key", "_states", "_times")

    def __init__(self, key: bytes | None) -> None:
        self._key = key
        self._states: dict[str, tuple[tuple[Any, ...], Any, Any, Any]] = {}
        # The text of each time sealed, by identity (equal instants in other offsets have other text).
        self._times: dict[int, tuple[datetime, str]] = {}

    def seal(self, row: StepRow, link: str | None) -> None:
        """Link `row` to the identity hash `link` of the row before it, and seal its content."""
        row.prev_hash = link
        args = row.args
        ident = (row.saga_id, row.seq, row.group, row.tool_name, row.idempotency_key)
        known = self._states.get(row.step_id)
        key = self._key
        if known is None or known[0] != ident or known[1] is not args or known[2] != args:
            normal = _normal_copy(args)  # a new dict (lists and dicts inside copied): the copy to compare with
            # (`_start`, inlined for the usual seal without a signing key: a call less for each row)
            state = _sha256(_fixed(row, normal)) if key is None else _start(_fixed(row, normal), key)
            self._states[row.step_id] = (ident, args, normal, state)
        else:
            state = known[3]
        if key is None:  # `_finish`, inlined: the usual seal, without a signing key
            state = state.copy()
            state.update(_changing_text(row, self._times))
            row.hash = state.hexdigest()
        else:
            row.hash = _finish(state.copy(), _changing_text(row, self._times), key)


def extend_head(head: str | None, row: StepRow) -> str:
    """Return the chain head after `row` is added (None: the head of a saga without records)."""
    start = head if head is not None else identity_hash(None, row.saga_id)
    return hashlib.sha256((start + identity_hash(row, row.saga_id)).encode()).hexdigest()


def chain_head(rows: Sequence[StepRow]) -> str | None:
    """Return the head of the identity chain of `rows` (in order): what a dynamic saga stores as its plan_hash."""
    head = None
    for row in rows:
        head = extend_head(head, row)
    return head


def seal_all(rows: Sequence[StepRow], key: bytes | None) -> None:
    """Link and seal every row of a saga, in order."""
    previous = None
    for row in sorted(rows, key=lambda r: r.seq):
        seal(row, previous, key)
        previous = row


# The digests of plans sealed lately, by identity (the object is kept, so its id is not reused): a running saga
# writes its row several times with the same plan object, and planning notes the digest of each plan it builds
# from content it has built before (`remember_plan_digest`), so a new saga of a known plan hashes nothing.
_PLAN_DIGESTS: dict[int, tuple[Any, str]] = {}
_PLAN_DIGESTS_KEPT = 64  # sagas in flight, about: each kept plan is held


def plan_digest(plan: Any) -> str:
    """Return the digest of a stored plan that a saga row's seal covers."""
    return hashlib.sha256(_text(_normal(plan)).encode()).hexdigest()


def remember_plan_digest(plan: Any, digest: str) -> None:
    """Note that the plan object `plan` has the digest `digest` (of equal content): seals then take it as it is."""
    if len(_PLAN_DIGESTS) >= _PLAN_DIGESTS_KEPT:
        with contextlib.suppress(StopIteration, KeyError, RuntimeError):  # (another thread took it)
            del _PLAN_DIGESTS[next(iter(_PLAN_DIGESTS))]  # the oldest out
    _PLAN_DIGESTS[id(plan)] = (plan, digest)


def _plan_digest(plan: Any, *, cached: bool) -> str:
    known = _PLAN_DIGESTS.get(id(plan)) if cached else None
    if known is not None and known[0] is plan:
        return known[1]
    digest = plan_digest(plan)
    if plan is not None:
        remember_plan_digest(plan, digest)
    return digest


def _instant(value: datetime | None) -> str | None:
    """Return a time as one text for one instant (UTC, microseconds), whatever offset it is given in."""
    if value is None:
        return None
    if value.tzinfo is not UTC:  # (a UTC time, as every stored one, is written as it is)
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return iso_text_micro(value)


_SAGA_STATUS = {status: _quote(status.value) for status in SagaStatus}


def _instant_json(value: datetime | None) -> str:
    """Return the JSON text of `_instant(value)` (a datetime's own isoformat holds nothing to escape)."""
    if value is None:
        return "null"
    if type(value) is datetime:
        # (A UTC time, as every stored one, written without `_instant`'s call: the text is iso_text_micro's.)
        return f'"{iso_text_micro(value) if value.tzinfo is UTC else _instant(value)}"'
    return _quote(_instant(value))  # type: ignore[arg-type]


def _saga_text(saga: SagaRow, digest: str) -> str:
    """Return the canonical JSON text of a saga row's sealed array (see `saga_seal`), written value by value.

    About half the general encoder's instructions: the ids and the digest are quoted once (`_QUOTED`, or hex), the
    times written as text directly. Raises TypeError, KeyError or AttributeError for a value of an unusual type
    (`saga_seal` then takes the general encoder).
    """
    # (Any: a row read from a store, or built by hand, may hold a value of another type than its annotation.)
    saga_id: Any = saga.saga_id
    kind: Any = saga.kind
    plan_hash: Any = saga.plan_hash
    tokens: Any = saga.tokens
    error: Any = saga.error
    budget, metadata, parked = saga.budget, saga.metadata, saga.parked_from
    if not (
        type(saga_id) is str
        and type(kind) is str
        and type(tokens) is int
        and (plan_hash is None or type(plan_hash) is str)
        and (error is None or type(error) is str)
    ):
        raise TypeError("a value of another type than str, int or None")
    get = _QUOTED.get
    text = (
        f'["saga",{get(saga_id) or _quoted(saga_id)},{get(kind) or _quoted(kind)},{get(digest) or _quoted(digest)},'
        f"{'null' if plan_hash is None else get(plan_hash) or _quoted(plan_hash)},{_SAGA_STATUS[saga.status]},"
        f'{"null" if budget is None else _text(_normal(budget))},"{float(saga.cost)!r}",{tokens},'
        f"{'{}' if type(metadata) is dict and not metadata else _text(_normal(metadata))},"
        f"{'null' if error is None else _quote(error)},"
        f"{_instant_json(saga.created_at)},{_instant_json(saga.finished_at)},"
        f"{'null' if parked is None else _SAGA_STATUS[parked]}"
    )
    if saga.purged_at is not None:
        text += "," + _instant_json(saga.purged_at)
    if saga.history:
        text += "," + _text(_normal(saga.history))
    if saga.parent_id is not None:
        text += "," + _text(_normal({"parent": saga.parent_id}))
    return text + "]"


def saga_seal(saga: SagaRow, key: bytes | None, *, cached: bool = False) -> str:
    """Return the seal of a saga row's content (SHA-256, or HMAC-SHA-256 with a key, then prefixed "hmac:").

    `cached`: the plan's digest may come from an earlier seal of the same plan object (writers seal one saga's row
    again and again; plans are never changed in place), and the text is written value by value (`_saga_text`). A
    check of a record computes it afresh, with the general encoder.
    """
    digest = _plan_digest(saga.plan, cached=cached)
    text: bytes | None = None
    if cached:
        # (try, not contextlib.suppress: a context manager's enter and exit cost a third of the text's writing)
        try:
            text = _saga_text(saga, digest).encode()
        except (TypeError, KeyError, AttributeError):  # an unusual value: the general encoder's
            text = None
    if text is None:
        text = _saga_parts_text(saga, digest)
    if key is None:
        return hashlib.sha256(text).hexdigest()
    return "hmac:" + hmac.new(key, text, hashlib.sha256).hexdigest()


def _saga_parts_text(saga: SagaRow, digest: str) -> bytes:
    """Return the canonical JSON text of a saga row's sealed array, by the general encoder (the seal's definition)."""
    status = saga.status
    parked = saga.parked_from
    parts = [
        "saga",
        saga.saga_id,
        saga.kind,
        digest,
        saga.plan_hash,
        getattr(status, "value", status),
        _normal(saga.budget),
        repr(float(saga.cost)),  # as text: a float stays one (and NaN would not be JSON)
        saga.tokens,
        _normal(saga.metadata),
        saga.error,
        _instant(saga.created_at),
        _instant(saga.finished_at),
        getattr(parked, "value", parked),
    ]
    if saga.purged_at is not None:  # a tombstone's seal covers when it was purged (a whole saga's stays as it was)
        parts.append(_instant(saga.purged_at))
    if saga.history:  # sealed only once there is one: a row sealed before the history existed still verifies
        parts.append(_normal(saga.history))
    if saga.parent_id is not None:  # a child saga's: sealed with its parent (a saga of its own's stays as it was)
        parts.append(_normal({"parent": saga.parent_id}))
    return _text(parts).encode()


def seal_saga(saga: SagaRow, key: bytes | None) -> None:
    """Seal a saga row's content (a store does it each time it writes the row)."""
    saga.seal = saga_seal(saga, key, cached=True)


@dataclass(frozen=True)
class VerifyResult:
    """The verdict of `store.verify_saga`: truthy when the record is intact; `problems` says what broke where.

    `saga_sealed` is False for a saga row written before saga rows were sealed (schema version 3): only its step
    rows could be checked.
    """

    saga_id: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    signed: bool = False
    saga_sealed: bool = True

    def __bool__(self) -> bool:
        return self.ok


def _seal_problem(where: str, stored: str, key: bytes | None) -> str:
    if key is not None and not stored.startswith("hmac:"):
        return f"{where}: is not signed, but a signing key is configured"
    if key is None and stored.startswith("hmac:"):
        return f"{where}: is signed; configure the signing key to verify it"
    return f"{where}: its content does not match its seal (altered)"


def planned_identities(saga: SagaRow) -> list[StepRow] | None:
    """Return the identities of a plan saga's steps (seq, step id, group, tool, key) from its plan, else None."""
    if saga.kind != "plan" or not isinstance(saga.plan, list):
        return None
    planned: list[StepRow] = []
    for group, members in enumerate(plan_groups(saga.plan)):
        for step in members:
            step_id = step.get("id") if isinstance(step, dict) else None
            tool = step.get("tool") if isinstance(step, dict) else None
            seq = len(planned)
            key = idempotency_key(saga.saga_id, step_id) if isinstance(step_id, str) else ""
            planned.append(StepRow(saga.saga_id, seq, step_id, group, tool, None, key))  # type: ignore[arg-type]
    return planned


def _at(planned: Sequence[StepRow], seq: int) -> StepRow | None:
    return planned[seq] if 0 <= seq < len(planned) else None


def _plan_problem(saga: SagaRow, ordered: Sequence[StepRow], planned: Sequence[StepRow]) -> str | None:
    """Return how stored records differ from the plan's steps, or None: each at its place, none missing that must be.

    A step never started has no record; but a saga that succeeded ran every step, and a group starts only once
    the groups before it ended, so no step of an earlier group than a stored record's may be missing.
    """
    ids = [row.step_id for row in ordered]
    misplaced = any(_at(planned, row.seq) is None or planned[row.seq].step_id != row.step_id for row in ordered)
    if len(ordered) == len(planned) or saga.status is SagaStatus.SUCCESS or misplaced:
        must = planned
    else:
        last = max(planned[row.seq].group for row in ordered) if ordered else -1
        must = [row for row in planned if row.group < last or row.seq in {r.seq for r in ordered}]
    if ids == [row.step_id for row in must]:
        return None
    missing = [row.step_id for row in must if row.step_id not in set(ids)]
    removed = f" (the record of {missing} was removed)" if missing else ""
    return f"the records are not the plan's steps: {len(ordered)} records for {len(planned)} steps{removed}"


def verify_rows(
    saga: SagaRow,
    rows: Sequence[StepRow],
    key: bytes | None,
    approvals: Sequence[ApprovalRow] = (),
    *,
    sealed_since: datetime | None = None,
) -> VerifyResult:
    """Check a saga's row and step rows against their seals, the chain and the saga's plan, and its approvals.

    `sealed_since`: when the store began sealing saga rows (a saga created before and never written since carries
    no seal, and is checked on its step rows alone); None: every saga row must carry a seal.
    """
    problems: list[str] = []
    saga_sealed = True
    where = "the saga record (status, plan, error, cost, tokens, metadata)"
    if saga.seal is None:
        if sealed_since is not None and saga.created_at < sealed_since:
            saga_sealed = False
        else:
            problems.append(f"{where}: carries no seal (it was removed)")
    elif saga.seal != saga_seal(saga, key):
        problems.append(_seal_problem(where, saga.seal, key))
    if saga.purged_at is not None:  # a tombstone: its steps and payloads were purged, its own seal is all there is
        if rows or approvals:
            problems.append("a purged saga holds step or approval records (added after its purge)")
        return VerifyResult(saga.saga_id, not problems, problems, signed=key is not None, saga_sealed=saga_sealed)
    ordered = sorted(rows, key=lambda row: row.seq)
    planned = planned_identities(saga)
    stored = {row.seq: row for row in ordered}
    for position, row in enumerate(ordered):
        where = f"record #{position} (step {row.step_id!r})"
        if planned is None or len(ordered) == len(planned):
            seq, previous = position, ordered[position - 1] if position else None
        else:  # a plan's step is stored from its intent on: one that never started has no record
            seq, previous = row.seq, stored.get(row.seq - 1) or _at(planned, row.seq - 1)
        if row.seq != seq:
            problems.append(f"{where}: stands at position {row.seq}; a record before it was removed or moved")
        if row.prev_hash != identity_hash(previous, saga.saga_id):
            problems.append(f"{where}: does not link to the record before it (removed, inserted or reordered)")
        if row.hash is None:
            problems.append(f"{where}: carries no seal")
        elif row.hash != _seal_of(row, key):
            problems.append(_seal_problem(where, row.hash, key))
    if planned is not None and (problem := _plan_problem(saga, ordered, planned)) is not None:
        problems.append(problem)
    elif saga.kind == "dynamic" and saga.plan_hash != chain_head(ordered):
        problems.append("the saga's chain head does not match its records: a record was removed or added")
    problems += approval_problems(saga, ordered, approvals, key, lambda step: identity_hash(step, saga.saga_id))
    return VerifyResult(saga.saga_id, not problems, problems, signed=key is not None, saga_sealed=saga_sealed)
