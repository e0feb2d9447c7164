"""The console's saga page links a child saga to its parent and a parent to its children (API.md §18)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from conftest import run_sync
from console_helpers import client

from saga_runtime import DynamicSaga, SagaExecutor, ToolRegistry, open_store


async def fill_family(url: str) -> None:
    """Store a parent saga function that ran two children: one by default id, one by its own."""
    registry = ToolRegistry()

    @registry.tool
    class Add:
        def execute(self, a: int, b: int) -> int:
            return a + b

    @registry.saga
    async def total(saga: DynamicSaga, numbers: list[int]) -> int:
        sum_ = 0
        for n in numbers:
            sum_ = await saga.call("Add", a=sum_, b=n)
        return sum_

    @registry.saga
    async def family(saga: DynamicSaga) -> int:
        first = await saga.child(total, args={"numbers": [1, 2]})
        second = await saga.child("total", args={"numbers": [3]}, saga_id="own id")
        return int(first.output) + int(second.output)

    async with open_store(url) as store:
        result = await SagaExecutor(registry, store=store).run(family, saga_id="fam")
        assert result.output == 6


def test_the_saga_page_links_parent_and_children(tmp_path: Path) -> None:
    """A parent's page links each child (in its facts and at its step); a child's page links its parent; the API
    gives parent_id."""
    url = f"sqlite:///{tmp_path / 'family.db'}"
    run_sync(lambda: fill_family(url))
    with client(url) as console:
        parent = console.get("/sagas/fam")
        assert parent.status_code == 200
        for child in ("fam/total-0", "own id"):
            assert f'href="/sagas/{quote(child, safe="")}"' in parent.text
        assert 'class="child"' in parent.text
        child_page = console.get(f"/sagas/{quote('fam/total-0', safe='')}")
        assert child_page.status_code == 200
        assert 'class="parent"><a href="/sagas/fam"' in child_page.text
        assert console.get("/api/sagas/own id").json()["parent_id"] == "fam"
        assert "children" not in child_page.text.split("<section")[0]
