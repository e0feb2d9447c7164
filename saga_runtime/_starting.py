"""What a front door checks and builds before a saga is stored: its row and steps, from a plan or a saga function.

Every check runs before anything is stored: a refused saga raises with every problem at once, and leaves nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from saga_runtime._engine import Budget, Drives
from saga_runtime._exceptions import PlanValidationError, ResultNotStorableError
from saga_runtime._planning import MAX_ID_BYTES, Plan, build_plan, stored_as_is, valid_id
from saga_runtime._records import (
    Queue,
    QueueEntry,
    SagaRow,
    StepRow,
    idempotency_keys,
    now,
    planned_rows,
    to_json_value,
)
from saga_runtime._tools import SagaFunction, ToolRegistry

__all__ = [
    "check_saga_options",
    "checked_json",
    "child_call",
    "function_saga",
    "new_plan_saga",
    "queue_entry",
    "served_queues",
    "target",
]


def target(registry: ToolRegistry, work: Any, args: Mapping[str, Any] | None) -> SagaFunction | None:
    """Return the saga function `work` names (the function, or its name); None for a plan.

    Raise `TypeError` for `args` with a plan, `PlanValidationError` for a function or name not registered.
    """
    if isinstance(work, str) or callable(work):
        function = registry.function(work)
        if function is None:
            name = work if isinstance(work, str) else getattr(work, "__qualname__", repr(work))
            raise PlanValidationError(
                [
                    f"{name!r} is not a saga function of this registry (registered: "
                    f"{', '.join(registry.function_names()) or 'none'}; register one with @registry.saga), and a "
                    "plan is a list of steps and groups"
                ]
            )
        return function
    if args is not None:
        raise TypeError("args= is for a saga function; a plan's steps carry their own arguments")
    return None


def function_saga(
    drives: Drives,
    function: SagaFunction,
    args: Mapping[str, Any] | None,
    saga_id: str | None,
    budget: Budget | None,
    metadata: Mapping[str, Any] | None,
    *,
    queued: bool = False,
) -> SagaRow:
    """Return the row of a new saga of `function`: its name, version and arguments recorded in place of a plan."""
    problems, stored_metadata = check_saga_options(saga_id, budget, metadata)
    given: dict[str, Any] = {}
    passed: object = args  # callers outside mypy's reach pass anything
    if passed is not None and not isinstance(passed, Mapping):
        problems.append(f"args must be a mapping of the function's arguments, got {type(passed).__name__}")
    elif args is not None:
        given = dict(args)
    stored_args: Any = None
    try:
        # Arguments stored as they are (JSON scalars: the usual case) are their own JSON value.
        stored_args = (
            dict(given) if stored_as_is(given) else to_json_value(given, what="the arguments", tool_name=function.name)
        )
    except ResultNotStorableError as exc:
        problems.append(f"saga function {function.name!r}: {exc}")
    else:
        problems.extend(f"saga function {function.name!r}: {problem}" for problem in function.check_args(given)[0])
    if problems:
        raise PlanValidationError(problems, saga_id=saga_id)
    return drives.new_saga(
        saga_id,
        "dynamic",
        plan={"function": function.name, "version": function.version, "args": stored_args},
        budget=None if budget is None else {**budget.to_json(), "charges": 0},
        metadata=stored_metadata,
        queued=queued,
    )


def new_plan_saga(
    drives: Drives,
    planned: Plan,
    saga_id: str | None,
    budget: Budget | None,
    metadata: Mapping[str, Any] | None,
    *,
    queued: bool = False,
) -> tuple[SagaRow, list[StepRow]]:
    """Return the row and step rows of a new plan saga (not stored)."""
    problems, stored_metadata = check_saga_options(saga_id, budget, metadata)
    if problems:
        raise PlanValidationError(problems, saga_id=saga_id)
    saga = drives.new_saga(
        saga_id,
        "plan",
        plan=planned.to_json(),
        plan_hash=planned.digest,
        budget=None if budget is None else {**budget.to_json(), "charges": 0},
        metadata=stored_metadata,
        queued=queued,
    )
    saga_id = saga.saga_id
    planned_steps = planned.steps
    keys = idempotency_keys(saga_id, planned.step_ids, planned.key_parts)
    # Each row's arguments are the plan's own (a fresh plan's copies, which its stored JSON holds too).
    return saga, planned_rows(saga_id, planned_steps, planned.step_args, keys)


def child_call(
    registry: ToolRegistry,
    function: SagaFunction | None,
    work: Any,
    args: Mapping[str, Any] | None,
    *,
    keyring: Any,
) -> tuple[dict[str, Any], str]:
    """Return a child step's arguments (without its saga id) and its step id's stem: the function's name, or
    "child" for a plan. Raise `PlanValidationError` listing every problem of the function's arguments or the plan.
    """
    if function is None:
        return {"plan": build_plan(work, registry, keyring=keyring).to_json()}, "child"
    given = dict(args or {})
    problems: list[str] = []
    stored: Any = None
    try:
        stored = to_json_value(given, what="the arguments", tool_name=function.name)
    except ResultNotStorableError as exc:
        problems.append(f"saga function {function.name!r}: {exc}")
    else:
        problems.extend(f"saga function {function.name!r}: {problem}" for problem in function.check_args(given)[0])
    if problems:
        raise PlanValidationError(problems)
    return {"function": function.name, "args": stored}, function.name.replace(".", "_")


def check_saga_options(
    saga_id: str | None, budget: Budget | None, metadata: Mapping[str, Any] | None
) -> tuple[list[str], dict[str, Any]]:
    """Return the problems of a saga's id, budget and metadata, and the metadata as stored."""
    problems = []
    if saga_id is not None and not valid_id(saga_id):
        problems.append(
            f"saga_id must be non-empty Unicode text without NUL, of at most {MAX_ID_BYTES} bytes in UTF-8, "
            f"got {saga_id!r}"
        )
    given: object = budget  # callers outside mypy's reach pass anything
    if not isinstance(given, Budget | None):
        problems.append(f"budget must be a Budget, got {type(budget).__name__}")
    stored_metadata: dict[str, Any] = {}
    if metadata is not None:
        try:
            stored_metadata = dict(to_json_value(dict(metadata), what="the metadata", tool_name="(saga)"))
        except (ResultNotStorableError, TypeError, ValueError) as exc:
            problems.append(f"metadata must be a JSON-like mapping: {exc}")
    return problems, stored_metadata


