"""Plans: the step lists users (and models) hand to `executor.run`, normalised and checked before anything runs."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from saga_runtime._exceptions import PlanValidationError, ResultNotStorableError, SecretKeyError, UnknownToolError
from saga_runtime._planning._policy import PlanPolicy
from saga_runtime._planning._refs import RefError, find_refs, ref_target
from saga_runtime._records import (
    MAX_JSON_BYTES,
    MAX_JSON_INT,
    MIN_JSON_INT,
    SecretKeyring,
    canonical_json,
    check_nesting,
    conceal,
    has_envelope,
    key_parts,
    mask_secrets,
    own_values,
    reveal,
    to_json_value,
)
from saga_runtime._tools import (
    BUILTIN_TOOLS,
    ToolRegistry,
    ToolSpec,
    builtin_tool_message,
    plain_kwargs,
    unknown_tool_message,
    unwrap_secrets,
)

__all__ = [
    "JOINS",
    "MAX_ID_BYTES",
    "Join",
    "Plan",
    "PlannedStep",
    "Step",
    "call_args",
    "has_refs",
    "stored_as_is",
    "stored_kwargs",
    "valid_id",
]

# "version": a stored plan's record of the tool version a step was planned with (when not "1").
_STEP_KEYS = frozenset({"tool", "args", "id", "approval", "version"})


class Step(BaseModel):
    """One step of a plan: a tool, its arguments, and an optional id (unique in the plan, without '.').

    `approval=True`: the step waits for a person's decision before it runs (as every call of a tool registered
    `approval=True` does).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None
    approval: bool = False


@dataclass(slots=True)
class PlannedStep:
    """A validated step: its id, tool, JSON arguments (maybe holding `$ref`s) and its place in the plan.

    `refs` tells whether the arguments hold a `$ref` (None: not known yet). `kwargs` are the arguments as
    `execute` gets them, validated when the plan was (None when they hold a `$ref`): a step run with exactly
    these `args` needs no second validation. (Not frozen: a frozen dataclass is several times slower to build,
    and a plan builds one per step; nothing changes a planned step.)
    """

    step_id: str
    tool_name: str
    args: dict[str, Any]
    group: int
    refs: bool | None = field(default=None, compare=False)
    kwargs: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    # The step waits for a person's decision before it runs (stored in the plan as "approval": true).
    approval: bool = False
    # The version of the tool the step is planned with (stored in the plan when it is not "1").
    version: str = "1"


JOINS = ("all", "first", "quorum", "any")


@dataclass(frozen=True, slots=True)
class Join:
    """How a group ends: `all` succeed, the `first` to succeed wins, or a `quorum` of `k` (`any`: k = 1)."""

    mode: str = "all"
    k: int | None = None
    id: str | None = None

    @property
    def needed(self) -> int | None:
        """Return how many successes a quorum or any group needs (None for all and first)."""
        return 1 if self.mode == "any" else self.k


_ALL = Join()


def _step_json(step: PlannedStep, args: dict[str, Any]) -> dict[str, Any]:
    """Return a step, with `args`, as a stored plan holds it (marked when it waits for a person's decision, or
    versioned)."""
    if not step.approval and step.version == "1":
        return {"id": step.step_id, "tool": step.tool_name, "args": args}
    out: dict[str, Any] = {"id": step.step_id, "tool": step.tool_name, "args": args}
    if step.approval:
        out["approval"] = True
    if step.version != "1":
        out["version"] = step.version
    return out


def _unversioned(value: Any) -> Any:
    """Return a stored plan without its steps' tool versions (the same calls, whatever code runs them)."""
    if isinstance(value, list):
        return [_unversioned(item) for item in value]
    if isinstance(value, dict) and "group" in value:
        return {**value, "group": _unversioned(value["group"])}
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "version"}
    return value


