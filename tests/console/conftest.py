"""Fixtures of the console tests: the example store, filled once per module, copied for each test."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_sync
from console_helpers import copy_store, fill


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a SQLite file holding the example's sagas (each test works on a copy)."""
    path = tmp_path_factory.mktemp("console") / "template.db"
    run_sync(lambda: fill(f"sqlite:///{path}"))
    return path


@pytest.fixture
def url(template: Path, tmp_path: Path) -> str:
    """Return the URL of a fresh copy of the template store."""
    return copy_store(template, tmp_path)
