"""Shared fixtures of the integration tests."""

from __future__ import annotations

import pytest
from shop_tools import Ledger


@pytest.fixture
def ledger() -> Ledger:
    """Return a fresh ledger for the shop tools."""
    return Ledger()