@dataclass(frozen=True)
class Plan:
    """A validated plan: groups of steps, run in order, the steps of a group concurrently."""

    groups: tuple[tuple[PlannedStep, ...], ...]
    joins: tuple[Join, ...] = ()

    @functools.cached_property
    def steps(self) -> list[PlannedStep]:
        """Return every step in plan order (one list per plan, shared by its `fresh` copies: read it only)."""
        return [step for group in self.groups for step in group]

    def join_of(self, group: int) -> Join:
        """Return how group number `group` ends."""
        return self.joins[group] if group < len(self.joins) else _ALL

    def group_ids(self) -> Mapping[str, int]:
        """Return the ids given to groups, with their index (one read-only mapping per plan, shared by its `fresh`
        copies)."""
        return self._group_ids

    @functools.cached_property
    def _group_ids(self) -> Mapping[str, int]:
        return MappingProxyType({join.id: g for g, join in enumerate(self.joins) if join.id is not None})

    @functools.cached_property
    def group_joins(self) -> tuple[Join, ...]:
        """Return how each group ends, in plan order (`join_of` of each; shared by `fresh` copies)."""
        return tuple(self.join_of(g) for g in range(len(self.groups)))

    def to_json(self) -> list[Any]:
        """Return the plan as stored: groups of `{"id", "tool", "args"}`, a join other than `all` spelled out."""
        return self._json

    @functools.cached_property
    def step_args(self) -> list[dict[str, Any]]:
        """Return each step's JSON arguments, in plan order: what its row and the stored plan hold (a `fresh`
        copy's own)."""
        return [step.args for group in self.groups for step in group]

    @functools.cached_property
    def step_ids(self) -> list[str]:
        """Return each step's id, in plan order (shared by `fresh` copies: read it only)."""
        return [step.step_id for step in self.steps]

    @functools.cached_property
    def key_parts(self) -> list[bytes]:
        """Return each step's part of its idempotency key's hashed text, in plan order (shared by `fresh` copies)."""
        return key_parts(self.step_ids)

    @functools.cached_property
    def _json(self) -> list[Any]:
        # Built once per plan: its digest and the saga row read the same JSON (which nobody mutates).
        args = iter(self.step_args)
        if not self.joins:  # every group joins `all`: plain lists
            return [[_step_json(s, next(args)) for s in group] for group in self.groups]
        out: list[Any] = []
        for g, group in enumerate(self.groups):
            steps = [_step_json(s, next(args)) for s in group]
            join = self.join_of(g)
            if join == _ALL:
                out.append(steps)
            else:
                spec: dict[str, Any] = {"group": steps, "join": join.mode}
                if join.k is not None:
                    spec["k"] = join.k
                if join.id is not None:
                    spec["id"] = join.id
                out.append(spec)
        return out

    @functools.cached_property
    def encoded(self) -> bytes:
        """Return the plan's stored JSON as canonical text in UTF-8 (encoded once: its size, its digest)."""
        return canonical_json(self.to_json()).encode()

    @functools.cached_property
    def digest(self) -> str:
        """Return the plan's hash: two plans with the same hash run the same calls.

        Secrets count as "**********": each encryption of a secret differs, and the same plan must keep its hash.
        Tool versions do not count: a saga's id still names its calls after its tools were upgraded.
        """
        secret = any(_may_hold_secret(step.args) for group in self.groups for step in group)
        versioned = any(step.version != "1" for group in self.groups for step in group)
        if not secret and not versioned:
            return hashlib.sha256(self.encoded).hexdigest()
        plan = _unversioned(self.to_json()) if versioned else self.to_json()
        return hashlib.sha256(canonical_json(mask_secrets(plan) if secret else plan).encode()).hexdigest()

    def fresh(self) -> Plan:
        """Return a copy holding argument dicts of its own (`step_args`, its JSON's), its text and digest kept.

        For a plan built once and run by many sagas: a saga's records, and what its tools are handed, are its own.
        Its planned steps are shared (nothing changes a planned step); only for plans whose kwargs hold no
        container (`reusable`): they are shared too.
        """
        # Its fields and the cached properties' values, set in its own dict in one call (as functools.cached_property
        # keeps them; a frozen dataclass's __init__ would set each field through object.__setattr__).
        copy = _new_object(Plan)
        known = vars(copy)
        known.update(
            groups=self.groups,
            joins=self.joins,
            encoded=self.encoded,
            digest=self.digest,
            steps=self.steps,
            key_parts=self.key_parts,
            step_ids=self.step_ids,
            args_shown_as_is=self.args_shown_as_is,
            gated=self.gated,
            first_held=self.first_held,
            _group_ids=self._group_ids,
            group_joins=self.group_joins,
        )
        if not self._plain:
            known["step_args"] = [_own_args(args) for args in self.step_args]
            return copy
        # Groups joining `all` of plain steps with flat arguments: the arguments and the JSON copied in one pass.
        step_args: list[dict[str, Any]] = []
        json: list[Any] = []
        add = step_args.append
        for group in self._json:
            steps = []
            for step in group:
                args = step["args"].copy()
                add(args)
                own = step.copy()  # ("id", "tool", "args", in that order: copied in C; its arguments then its own)
                own["args"] = args
                steps.append(own)
            json.append(steps)
        known["step_args"], known["_json"] = step_args, json
        return copy

    @functools.cached_property
    def gated(self) -> bool:
        """Tell whether a step of the plan waits for a person's decision (known once: `fresh` copies share it)."""
        return any(step.approval for step in self.steps)

    @functools.cached_property
    def first_held(self) -> bool:
        """Tell whether a step of the first group waits for a person's decision: its intent cannot be written with
        the saga (known once: `fresh` copies share it)."""
        return bool(self.groups) and any(step.approval for step in self.groups[0])

    @functools.cached_property
    def args_shown_as_is(self) -> bool:
        """Tell whether every step's arguments are shown as they are in its record (`mask_secrets` keeps them: no
        secret, no value to look into), as long as nothing replaces them (a `$ref` resolved: a plain plan has none).

        Known once for a plan many sagas run (its `fresh` copies share it): their results check no step's arguments.
        """
        return self._plain and all(mask_secrets(args) is args for args in self.step_args)

    @functools.cached_property
    def _plain(self) -> bool:
        # Every group joins `all`, every step's JSON is {"id", "tool", "args"}, every argument value is immutable.
        return not self.joins and all(
            not step.approval and step.version == "1" and _SHARED.issuperset(map(type, args.values()))
            for step, args in zip(self.steps, self.step_args, strict=True)
        )

    @property
    def reusable(self) -> bool:
        """Tell whether `fresh` copies of this plan are as good as building it again (kwargs of immutable values)."""
        return all(
            step.kwargs is None or _SHARED.issuperset(map(type, step.kwargs.values()))
            for group in self.groups
            for step in group
        )