def queue_entry(queue: object, key: object, priority: object, not_before: object) -> QueueEntry:
    """Return where a submitted saga waits; raise on a bad option (before anything is stored)."""
    if not isinstance(queue, str) or not queue or len(queue.encode()) > 255 or "\x00" in queue:
        raise ValueError(f"queue must be a queue name (non-empty text of at most 255 bytes), got {queue!r}")
    if key is not None and (not isinstance(key, str) or not key or len(key.encode()) > 255 or "\x00" in key):
        raise ValueError(f"key must be non-empty text of at most 255 bytes, or None, got {key!r}")
    if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
        raise ValueError(f"priority must be an int >= 0 (lower starts first), got {priority!r}")
    start: datetime | None
    if not_before is None:
        start = None
    elif isinstance(not_before, datetime):
        if not_before.tzinfo is None or not_before.utcoffset() is None:
            raise ValueError(f"not_before must be an aware datetime (with a timezone), got the naive {not_before!r}")
        start = not_before
    elif isinstance(not_before, int | float) and not isinstance(not_before, bool) and math.isfinite(not_before):
        if not_before < 0:
            raise ValueError(f"not_before in seconds from now must be >= 0, got {not_before!r}")
        start = now() + timedelta(seconds=not_before)
    else:
        raise TypeError(f"not_before must be an aware datetime or seconds from now, got {not_before!r}")
    return QueueEntry(queue, key, priority, start)


def served_queues(queues: Sequence[Queue | str] | None) -> list[Queue]:
    """Return the queues a worker serves (`Queue` objects or names), each once; raise on anything else."""
    if queues is None:
        return [Queue("default")]
    if isinstance(queues, str | Queue):
        raise TypeError("queues is a list of Queue objects or names, not one")
    served: dict[str, Queue] = {}
    for queue in queues:
        if isinstance(queue, str):
            queue = Queue(queue)
        if not isinstance(queue, Queue):
            raise TypeError(f"queues holds Queue objects or names, got {type(queue).__name__}")
        if queue.name in served and served[queue.name] != queue:
            raise ValueError(f"queue {queue.name!r} is given twice with different limits")
        served[queue.name] = queue
    if not served:
        raise ValueError("serve() needs at least one queue")
    return list(served.values())


_JSON_SCALARS = (str, int, bool, type(None))


def checked_json(value: Any, path: str = "message") -> Any:
    """Return `value` if it is a JSON value (dicts with str keys, lists, str, finite numbers, bools, None); else
    raise TypeError naming the path of the first part that is not (`message["items"][2]`)."""
    if isinstance(value, _JSON_SCALARS):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{path} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path} has the key {key!r}: JSON object keys are str")
            checked_json(item, f"{path}[{key!r}]")
        return value
    if isinstance(value, list):
        for index, item in enumerate(value):
            checked_json(item, f"{path}[{index}]")
        return value
    raise TypeError(f"{path} is a {type(value).__name__}, not a JSON value (dict, list, str, number, bool, None)")
