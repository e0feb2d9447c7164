"""build_plan: a plan validated, encoded and hashed once per content, however many sagas run it."""

from __future__ import annotations

import contextlib
import marshal
from dataclasses import dataclass
from typing import Any

from saga_runtime._planning._plan import Plan, _fast_plan, _full_plan
from saga_runtime._planning._policy import PlanPolicy
from saga_runtime._records import SecretKeyring, plan_digest, remember_plan_digest
from saga_runtime._tools import ToolRegistry, ToolSpec

__all__ = ["build_plan"]

# Plans a registry built lately (kept on it), by content. A plan is a list of dicts its caller may change between
# runs, so it is keyed by its marshal bytes, never by id(): marshal writes exact builtin types only, each distinctly
# (1, 1.0 and True; the keys 1 and "1"), and refuses anything else, so equal bytes mean equal plans.
_KEPT = 128  # plans per registry
_LARGEST = 64 * 1024  # marshal bytes: a larger plan is built each time


@dataclass(frozen=True, slots=True)
class _Built:
    plan: Plan  # kept apart: sagas get copies of their own
    specs: tuple[ToolSpec, ...]  # the plan's tools (each once), still the registry's when reused
    seal_digest: str  # the digest a saga row's seal takes of the plan's JSON


def build_plan(
    raw: Any, registry: ToolRegistry, *, policy: PlanPolicy | None = None, keyring: SecretKeyring | None = None
) -> Plan:
    """Return the validated plan of `raw`; raise `PlanValidationError` listing every problem found.

    Secret arguments are encrypted with `keyring` in the plan (and opened, where a stored plan holds them, to be
    validated); a plan holding a secret without a keyring is refused, saying how to configure a key.
    """
    key = _key(raw, policy)
    kept: dict[tuple[bytes, PlanPolicy | None], _Built] = registry._built_plans
    if key is not None:
        found = kept.get(key)
        if found is not None and all(registry.find(spec.name) is spec for spec in found.specs):
            return _reused(found)
    plan = _fast_plan(raw, registry, policy)
    if plan is None:
        return _full_plan(raw, registry, policy, keyring)
    if key is not None and plan.reusable:
        if len(kept) >= _KEPT:
            with contextlib.suppress(StopIteration, KeyError, RuntimeError):  # (another thread took it)
                del kept[next(iter(kept))]  # the oldest out
        template = plan.fresh()
        specs = tuple(
            {step.tool_name: registry.get(step.tool_name) for group in plan.groups for step in group}.values()
        )
        built = kept[key] = _Built(template, specs, plan_digest(template.to_json()))
        return _reused(built)
    return plan


def _key(raw: Any, policy: PlanPolicy | None) -> tuple[bytes, PlanPolicy | None] | None:
    """Return the content key of a plan, or None for one that is not plain data or too large to keep."""
    if type(raw) is not list and type(raw) is not tuple:
        return None
    try:
        # Version 2: no back-references, whose use depends on reference counts rather than on content.
        content = marshal.dumps(raw, 2)
        hash(policy)
    except (ValueError, TypeError):  # a Step, a model, any object (or a policy of its own): built each time
        return None
    return None if len(content) > _LARGEST else (content, policy)


def _reused(built: _Built) -> Plan:
    # A saga's stored JSON is its own too (a store may hand it out): its digest is noted for its seals.
    plan = built.plan.fresh()
    remember_plan_digest(plan.to_json(), built.seal_digest)
    return plan