_new_object = object.__new__

# Values a copy of a plan may share with it: immutable.
_SHARED = frozenset({str, int, float, bool, type(None)})


def _may_hold_secret(args: dict[str, Any]) -> bool:
    """Tell whether arguments hold an encrypted secret (only a dict can), walking them only if they hold one."""
    return not _SHARED.issuperset(map(type, args.values())) and has_envelope(args)


def _json_copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: _json_copy(item) for key, item in value.items()}
    if kind is list:
        return [_json_copy(item) for item in value]
    return value


def _own_args(args: dict[str, Any]) -> dict[str, Any]:
    # A copy of JSON arguments (the kwargs, immutable values only, are shared: nothing changes them, and each
    # attempt gets its own).
    return dict(args) if _SHARED.issuperset(map(type, args.values())) else _json_copy(args)


#: The longest step id, in UTF-8 bytes (every store keeps ids of this size as they are).
MAX_ID_BYTES = 200


def _utf8(text: str) -> bool:
    """Tell whether `text` can be stored: no lone surrogates."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def valid_id(value: Any) -> bool:
    """Tell whether `value` can be a saga, step or group id on every store.

    A non-empty string of Unicode text (no lone surrogate) without NUL, of at most `MAX_ID_BYTES` bytes in UTF-8.
    """
    return (
        isinstance(value, str)
        and bool(value)
        and "\x00" not in value
        and _utf8(value)
        and len(value.encode()) <= MAX_ID_BYTES
    )


@dataclass(slots=True)
class _Draft:
    group: int
    index: int
    tool: Any
    args: Any
    id: str | None
    approval: Any = False
    version: Any = None


def _label(draft: _Draft) -> str:
    name = f"step {draft.id!r}" if draft.id is not None else f"step #{draft.index + 1}"
    return f"{name} of group {draft.group}"


def _read_step(item: Any, group: int, index: int, problems: list[str]) -> _Draft | None:
    if type(item) is dict and "tool" in item and _STEP_KEYS.issuperset(item):  # the common case, checked fast
        return _Draft(
            group,
            index,
            item["tool"],
            item.get("args", {}),
            item.get("id"),
            item.get("approval", False),
            item.get("version"),
        )
    where = f"step #{index + 1} of group {group}"
    if isinstance(item, Step):
        return _Draft(group, index, item.tool, item.args, item.id, item.approval)
    if not isinstance(item, Mapping):
        problems.append(f"{where}: expected a step (a dict or Step) or a group (a list), got {type(item).__name__}")
        return None
    unknown = sorted(str(key) for key in item if key not in _STEP_KEYS)
    if unknown:
        problems.append(
            f"{where}: unknown key(s) {unknown}; a step has only 'tool', 'args', 'id', 'approval' and 'version'"
        )
    if "tool" not in item:
        problems.append(f"{where}: missing 'tool'")
        return None
    return _Draft(
        group,
        index,
        item["tool"],
        item.get("args", {}),
        item.get("id"),
        item.get("approval", False),
        item.get("version"),
    )


_GROUP_KEYS = frozenset({"group", "join", "k", "id"})


def _read_join(item: Mapping[str, Any], g: int, problems: list[str]) -> tuple[Any, Join]:
    """Read a group written as `{"group": [...], "join": ..., "k": ..., "id": ...}`."""
    where = f"group {g}"
    unknown = sorted(str(key) for key in item if key not in _GROUP_KEYS)
    if unknown:
        problems.append(f"{where}: unknown key(s) {unknown}; a group has 'group', 'join', 'k' and 'id'")
    members = item["group"]
    if not isinstance(members, list | tuple):
        problems.append(f"{where}: 'group' must be a list of steps")
        members = []
    mode = item.get("join", "all")
    k = item.get("k")
    group_id = item.get("id")
    if mode not in JOINS:
        problems.append(f"{where}: 'join' must be one of {', '.join(JOINS)}, got {mode!r}")
        mode = "all"
    if mode == "quorum":
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= max(1, len(members)):
            problems.append(f"{where}: a quorum needs 'k', an int from 1 to its {len(members)} steps, got {k!r}")
            k = 1
    elif k is not None and not (mode == "any" and k == 1):
        problems.append(f"{where}: 'k' belongs to quorum groups only (join is {mode!r})")
        k = None
    if mode == "any":
        k = None
    if group_id is not None and (not valid_id(group_id) or "." in group_id):
        problems.append(
            f"{where}: 'id' must be a non-empty string without '.' or NUL, valid Unicode of at most {MAX_ID_BYTES} "
            "bytes"
        )
        group_id = None
    return members, Join(mode, k, group_id)


def _read_groups(plan: Any, problems: list[str]) -> tuple[list[list[_Draft]], list[Join]]:
    if type(plan) is not list and (isinstance(plan, str | bytes | Mapping | Step) or not isinstance(plan, Sequence)):
        problems.append(f"a plan is a list of steps and groups, got {type(plan).__name__}")
        return [], []
    if not plan:
        problems.append("the plan has no steps")
    groups: list[list[_Draft]] = []
    joins: list[Join] = []
    for g, item in enumerate(plan):
        join = _ALL
        if type(item) is dict:
            if "group" in item:
                members, join = _read_join(item, g, problems)
            else:
                members = [item]
        elif isinstance(item, Mapping) and "group" in item:
            members, join = _read_join(item, g, problems)
        else:
            members = item if isinstance(item, list | tuple) else [item]
        if not members:
            problems.append(f"group {g} is empty")
        drafts = [_read_step(member, g, i, problems) for i, member in enumerate(members)]
        groups.append([d for d in drafts if d is not None])
        joins.append(join)
    return groups, joins


def _check_ids(groups: list[list[_Draft]], problems: list[str]) -> None:
    seen: set[str] = set()
    for draft in (d for group in groups for d in group):
        if draft.id is None:
            continue
        if not isinstance(draft.id, str) or not draft.id:
            problems.append(f"{_label(draft)}: 'id' must be a non-empty string, got {draft.id!r}")
            draft.id = None
        elif not valid_id(draft.id):
            problems.append(
                f"{_label(draft)}: 'id' must be valid Unicode text without NUL, of at most {MAX_ID_BYTES} bytes"
            )
            draft.id = None
        elif "." in draft.id:
            problems.append(f"{_label(draft)}: 'id' must not contain '.', which $ref paths use")
        elif draft.id in seen:
            problems.append(f"{_label(draft)}: duplicate id {draft.id!r}; ids are unique within a plan")
        if draft.id is not None:
            seen.add(draft.id)
    for draft in (d for group in groups for d in group):
        if draft.id is None:
            base = f"{draft.tool if isinstance(draft.tool, str) else 'step'}-{draft.group}-{draft.index}"
            candidate, n = base, 1
            while candidate in seen:
                n += 1
                candidate = f"{base}-{n}"
            draft.id = candidate
            seen.add(candidate)


_is_str = str.__instancecheck__  # isinstance(x, str) as a function: all(map(...)) runs without a generator
_NONE: frozenset[str] = frozenset()


def _unwrapped(args: Mapping[str, Any], tool: str) -> dict[str, Any]:
    """Return `args` with secret objects replaced by their values; raise `ResultNotStorableError` if it cannot walk
    them (nested past its bound, or holding themselves: where is said; a model that cannot be dumped)."""
    try:
        return unwrap_secrets(dict(args))  # type: ignore[no-any-return]
    except (ValueError, RecursionError) as exc:
        check_nesting(args, what="the arguments", tool_name=tool)  # says where
        raise ResultNotStorableError(
            f"the arguments of tool {tool!r} cannot be stored as JSON: {exc}", tool_name=tool, type_name="dict"
        ) from None


def _check_step(
    draft: _Draft,
    registry: ToolRegistry,
    group_of: Mapping[str, int],
    problems: list[str],
    unknown: list[str],
    keyring: SecretKeyring | None = None,
) -> PlannedStep | None:
    tool, args = draft.tool, draft.args
    if not isinstance(tool, str):
        problems.append(f"{_label(draft)}: 'tool' must be a tool name (a string), got {type(tool).__name__}")
        return None
    if not (type(args) is dict or isinstance(args, Mapping)) or not all(map(_is_str, args)):
        problems.append(f"{_label(draft)}: 'args' must be a dict of argument names to values")
        return None
    try:
        # A secret object (SecretStr, ...) stands for its value: as JSON it would become "**********".
        args = to_json_value(_unwrapped(args, tool), what="the arguments", tool_name=tool)
    except ResultNotStorableError as exc:
        problems.append(f"{_label(draft)}: {exc}")
        return None
    deferred: set[str] = set()
    for name, value in args.items():
        if type(value) is not dict and type(value) is not list:
            continue  # a scalar holds no $ref
        for ref in find_refs(value):
            deferred.add(name)
            try:
                target, _ = ref_target(ref)
            except RefError as exc:
                problems.append(f"{_label(draft)}: argument {name!r}: {exc}")
                continue
            if target not in group_of:
                problems.append(
                    f"{_label(draft)}: argument {name!r}: $ref to {target!r}, which is no step of this plan"
                )
            elif group_of[target] >= draft.group:
                problems.append(
                    f"{_label(draft)}: argument {name!r}: $ref to {target!r} in group {group_of[target]}; a $ref "
                    "may only point to a step of an earlier group"
                )
    if isinstance(tool, str) and tool in BUILTIN_TOOLS:  # recorded by its own front door only (`saga.child()`)
        problems.append(f"{_label(draft)}: {builtin_tool_message(tool)}")
        return None
    spec = registry.find(tool)
    if spec is None:
        unknown.append(tool)
        problems.append(f"{_label(draft)}: {unknown_tool_message(tool, registry.names())}")
        return None
    plain = args
    if spec.secrets:
        # Stored encrypted (an envelope of a stored plan is kept as it is); validated, and handed over, in clear.
        paths = {name: path for name, path in spec.secrets.items() if name not in deferred}
        try:
            plain = reveal(args, keyring)
            args = conceal(args, paths, keyring, what=_label(draft))
        except SecretKeyError as exc:
            problems.append(f"{_label(draft)}: {exc}")
            return None
    found, kwargs = spec.checked_args(own_values(plain), deferred=frozenset(deferred) if deferred else _NONE)
    if found:
        label = _label(draft)
        problems.extend(f"{label}: {p}" for p in found)
    if type(draft.approval) is not bool:
        problems.append(f"{_label(draft)}: 'approval' must be true or false, got {draft.approval!r}")
    version = spec.version if draft.version is None else draft.version
    if type(version) is not str:
        problems.append(f"{_label(draft)}: 'version' must be a string, got {type(version).__name__} {version!r}")
    elif not spec.accepts(version):
        problems.append(
            f"{_label(draft)}: planned with version {version!r} of tool {tool!r}, which this executor's version "
            f"{spec.version!r} does not accept (compatible: {list(spec.compatible)})"
        )
    if draft.id is None:
        return None
    gated = draft.approval is True or spec.approval
    return PlannedStep(draft.id, str(tool), dict(args), draft.group, bool(deferred), kwargs, gated, str(version))


def call_args(
    spec: ToolSpec, args: Mapping[str, Any], keyring: SecretKeyring | None, *, what: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Return the arguments of one call as stored (JSON, secrets encrypted), once `execute` would accept them, and
    `execute`'s kwargs when they are those of the stored arguments (else None: validated from the record).

    Raise `pydantic.ValidationError` for bad arguments, `ResultNotStorableError` for values that are not JSON,
    `SecretKeyError` for a secret this executor has no key to encrypt.
    """
    if not spec.secrets and stored_as_is(args):
        # JSON scalars every store keeps (no secret among them): stored as they are, validated once.
        return dict(args), spec.validate_args(args)
    plain = _unwrapped(args, spec.name)
    spec.validate_args(plain)
    stored = to_json_value(plain, what="the arguments", tool_name=spec.name)
    return dict(conceal(stored, spec.secrets, keyring, what=what)), None


