"""An archive line is whole or absent: a purge killed mid-append loses no saga to the next purge's first line.

The first purge runs in another process whose file size limit (RLIMIT_FSIZE) falls a few lines into its archive:
the kernel kills it (SIGXFSZ) in the middle of the append, as a SIGKILL or a power cut would, leaving a torn last
line. The next purge must not glue its first export to that tail: every saga it purged reads back whole from the
archive, and `saga-runtime verify --file` passes them all.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from saga_runtime import SagaExecutor, SagaStatus, StepContext, ToolRegistry, verify_export

from .conftest import Stores

SAGAS = 12
LIMIT = 5000  # bytes the killed purge may write: a few lines in (each line is about 1.5 KB)

PURGE = textwrap.dedent(
    """
    import asyncio, signal, sys
    from saga_runtime import open_store

    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; let the kernel kill us mid-write

    async def main() -> None:
        async with open_store(sys.argv[1]) as store:
            await store.purge(older_than=0, archive=sys.argv[2])

    asyncio.run(main())
    """
)


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    class Note:
        async def execute(self, text: str, ctx: StepContext) -> str:
            return text

        async def compensate(self, result: str) -> None:
            return None

    return registry


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.mark.parametrize("kind", ["postgresql"])
async def test_a_purge_killed_mid_append_leaves_no_saga_unreadable(stores: Stores, kind: str, tmp_path: Path) -> None:
    """After a purge killed mid-line, the next purge cuts the torn tail: each saga it purged reads back whole."""
    store = await stores.open(kind, wipe=True)
    executor = SagaExecutor(_registry(), store)
    for n in range(SAGAS):
        plan = [{"id": "note", "tool": "Note", "args": {"text": f"{n}:" + "x" * 400}}]
        assert (await executor.run(plan, saga_id=f"old-{n:02d}")).status is SagaStatus.SUCCESS
    archive = tmp_path / "sagas.jsonl"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    killed = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PURGE, stores.url(kind), str(archive),
        env=env, preexec_fn=_limit_file_size, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(killed.communicate(), 120)
    assert killed.returncode == -signal.SIGXFSZ, err.decode()
    torn = archive.read_bytes()
    assert 0 < len(torn) <= LIMIT
    assert b"\n" in torn
    assert not torn.endswith(b"\n")  # the kill left whole lines, then half a line
    assert all(status is SagaStatus.SUCCESS for status in [s.status for s in await store.list_sagas()])

    report = await store.purge(older_than=0, archive=archive)

    assert report.count == SAGAS
    readable, lines = {}, archive.read_text().splitlines()
    for line in lines:
        document = json.loads(line)  # every line whole
        readable[document["saga"]["saga_id"]] = document
    assert set(report.saga_ids) <= set(readable)
    assert all(verify_export(readable[saga_id]).ok for saga_id in report.saga_ids)
    checked = await asyncio.create_subprocess_exec(
        Path(sys.executable).with_name("saga-runtime"), "verify", "--file", str(archive),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "500"},
    )  # fmt: skip
    out, err = await asyncio.wait_for(checked.communicate(), 120)
    assert checked.returncode == 0, (out + err).decode()
    # The killed purge's whole lines stay: those sagas are in the archive twice, both exports intact.
    assert f"{len(lines)} of {len(lines)} saga(s) intact" in out.decode()
