"""The planning layer as the front doors hand it down: plans built from stored sagas, `$ref`s resolved, replays,
and saga functions' code run over their records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from saga_runtime._dynamic import DynamicSaga
from saga_runtime._engine import CallBody, CallDriver, SagaEngine
from saga_runtime._exceptions import PlanValidationError, ReplayDivergenceError
from saga_runtime._planning import Plan, PlannedStep, build_plan, check_plan_record, has_refs, resolve_refs
from saga_runtime._records import SagaResult, SagaRow, SecretKeyring, function_of, result_from_rows, to_json_value
from saga_runtime._storage import SagaStore
from saga_runtime._tools import ToolRegistry

__all__ = ["RegistryPlanner", "replay"]


async def replay(store: SagaStore, saga_id: str) -> SagaResult:
    """Rebuild a recorded saga from its records, calling no tool; raise `ReplayDivergenceError` if they disagree."""
    stored = await store.load_saga(saga_id)
    if stored is None:
        raise ReplayDivergenceError(f"saga {saga_id!r} is not in {store.url}", saga_id=saga_id)
    saga, rows = stored
    if saga.kind == "plan":
        check_plan_record(saga, rows)
    return result_from_rows(saga, rows)


class RegistryPlanner:
    """Build and resolve plans against one registry's tools, opening secrets with one keyring."""

    __slots__ = ("keyring", "registry")

    def __init__(self, registry: ToolRegistry, keyring: SecretKeyring | None) -> None:
        self.registry = registry
        self.keyring = keyring

    def build(self, raw: Any) -> Plan:
        """Return the validated plan of a stored saga; raise `PlanValidationError`."""
        return build_plan(raw, self.registry, keyring=self.keyring)

    def refs(self, step: PlannedStep) -> bool:
        """Tell whether a step's arguments hold a `$ref`."""
        return has_refs(step)

    def resolve(self, step: PlannedStep, lookup: Callable[[str], Any]) -> Any:
        """Return a step's arguments with each `$ref` resolved (`RefError`, a ValueError, if one cannot be)."""
        return resolve_refs(step.args, lookup)

    def body(self, saga: SagaRow) -> CallBody | None:
        """Return what runs a saga function's code over its record; None for a saga that is not a function's.

        Raise `PlanValidationError` when this registry lacks the function, or its recorded arguments do not fit.
        """
        found = function_of(saga.plan)
        if found is None:
            return None
        name, version, args = found
        function = self.registry.function(name)
        if function is None or not function.accepts(version):
            have = "none" if function is None else f"version {function.version!r}"
            raise PlanValidationError(
                [f"saga function {name!r} version {version!r} is not in this registry (it has {have})"],
                saga_id=saga.saga_id,
            )
        problems, kwargs = function.check_args(args)
        if kwargs is None:
            raise PlanValidationError(
                [f"saga function {name!r}: {problem}" for problem in problems], saga_id=saga.saga_id
            )

        async def run(driver: CallDriver, engine: SagaEngine) -> object:
            saga = DynamicSaga.running(driver, engine, name)
            output = await function.fn(saga, **kwargs)
            saga.check_all_served()
            return to_json_value(output, what="the return value", tool_name=name)

        return run
