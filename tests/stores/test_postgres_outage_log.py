"""While PostgreSQL cannot be reached, the store logs one WARNING line per outage, not asyncpg's tracebacks."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from saga_runtime import open_store
from saga_runtime._exceptions import StoreError


async def test_an_outage_is_one_warning_line_without_a_traceback(
    postgres_databases: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Connections refused for a while: one saga_runtime WARNING naming the cause, no asyncpg record, no traceback."""
    url = postgres_databases.create()
    name = url.rsplit("/", 1)[1].split("?")[0]
    admin = postgres_databases.admin_url
    store = await open_store(url, min_size=2, max_size=2, retry_for=0.5)
    try:
        with caplog.at_level(logging.WARNING):
            await postgres_databases.execute(
                admin,
                [
                    f"ALTER DATABASE {name} ALLOW_CONNECTIONS false",
                    f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
                ],
            )
            for _ in range(3):
                with pytest.raises(StoreError):
                    await store.list_sagas()
            await asyncio.sleep(3.5)  # asyncpg retries restoring its pool after 1 s, then 2 s
            await postgres_databases.execute(admin, [f"ALTER DATABASE {name} ALLOW_CONNECTIONS true"])
            await store.list_sagas()
        asyncpg_records = [r for r in caplog.records if r.name.startswith("asyncpg")]
        ours = [r for r in caplog.records if r.name == "saga_runtime" and "unreachable" in r.getMessage()]
        assert asyncpg_records == []
        assert len(ours) == 1
        assert ours[0].levelno == logging.WARNING
        assert ours[0].exc_info is None
        assert "\n" not in ours[0].getMessage()
    finally:
        await store.close()
