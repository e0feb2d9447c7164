"""Issue 25's chaos: 4 workers, SIGKILLed and SIGINTed in turn and replaced, over ~100 queued sagas.

It ends with no saga PARKED and every effect once per key, judged from the tools' outside ledger (see
chaos_fleet), on SQLite and MariaDB.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from .chaos_fleet import Fleet, check, schedule, submit_all, wait_terminal
from .conftest import Stores

# About 30 s on 2 busy cores; the bound is for a machine shared with other test runs.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SAGAS = 100
WORKERS = 4
SEED = 25


@pytest.mark.parametrize("kind", ["sqlite", "mysql"])
async def test_four_workers_killed_and_stopped_park_nothing(stores: Stores, kind: str, tmp_path: Path) -> None:
    """With workers SIGKILLed and SIGINTed mid-load, every saga ends, none PARKED, each effect once per key."""
    store = await stores.open(kind, wipe=True)
    await submit_all(store, SAGAS)
    fleet = Fleet(tmp_path, stores.url(kind), concurrency=8)
    rng = random.Random(SEED)
    try:
        for slot in range(WORKERS):
            fleet.start(slot)
        for blow, pause in enumerate(schedule(SEED, 6, 0.6, 1.2)):
            await asyncio.sleep(pause)
            slot = rng.randrange(WORKERS)
            if blow % 2:
                await asyncio.to_thread(fleet.interrupt, slot)  # a deploy: it lets its calls return, releases
            else:
                await asyncio.to_thread(fleet.kill, slot)
            fleet.start(slot)  # its replacement
        statuses = await wait_terminal(store, SAGAS, 45)
    finally:
        fleet.stop_all()
    print("\n" + await check(fleet, store, SAGAS, statuses))
