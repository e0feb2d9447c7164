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


# -- the engine's shape, and the front doors on top of it ----------------------------------------------------------

ENGINE = PACKAGE / "_engine"
# Front doors: everything on top of the engine. Each may use the layers below it, never another's private parts.
FRONT_DOORS = [PACKAGE / "_executor.py", PACKAGE / "_admin.py", PACKAGE / "_planner.py", PACKAGE / "_dynamic.py"]
FRONT_DOORS += [PACKAGE / "_schedules.py", PACKAGE / "_starting.py", PACKAGE / "_published.py"]
FRONT_DOORS += [PACKAGE / "stores.py"]  # what a store of your own is written with
FRONT_DOORS += sorted((PACKAGE / "_llm").glob("*.py"))
FRONT_DOORS += sorted((PACKAGE / "_cli").glob("*.py")) + sorted((PACKAGE / "integrations").glob("*.py"))
FRONT_DOORS += sorted((PACKAGE / "_console").glob("*.py"))


def _module_of(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def test_no_engine_class_inherits_from_another_engine_class() -> None:
    """The engine's pieces are composed, never stacked: no class derives from a class defined in the engine."""
    defined: set[str] = set()
    bases: list[tuple[str, str, str]] = []
    for path in ENGINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                defined.add(node.name)
                bases.extend((path.name, node.name, ast.unparse(base)) for base in node.bases)
    stacked = [f"{file}: {name}({base})" for file, name, base in bases if base.split(".")[-1] in defined]
    assert not stacked, stacked


def _status_assignments(path: Path) -> list[str]:
    """Return the places in a source file that set a status: `x.status = ...` or `status=...` in a call."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(item, ast.Attribute) and item.attr == "status":
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "status" and "Status." in ast.unparse(keyword.value):
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_front_doors_assign_no_status() -> None:
    """Only the engine changes a saga's or a step's status (through its transition table); front doors never do."""
    found = [line for path in FRONT_DOORS for line in _status_assignments(path)]
    assert not found, "\n".join(found)


def test_the_status_guard_sees_an_assignment(tmp_path: Path) -> None:
    """The guard above finds the assignments it forbids (a guard that cannot fail guards nothing)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "row.status = StepStatus.FAILED\nrow.status, row.error = x, y\nSagaRow(status=SagaStatus.RUNNING)\n"
    )
    assert len(_status_assignments(sample)) == 3


def _private_defined(path: Path) -> set[str]:
    """Return the private names a module defines: functions, classes, and attributes it assigns."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {name for name in names if name.startswith("_")}


# Public names of the standard library that start with an underscore.
_STDLIB_PUBLIC = frozenset({"os._exit"})


def test_front_doors_use_no_private_member_of_another() -> None:
    """A front door reads only its own private members (`x._y` for a `_y` it defines), never another's."""
    found = []
    for path in FRONT_DOORS:
        own = _private_defined(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            if node.attr not in own and ast.unparse(node) not in _STDLIB_PUBLIC:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("saga_runtime"):
                private = [
                    a.name for a in node.names if a.name.startswith("_") and not node.module.endswith("._engine")
                ]
                if private and layer_of(node.module) in {"_executor", "_dynamic", "_llm", "_cli"}:
                    own_package = layer_of(_module_of(path)) == layer_of(node.module)
                    if not own_package:
                        found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: imports {private}")
    assert not found, "\n".join(found)


def test_front_doors_import_each_other_without_a_cycle() -> None:
    """The front doors' imports of each other (type-only ones too) form no cycle: the dynamic saga does not
    depend on the executor that hands it out."""
    doors = {_module_of(path): path for path in FRONT_DOORS}
    layer_names = {layer_of(name) for name in doors}
    graph = {
        name: {layer for module in imports_of(path) if (layer := layer_of(module)) in layer_names} - {layer_of(name)}
        for name, path in doors.items()
    }
    by_layer: dict[str | None, set[str | None]] = {}
    for name, targets in graph.items():
        by_layer.setdefault(layer_of(name), set()).update(targets)

    def reaches(start: str | None, goal: str | None, seen: set[str | None]) -> bool:
        for nxt in by_layer.get(start, set()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted(str(layer) for layer in by_layer if reaches(layer, layer, set()))
    assert not cycles, f"front doors in an import cycle: {cycles}"


def _module_graph() -> dict[str, set[str]]:
    """Return each module of the package with the package modules it imports (lazy and type-only ones too)."""
    paths = {_module_of(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("saga_runtime"):
                # `from package import module` imports that module; `from module import name` the module itself.
                subs = {f"{node.module}.{alias.name}" for alias in node.names} & paths.keys()
                targets |= subs or {node.module}
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names if alias.name.startswith("saga_runtime")}
        graph[name] = (targets & paths.keys()) - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return one cycle through each strongly connected group of modules that import one another."""
    found, done = [], set()
    for start in sorted(graph):
        if start in done:
            continue
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen = {start}
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append([*path, start])
                    done.update(path)
                    stack.clear()
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return found


def test_no_module_of_the_package_is_in_an_import_cycle() -> None:
    """No module imports, through any chain of imports, a module that imports it back (the CLI's did)."""
    cycles = [" -> ".join(cycle) for cycle in _cycles(_module_graph())]
    assert not cycles, "\n".join(cycles)


def test_the_cycle_guard_sees_a_cycle() -> None:
    """The guard above finds a cycle of two modules importing each other, and none in a chain."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b", "a"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# The example store of your own (docs/how-to/custom-store.md): written as a user writes a store.
STORE_OF_YOUR_OWN = PACKAGE / "examples" / "dict_store.py"


def private_imports(path: Path) -> list[str]:
    """Return the package modules a source file imports that a user could not: any with a private part."""
    return sorted(module for module in imports_of(path) if any(p.startswith("_") for p in module.split(".")))


def test_the_example_store_imports_public_modules_only() -> None:
    """The example store of your own needs only public names: the package root and saga_runtime.stores."""
    assert private_imports(STORE_OF_YOUR_OWN) == []
    assert "saga_runtime.stores" in imports_of(STORE_OF_YOUR_OWN)


def test_the_private_import_guard_sees_a_private_import(tmp_path: Path) -> None:
    """The guard above finds imports of private modules, and lets public ones pass."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from saga_runtime._records import SagaRow\nimport saga_runtime._storage._sealing\n"
        "from saga_runtime.stores import StoreBase\nfrom saga_runtime import SagaExecutor\n"
    )
    assert private_imports(sample) == ["saga_runtime._records", "saga_runtime._storage._sealing"]