def stored_as_is(args: Any) -> bool:
    """Tell whether a call's `args` are stored as they are: a dict of ASCII names to JSON scalars that storing
    leaves unchanged (ASCII text without NUL, 64-bit integers, finite floats, booleans, None), well within the size
    one stored value may take. Anything else is converted (`to_json_value`), and checked there."""
    if type(args) is not dict:
        return False
    chars = 0
    for name, value in args.items():
        taken = _as_is_chars(value)
        if taken < 0 or type(name) is not str or not name.isascii() or "\x00" in name:
            return False
        chars += taken + len(name)
    return chars <= _AS_IS_CHARS


# What `stored_as_is` takes: its JSON fits the bound of one stored value whatever it holds.
_AS_IS_CHARS = MAX_JSON_BYTES // 6


def _as_is_chars(value: Any) -> int:
    """Return the characters an argument's value counts toward `_AS_IS_CHARS` when storing leaves it as it is (a
    JSON scalar: ASCII text without NUL, a 64-bit integer, a finite float, a boolean, None), else -1."""
    kind = type(value)
    if kind is str:
        return len(value) + 32 if value.isascii() and "\x00" not in value else -1
    if kind is int:
        return 32 if MIN_JSON_INT <= value <= MAX_JSON_INT else -1
    if kind is float:
        return 32 if value - value == 0.0 else -1  # NaN and infinities are stored as null
    return 32 if value is None or kind is bool else -1  # (32: quotes, separators, a number's digits)


