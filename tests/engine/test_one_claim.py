"""One driver, one claim: only the engine's claim context manager takes sagas and owns the set of sagas driven."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "saga_runtime"
CLAIM = PACKAGE / "_engine" / "_claim.py"
SESSION = PACKAGE / "_engine" / "_session.py"
# The store's claims: a front door reaching for one is running its own claim sequence.
STORE_CLAIMS = {"claim_saga", "claim_waiting", "change_saga", "claim_expired"}


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _attributes(path: Path) -> set[str]:
    """Return every attribute name a module reads or writes (`x.name`)."""
    return {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}


def _names(path: Path) -> set[str]:
    """Return every bare name a module uses or imports."""
    tree = ast.parse(path.read_text())
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    return used | imported


def _enters_a_session(path: Path) -> bool:
    """Tell whether a module builds a Session or enters one by hand (`session.enter()`)."""
    for node in ast.walk(ast.parse(path.read_text())):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr == "enter" and "session" in ast.unparse(func.value).lower():
            return True
    return "Session" in _names(path)


def _front_doors() -> list[Path]:
    """Return the modules above the engine and the layers below it."""
    layers = {"_engine", "_storage", "_records", "_planning", "_tools"}
    return [path for path in _sources() if path.relative_to(PACKAGE).parts[0] not in layers]


def test_only_the_claim_context_manager_touches_the_set_of_sagas_driven() -> None:
    """No module but the engine's claim module reads or changes the set of sagas driven (once `active`)."""
    found = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in _sources()
        if path != CLAIM
        for name in sorted(_attributes(path) & {"_driving", "active", "_active"})
    ]
    assert not found, found


def test_only_the_claim_context_manager_opens_a_session() -> None:
    """A session (lease heartbeat and fence) is opened by the claim context manager alone, never by hand."""
    found = [
        str(path.relative_to(PACKAGE))
        for path in _sources()
        if path not in (CLAIM, SESSION) and _enters_a_session(path)
    ]
    assert not found, found


def test_front_doors_run_no_claim_sequence_of_their_own() -> None:
    """Front doors call no store claim and build no engine: they hand the engine plans, calls and decisions."""
    found = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in _front_doors()
        for name in sorted((_attributes(path) & (STORE_CLAIMS | {"engine", "claims"})) | (_names(path) & {"Claims"}))
    ]
    assert not found, found


def test_the_guards_see_the_old_shape(tmp_path: Path) -> None:
    """The guards above flag a front door written the old way (its own claim, session and active set)."""
    old = tmp_path / "old.py"
    old.write_text(
        "from saga_runtime._engine import Session\n"
        "async def go_on(self, saga):\n"
        "    if not await self._claims.claim_waiting(saga):\n"
        "        return None\n"
        "    engine = self._claims.engine(saga, [])\n"
        "    self._session = Session(self._claims, engine)\n"
        "    self._session.enter()\n"
        "    try:\n"
        "        async with Session(self._claims, engine):\n"
        "            return await engine.compensate()\n"
        "    finally:\n"
        "        self._active.discard(saga.saga_id)\n"
    )
    assert "_active" in _attributes(old)
    assert _enters_a_session(old)
    assert {"claim_waiting", "engine"} <= _attributes(old)
