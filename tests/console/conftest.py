"""Fixtures of the console tests: the example store, filled once per module, copied for each test; headless Chromium.

The browser is the system's Chromium (Debian's `chromium` package), never one Playwright downloads. Without it the
browser tests skip saying how to install it; under CI=true they fail, so CI never passes without running them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium import chromium_path
from conftest import run_sync
from console_helpers import copy_store, fill

CHROMIUM_HINT = "install Chromium to run the console's browser tests: apt-get install chromium"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Yield a headless Chromium for the module's tests."""
    path = chromium_path(CHROMIUM_HINT)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """Yield a fresh browser page (its own cookies), patient enough for a loaded machine."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    opened = context.new_page()
    yield opened
    context.close()


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
