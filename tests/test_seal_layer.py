"""Rows are sealed in one layer: the stores' (DESIGN.md, "Storage's shape"); the engine only links rows."""

from __future__ import annotations

import ast
from pathlib import Path

from saga_runtime._records import _approvals, _chain

PACKAGE = Path(__file__).resolve().parent.parent / "saga_runtime"

# What computes a seal: the seal functions of the records layer (their format is the record's).
SEALS = {"seal", "seal_all", "seal_saga", "saga_seal", "Sealer", "seal_approval", "Sealing"}
# The example store of your own (docs/how-to/custom-store.md): a store, sealing what it writes through `Sealing`,
# and the public module it imports `Sealing` from (which re-exports it and computes nothing).
STORE_OF_YOUR_OWN = "examples/dict_store.py"
STORES_MODULE = "stores.py"


def seal_uses(source: str) -> list[str]:
    """Return each call of a seal function, and each import of one, in a module's source (line: name)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in SEALS:
                found.append(f"{node.lineno}: calls {name}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{node.lineno}: imports {alias.name}" for alias in node.names if alias.name in SEALS]
    return found


def test_the_seal_names_are_the_records_seal_functions() -> None:
    """The guard's list names every seal function the records layer exports (a new one is guarded too)."""
    exported = {name for name in (*_chain.__all__, *_approvals.__all__) if "seal" in name.lower()}
    assert exported - {"VerifyResult"} <= SEALS, exported - SEALS


def violations_in(paths: list[Path]) -> list[str]:
    """Return every seal call or import in the modules `paths`."""
    return [f"{path.relative_to(PACKAGE.parent)}:{use}" for path in paths for use in seal_uses(path.read_text())]


def test_no_engine_module_computes_a_seal() -> None:
    """No module under saga_runtime/_engine/ calls or imports a seal function: the store seals what it writes."""
    violations = violations_in(sorted((PACKAGE / "_engine").rglob("*.py")))
    assert not violations, "\n".join(violations)


def test_only_records_and_stores_know_the_seal_functions() -> None:
    """Front doors, planning, tools, CLI and console compute no seal either: records define them, stores call them
    (the built-in ones, and the example store of your own, which seals what it writes as every store does)."""
    outside = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in ("_records", "_storage")
        and path.relative_to(PACKAGE).as_posix() not in (STORE_OF_YOUR_OWN, STORES_MODULE)
    ]
    violations = violations_in(outside)
    assert not violations, "\n".join(violations)


def test_the_seal_guard_sees_a_seal() -> None:
    """The guard finds a seal call, a method call of one, and an import of one."""
    source = (
        "from saga_runtime._records import seal_saga\n"
        "seal_saga(row, None)\n"
        "self._sealer.seal(row, link)\n"
        "records.seal_approval(request, link, key)\n"
    )
    assert seal_uses(source) == [
        "1: imports seal_saga",
        "2: calls seal_saga",
        "3: calls seal",
        "4: calls seal_approval",
    ]
    assert seal_uses("journal.link_all()\nrow.prev_hash = identity_hash(previous, saga_id)\n") == []
