"""Finding the system Chromium for the browser tests (the console's and the docs site's)."""

from __future__ import annotations

import os
import shutil

import pytest


def chromium_path(hint: str) -> str:
    """Return the system Chromium; skip with `hint` without it (or without playwright), fail under CI=true."""
    found = os.environ.get("SAGA_RUNTIME_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        found = None
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Chromium (or no playwright) under CI: {hint}; pip install -e '.[dev]'")
        pytest.skip(hint)
    return found
