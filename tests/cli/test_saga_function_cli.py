"""The command line and saga functions: `submit` queues one, `worker` runs it, `show` gives its function and output."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import textwrap
from pathlib import Path

from saga_runtime import SagaExecutor, SagaStatus, open_store

from .test_cli import cli, run_sync


async def serve_until_done(module: Path, db: str, saga_id: str) -> None:
    """Serve the default queue with the registry of `module` until the saga `saga_id` ends."""
    spec = importlib.util.spec_from_file_location("fns_for_worker", module)
    assert spec is not None
    assert spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    async with open_store(db) as store:
        executor = SagaExecutor(loaded.registry, store=store)
        worker = asyncio.create_task(executor.serve(interval=0.02))
        try:
            result = await executor.handle(saga_id).result(timeout=30)
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
    assert result.status is SagaStatus.SUCCESS


FUNCTIONS = textwrap.dedent(
    """
    from saga_runtime import DynamicSaga, ToolRegistry

    registry = ToolRegistry()

    @registry.tool
    class Add:
        def execute(self, a: int, b: int) -> int:
            return a + b

    @registry.saga
    async def total(saga: DynamicSaga, numbers: list[int]) -> dict:
        sum_ = 0
        for n in numbers:
            sum_ = await saga.call("Add", a=sum_, b=n)
        return {"total": sum_}
    """
)


def test_submit_queues_a_saga_function_and_show_gives_its_output(tmp_path: Path) -> None:
    """`submit FUNCTION --args` queues it; a worker runs it; `show` names the function and prints the output."""
    (tmp_path / "fns.py").write_text(FUNCTIONS)
    db = f"sqlite:///{tmp_path / 'sagas.db'}"
    queued = cli(
        "submit",
        "total",
        "--tools",
        "fns:registry",
        "--args",
        '{"numbers": [1, 2, 39]}',
        "--id",
        "t-1",
        db=db,
        cwd=tmp_path,
    )
    assert queued.code == 0, queued.err
    assert "t-1" in queued.out
    assert "QUEUED" in queued.out
    run_sync(lambda: serve_until_done(tmp_path / "fns.py", db, "t-1"))
    shown = cli("show", "t-1", db=db, cwd=tmp_path)
    assert shown.code == 0, shown.err
    assert "saga function total" in shown.out
    assert "output" in shown.out
    assert '"total": 42' in shown.out or "'total': 42" in shown.out
    as_json = cli("show", "t-1", "--json", db=db, cwd=tmp_path).json()
    assert as_json["function"] == "total"
    assert as_json["output"] == {"total": 42}


def test_submit_refuses_bad_arguments_and_stores_nothing(tmp_path: Path) -> None:
    """Arguments that do not fit the function exit 2 naming the problem; no saga is stored."""
    (tmp_path / "fns.py").write_text(FUNCTIONS)
    db = f"sqlite:///{tmp_path / 'sagas.db'}"
    refused = cli(
        "submit",
        "total",
        "--tools",
        "fns:registry",
        "--args",
        '{"numbers": "many"}',
        "--id",
        "t-2",
        db=db,
        cwd=tmp_path,
    )
    assert refused.code == 2
    assert "numbers" in refused.err
    missing = cli("show", "t-2", db=db, cwd=tmp_path)
    assert missing.code == 1
    not_json = cli("submit", "total", "--tools", "fns:registry", "--args", "{oops", db=db, cwd=tmp_path)
    assert not_json.code == 2
    assert "--args" in not_json.err


CHILDREN = FUNCTIONS + textwrap.dedent(
    """
    @registry.saga
    async def twice(saga: DynamicSaga) -> dict:
        first = await saga.child(total, args={"numbers": [1, 2]})
        second = await saga.child("total", args={"numbers": [3]}, saga_id="second-total")
        return {"sum": first.output["total"] + second.output["total"]}
    """
)


def test_show_names_a_saga_s_children_and_a_child_s_parent(tmp_path: Path) -> None:
    """`show` of a parent lists its child sagas, `show` of a child names its parent; `--json` carries both."""
    (tmp_path / "fns.py").write_text(CHILDREN)
    db = f"sqlite:///{tmp_path / 'sagas.db'}"
    queued = cli("submit", "twice", "--tools", "fns:registry", "--id", "p-1", db=db, cwd=tmp_path)
    assert queued.code == 0, queued.err
    run_sync(lambda: serve_until_done(tmp_path / "fns.py", db, "p-1"))
    parent = cli("show", "p-1", db=db, cwd=tmp_path)
    assert parent.code == 0, parent.err
    assert "children" in parent.out
    assert "p-1/total-0, second-total" in parent.out
    child = cli("show", "second-total", db=db, cwd=tmp_path)
    assert child.code == 0, child.err
    assert "parent" in child.out
    assert "p-1" in child.out
    assert cli("show", "p-1", "--json", db=db, cwd=tmp_path).json()["children"] == ["p-1/total-0", "second-total"]
    as_json = cli("show", "p-1/total-0", "--json", db=db, cwd=tmp_path).json()
    assert (as_json["parent_id"], as_json["children"], as_json["output"]) == ("p-1", [], {"total": 3})