def stored_kwargs(spec: ToolSpec, args: Any) -> dict[str, Any] | None:
    """Return `spec.validate_args(args)` when `args` are `stored_as_is` and the tool's plain fields take each as it
    is (`plain_kwargs`), both checked in one walk; else None (the caller checks them the long way: its errors)."""
    plain = spec.plain
    if plain is None or type(args) is not dict:
        return None
    given, fields = len(args), len(plain)
    if given > fields:
        return None
    chars = 0
    for name, value in args.items():
        taken = plain.get(name)
        kind = type(value)
        # (`_as_is_chars`, its integer case written out: a frame less an argument)
        size = (32 if MIN_JSON_INT <= value <= MAX_JSON_INT else -1) if kind is int else _as_is_chars(value)
        if (
            taken is None
            or size < 0
            or (taken[0] is not None and kind not in taken[0])
            or not name.isascii()
            or "\x00" in name
        ):
            return None
        chars += size + len(name)
    if chars > _AS_IS_CHARS:
        return None
    if given == fields:
        return dict(args)
    return plain_kwargs(plain, args)  # (the defaults of the fields not given)


def _check_rules(plan: Plan, registry: ToolRegistry, policy: PlanPolicy | None, problems: list[str]) -> None:
    last = len(plan.groups) - 1
    steps = plan.steps
    for step in steps:
        if step.tool_name not in registry:
            continue
        spec = registry.get(step.tool_name)
        if spec.irreversible and step.group != last:
            problems.append(
                f"step {step.step_id!r}: tool {step.tool_name!r} is irreversible and may only stand in the plan's "
                f"last group (it is in group {step.group} of {last + 1})"
            )
        if policy is None:
            continue
        if policy.needs_approval(step.tool_name):
            step.approval = True  # recorded in the plan: recovery and approve() know it without the policy
        if policy.allowed_tools is not None and step.tool_name not in policy.allowed_tools:
            problems.append(f"step {step.step_id!r}: tool {step.tool_name!r} is not allowed by the plan policy")
        if policy.require_compensation and not spec.has_compensate and not spec.irreversible:
            problems.append(
                f"step {step.step_id!r}: tool {step.tool_name!r} has no compensate(), and the plan policy requires "
                "every step to be undoable (mark truly irreversible tools irreversible=True)"
            )
    if policy is None:
        return
    if policy.max_steps is not None and len(steps) > policy.max_steps:
        problems.append(f"the plan has {len(steps)} steps; the policy allows at most {policy.max_steps}")
    if policy.max_group_size is not None:
        for g, group in enumerate(plan.groups):
            if len(group) > policy.max_group_size:
                problems.append(
                    f"group {g} has {len(group)} steps; the policy allows at most {policy.max_group_size} per group"
                )


