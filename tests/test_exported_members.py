"""The public façade: `__all__` and the names the package root really exports agree, and the contract is there."""

import ast
import importlib
import inspect
import itertools
import types

import pytest

import saga_runtime
from saga_runtime import stores

# The names API.md promises at the package root (the list ../shared/tools/check_contract.py checks).
CONTRACT = [
    "ToolRegistry",
    "RetryPolicy",
    "StepContext",
    "Step",
    "SagaExecutor",
    "SagaResult",
    "StepRecord",
    "SagaStatus",
    "StepStatus",
    "open_store",
    "Budget",
    "PlanPolicy",
    "SagaError",
    "PlanValidationError",
    "UnknownToolError",
    "SagaFailedError",
    "IdempotencyConflictError",
    "SagaInProgressError",
    "BudgetExceededError",
    "ReplayDivergenceError",
    "ResultValidationError",
    "StoreError",
    # Human approval (API.md §9).
    "ApprovalRequest",
    "ApprovalError",
    "ApprovalPendingError",
    "ApprovalRejectedError",
    # Operators' actions without tools (API.md §5).
    "SagaAdmin",
    # Queues an operator sees and steers (API.md §19).
    "QueueInfo",
    # Retention (API.md §14).
    "PurgeReport",
    "verify_export",
    # Schedules (API.md §18).
    "Schedule",
]
# The LLM front door's names (plan_from_openai, plan_from_anthropic, LLMRunner, MockLLMClient) join this list
# with the issue that builds it.

# Dunder names that belong in __all__ although they start with "_" (as httpx keeps __version__).
PUBLIC_DUNDERS = {"__version__"}


def public_names() -> set[str]:
    """Return the names the package root defines for users: not private, not modules it merely imported."""
    return {
        name
        for name, value in vars(saga_runtime).items()
        if (not name.startswith("_") or name in PUBLIC_DUNDERS) and not isinstance(value, types.ModuleType)
    }


def test_all_names_are_importable_from_the_root() -> None:
    """Every name in saga_runtime.__all__ is an attribute of the package root."""
    module = importlib.import_module("saga_runtime")
    missing = [name for name in saga_runtime.__all__ if not hasattr(module, name)]
    assert missing == []


def test_all_matches_the_public_names_of_the_root() -> None:
    """The public names the package root defines are exactly __all__: nothing exported by accident or forgotten."""
    assert set(saga_runtime.__all__) == public_names()


def test_all_has_no_duplicates_and_is_sorted() -> None:
    """__all__ lists each name once, sorted, so a diff shows what changed."""
    assert len(saga_runtime.__all__) == len(set(saga_runtime.__all__))
    assert list(saga_runtime.__all__) == sorted(saga_runtime.__all__)


def test_no_module_leaks_as_a_public_name_of_the_root() -> None:
    """The package root exposes no imported module under a public name (saga_runtime.logging, ...)."""
    leaked = sorted(
        name
        for name, value in vars(saga_runtime).items()
        if not name.startswith("_")
        and isinstance(value, types.ModuleType)
        and value.__name__ != f"saga_runtime.{name}"  # the package's own public submodules (otel, testing)
    )
    assert leaked == []


def test_star_import_gives_exactly_all() -> None:
    """`from saga_runtime import *` binds every name of __all__ and no other."""
    namespace: dict[str, object] = {}
    exec("from saga_runtime import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == set(saga_runtime.__all__)


@pytest.mark.parametrize("name", CONTRACT)
def test_contract_name_is_exported(name: str) -> None:
    """Each name API.md promises is importable from the root and listed in __all__."""
    assert hasattr(saga_runtime, name)
    assert name in saga_runtime.__all__


def test_every_exported_error_derives_from_saga_error() -> None:
    """Every exception class the root exports is a SagaError; UnknownToolError is a PlanValidationError."""
    errors = [
        value
        for value in (getattr(saga_runtime, name) for name in saga_runtime.__all__)
        if isinstance(value, type) and issubclass(value, BaseException)
    ]
    assert len(errors) >= 10
    assert all(issubclass(error, saga_runtime.SagaError) for error in errors)
    assert issubclass(saga_runtime.UnknownToolError, saga_runtime.PlanValidationError)


def test_version_is_a_string() -> None:
    """saga_runtime.__version__ is a version string."""
    assert isinstance(saga_runtime.__version__, str)
    assert saga_runtime.__version__.count(".") >= 1


# -- saga_runtime.stores: what a store of your own is written with -------------------------------------------------


def _attribute_docstrings(module: types.ModuleType) -> dict[str, str]:
    """Return the names a module assigns at its top level followed by a string (a docstring the reference shows)."""
    body = ast.parse(inspect.getsource(module)).body
    return {
        target.id: after.value.value
        for node, after in itertools.pairwise(body)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
        and isinstance(after, ast.Expr)
        and isinstance(after.value, ast.Constant)
        and isinstance(after.value.value, str)
    }


def test_the_stores_module_exports_exactly_its_public_names() -> None:
    """saga_runtime.stores' __all__ is sorted, once each, and exactly the public names it binds (no module)."""
    public = {
        name
        for name, value in vars(stores).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert list(stores.__all__) == sorted(set(stores.__all__))
    assert set(stores.__all__) == public
    assert not [name for name in stores.__all__ if name.startswith("_")]


def test_every_name_of_the_stores_module_has_a_docstring() -> None:
    """Each name saga_runtime.stores exports is documented: a class or function by its own docstring, a type
    alias by the docstring that follows it in the module (what the reference page shows)."""
    aliases = _attribute_docstrings(stores)

    def documented(name: str) -> bool:
        value = getattr(stores, name)
        if isinstance(value, type) or inspect.isfunction(value):
            return bool((inspect.getdoc(value) or "").strip())
        return bool(aliases.get(name, "").strip())

    undocumented = [name for name in stores.__all__ if not documented(name)]
    assert undocumented == []


def test_the_stores_module_holds_what_a_store_of_your_own_needs() -> None:
    """The core protocol, the rows, the status enum, the base class, the sealing helper and the clock are public
    there, and they are the objects the engine uses (no copies)."""
    from saga_runtime._records import SagaRow, StepRow
    from saga_runtime._storage import SagaStore

    assert stores.SagaStore is SagaStore
    assert (stores.SagaRow, stores.StepRow) == (SagaRow, StepRow)
    assert stores.SagaStatus is saga_runtime.SagaStatus
    assert stores.StepStatus is saga_runtime.StepStatus
    assert stores.now().tzinfo is not None
    assert stores.Sealing().key is None
    assert stores.StoreBase.capabilities == frozenset()
