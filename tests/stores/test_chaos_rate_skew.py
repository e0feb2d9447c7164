"""Issue 35's queue chaos: worker processes SIGKILLed and SIGTERMed under load, one of them 0.8 s ahead.

Three `saga-runtime worker` processes serve a queue with concurrency=10, key_concurrency=1 and a rate limit of 4
starts a second; the third runs under libfaketime, its wall clock 0.8 s ahead. Sagas come in waves with quiet
gaps, as an application's bursts do: judging the rate window by its own clock, the skewed worker counts none of
the starts the others made 0.2 s before, and starts a second batch right after theirs. The judge is the outside
ledger the tools write (see chaos_fleet): every saga ends as its plan says, no effect twice, the limits held, the
rate limit included.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from .chaos_fleet import KEYS, QUEUE, Fleet, check, plan_of, saga_id, submitter, wait_terminal
from .conftest import Stores

# About 25 s per database on 2 busy cores; the bound is for a machine shared with other test runs.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

WAVES, WAVE = 5, 8  # sagas come in 5 waves of 8
GAP = 2.5  # seconds between waves: longer than the rate window and the skew, so every worker may start some
RATE = (4, 1.0)
SKEW = 0.8  # seconds the third worker's wall clock runs ahead


@pytest.mark.parametrize("kind", ["postgresql", "mysql"])
async def test_killed_stopped_and_skewed_workers_keep_every_limit(stores: Stores, kind: str, tmp_path: Path) -> None:
    """SIGKILL, SIGTERM and a skewed clock under load: nothing lost or doubled, the limits and the rate held."""
    if shutil.which("faketime") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("faketime is not installed (Debian: apt-get install faketime)")
        pytest.skip("faketime is not installed (Debian: apt-get install faketime)")
    store = await stores.open(kind, wipe=True)
    executor = submitter(store)
    fleet = Fleet(tmp_path, stores.url(kind), concurrency=10, rate=RATE)
    try:
        fleet.start(0)
        fleet.start(1)
        fleet.start(2, skew=SKEW)
        for slot in range(3):
            await asyncio.to_thread(fleet.serving, slot)
        for wave in range(WAVES):
            for i in range(wave * WAVE, (wave + 1) * WAVE):
                await executor.submit(plan_of(i), saga_id=saga_id(i), queue=QUEUE, key=f"k{i % KEYS}")
            await asyncio.sleep(GAP / 2)
            if wave < 4:  # mid-wave, a blow to worker 0 or 1, then its replacement
                slot = wave % 2
                if wave < 2:
                    await asyncio.to_thread(fleet.kill, slot)  # its sagas are orphans until their leases run out
                else:
                    await asyncio.to_thread(fleet.terminate, slot)  # a deploy: calls return, sagas released
                fleet.start(slot)
            await asyncio.sleep(GAP / 2)
        statuses = await wait_terminal(store, WAVES * WAVE, 60)
    finally:
        fleet.stop_all()
    print("\n" + await check(fleet, store, WAVES * WAVE, statuses))