_SCALARS = frozenset({str, int, bool, float, type(None)})
_STR = frozenset({str})


def _plain(args: dict[str, Any]) -> bool:
    """Tell whether `args` maps plain names to JSON scalars every store keeps: its own JSON value, no `$ref`.

    Text without NUL and integers of 64 bits (the rule of `to_json_value`); a lone surrogate is found when the plan
    is encoded; NaN and infinities (stored as null) are not plain.
    """
    if not _STR.issuperset(map(type, args)):
        return False
    kinds = set(map(type, args.values()))
    if not kinds <= _SCALARS:
        return False
    if any("\x00" in name for name in args):
        return False
    for value in args.values():
        kind = type(value)
        if kind is str:
            if "\x00" in value:
                return False
        elif kind is int:
            if not MIN_JSON_INT <= value <= MAX_JSON_INT:
                return False
        elif kind is float and value - value != 0.0:  # x - x is 0.0 for finite x only
            return False
    return True


def _fast_plan(raw: Any, registry: ToolRegistry, policy: PlanPolicy | None) -> Plan | None:
    """Return the plan of a valid `raw` written plainly, in one walk; None for anything else.

    Plainly: a list of step dicts (or `Step`s) and lists of them, no join groups. This path only accepts: at the
    first doubt (a problem, an unusual type, a join, a generated id that meets a given one) it returns None, and
    `build_plan`'s full walk, the one place problems are worded, checks the plan from the start. A plain step
    skips `to_json_value`, the `$ref` search and the draft bookkeeping (its arguments are JSON scalars already);
    any other step goes through `_check_step` once every id is known, as in the full walk.
    """
    if (type(raw) is not list and type(raw) is not tuple) or not raw:
        return None
    if policy is not None and policy.approval_required:
        return None  # the full walk marks the steps the policy gates
    group_of: dict[str, int] = {}
    groups: list[list[Any]] = []
    later: list[tuple[int, int]] = []  # (group, index) of the steps `_check_step` checks
    last = len(raw) - 1
    find = registry.find
    for g, item in enumerate(raw):
        kind = type(item)
        if kind is dict or kind is Step:
            members: Any = (item,)
        elif (kind is list or kind is tuple) and item:
            members = item
        else:
            return None
        planned: list[Any] = []
        for i, member in enumerate(members):
            kind = type(member)
            if kind is dict:
                if (
                    "tool" not in member
                    or "approval" in member
                    or "version" in member
                    or not _STEP_KEYS.issuperset(member)
                ):
                    return None  # (a step marked for approval: the full walk records it)
                tool, args, step_id = member["tool"], member.get("args", {}), member.get("id")
            elif kind is Step:
                if member.approval:
                    return None
                tool, args, step_id = member.tool, member.args, member.id
            else:
                return None
            if type(tool) is not str or type(args) is not dict:
                return None
            if step_id is None:
                # The full walk's id; it differs only when a given id takes it, which sends the plan there.
                step_id = f"{tool}-{g}-{i}"
            elif type(step_id) is not str or "." in step_id or not valid_id(step_id):
                return None
            if step_id in group_of:
                return None
            group_of[step_id] = g
            spec = None if tool in BUILTIN_TOOLS else find(tool)  # (a built-in one: the full walk refuses it)
            if spec is None or spec.secrets or spec.approval or (spec.irreversible and g != last):
                return None  # (a tool with secrets or gated by a person: the full walk encrypts, records them)
            if _plain(args):
                kwargs = spec.valid_args(args)
                if kwargs is None:
                    return None
                planned.append(PlannedStep(step_id, tool, dict(args), g, False, kwargs, False, spec.version))
            else:
                later.append((g, len(planned)))
                planned.append(_Draft(g, i, tool, args, step_id))
        groups.append(planned)
    for g, index in later:
        problems: list[str] = []
        step = _check_step(groups[g][index], registry, group_of, problems, [])
        if problems or step is None:
            return None
        groups[g][index] = step
    plan = Plan(tuple(map(tuple, groups)))
    if policy is not None:
        problems = []
        _check_rules(plan, registry, policy, problems)
        if problems:
            return None
    try:
        encoded = plan.encoded
    except UnicodeEncodeError:  # text a database cannot store: the full walk says where
        return None
    if len(encoded) > MAX_JSON_BYTES:  # too large to store: the full walk says how large
        return None
    return plan


