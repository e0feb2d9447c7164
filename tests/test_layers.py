"""The layout is the architecture: no module imports a layer above its own (DESIGN.md)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "saga_runtime"

# What each private layer may import from the package, besides itself. Front doors (the executor, the façade,
# and later the LLM and CLI modules) sit on top and may import any layer.
ALLOWED = {
    "_exceptions": set(),
    "_tools": {"_exceptions"},
    "_records": {"_exceptions"},
    "_storage": {"_records", "_exceptions"},
    "_planning": {"_tools", "_records", "_exceptions"},
    "_engine": {"_tools", "_records", "_storage", "_exceptions"},
}


def layer_of(module: str) -> str | None:
    """Return the layer a dotted saga_runtime module name belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "saga_runtime" else None


def imports_of(path: Path) -> set[str]:
    """Return the saga_runtime modules a source file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("saga_runtime"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("saga_runtime"))
    return found


def test_no_layer_imports_upward() -> None:
    """Tools, records, storage, planning and the engine import only the layers below them."""
    violations = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        own = layer_of(".".join(relative.parts))
        if own not in ALLOWED:
            continue
        for module in imports_of(path):
            other = layer_of(module)
            if other is not None and other != own and other not in ALLOWED[own]:
                violations.append(f"{relative}: imports {module}")
    assert not violations, "\n".join(violations)


def test_stores_and_tools_do_not_know_each_other() -> None:
    """No storage module mentions the tools layer and no tools module mentions storage."""
    for path in (PACKAGE / "_storage").rglob("*.py"):
        assert not any(m.startswith("saga_runtime._tools") for m in imports_of(path)), path
    for path in (PACKAGE / "_tools").rglob("*.py"):
        assert not any(m.startswith("saga_runtime._storage") for m in imports_of(path)), path