def _full_plan(
    raw: Any, registry: ToolRegistry, policy: PlanPolicy | None, keyring: SecretKeyring | None = None
) -> Plan:
    """Return the validated plan of `raw`, read and checked in full; raise `PlanValidationError` if it is not."""
    problems: list[str] = []
    drafts, joins = _read_groups(raw, problems)
    _check_ids(drafts, problems)
    group_of = {d.id: d.group for group in drafts for d in group if d.id is not None}
    for g, join in enumerate(joins):
        if join.id is None:
            continue
        if join.id in group_of:
            problems.append(f"group {g}: id {join.id!r} is already the id of a step or group; ids are unique")
        group_of[join.id] = g
    unknown: list[str] = []
    groups = []
    for group in drafts:
        planned = []
        for draft in group:
            step = _check_step(draft, registry, group_of, problems, unknown, keyring)
            if step is not None:
                planned.append(step)
        groups.append(tuple(planned))
    plan = Plan(tuple(groups), tuple(joins) if any(join != _ALL for join in joins) else ())
    _check_rules(plan, registry, policy, problems)
    try:
        # Computed once here: a plan a database cannot store is refused now.
        encoded = plan.encoded
    except UnicodeEncodeError:
        problems.extend(
            f"step {step.step_id!r}: the arguments hold text that is not valid Unicode (a lone surrogate)"
            for step in plan.steps
            if not _utf8(canonical_json(step.args))
        )
    else:
        if len(encoded) > MAX_JSON_BYTES:
            problems.append(
                f"the plan's JSON takes {len(encoded) / 1e6:.1f} MB, more than the {MAX_JSON_BYTES / 1e6:g} MB a "
                "stored plan may take; keep large data elsewhere and pass a reference to it"
            )
    if problems:
        raise (UnknownToolError if unknown else PlanValidationError)(problems)
    return plan


def has_refs(step: PlannedStep) -> bool:
    """Tell whether a step's arguments hold any `$ref`."""
    if step.refs is not None:
        return step.refs
    return any(next(find_refs(value), None) is not None for value in step.args.values())
