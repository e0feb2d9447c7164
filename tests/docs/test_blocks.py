"""Every Python block of the docs and of the README runs, so a block that drifts from the API fails the suite.

A page's blocks run as they would pasted one after another into a file and run with `python`: in order, in one
`__main__` namespace (a later block uses what an earlier one defined), with no top-level `await` (a block runs
its coroutines with `asyncio.run(main())`). The namespace is seeded with the fakes of stubs.py (the reader's own
clients), in a temporary directory whose SQLite file is the default store. A block that cannot run here (a real
server, an API key) is marked `<!-- docs-test: compile-only (why) -->` on the line before its fence, and is still
compiled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .stubs import world

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```python\s*$")
MARK = re.compile(r"^<!-- docs-test: compile-only \((?P<why>[^)]+)\) -->$")
MOST_COMPILE_ONLY = 12


@dataclass
class Block:
    """One fenced Python block of a page."""

    page: Path
    line: int
    source: str
    compile_only: bool

    def compiled(self) -> Any:
        """Compile the block as the page's own file and line would show in a traceback, as a file is compiled: a
        top-level `await` is a SyntaxError, as `python file.py` says."""
        padded = "\n" * self.line + self.source
        return compile(padded, str(self.page), "exec")


def blocks(page: Path) -> list[Block]:
    """Return the ```python blocks of a page, each marked compile-only when the line before its fence says so."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, index = [], 0
    while index < len(lines):
        if FENCE.match(lines[index]):
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            marked = index > 0 and MARK.match(lines[index - 1].strip()) is not None
            found.append(Block(page, index + 1, "\n".join(lines[index + 1 : end]) + "\n", marked))
            index = end
        index += 1
    return found


def page_id(page: Path) -> str:
    """Name a page by its path in the repository."""
    return str(page.relative_to(ROOT))


@pytest.mark.timeout(240)  # the testing page kills and recovers a dozen processes
@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=page_id)
def test_the_blocks_of_a_page_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each runnable block of the page runs without error, in order, against SQLite in a temporary directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAGA_RUNTIME_DATABASE_URL", f"sqlite:///{tmp_path / 'sagas.db'}")
    monkeypatch.setenv("SAGA_RUNTIME_SECRET_KEY", "k2JkKp3G5yV9cQkqgk5ilVOLk4cOq7wUsx3wyNQFkxs=")
    namespace: dict[str, Any] = {"__name__": "__main__", **world()}
    for block in blocks(page):
        code = block.compiled()
        if not block.compile_only:
            exec(code, namespace)  # each asyncio.run(...) in it runs a loop of its own, as in a file


def test_every_python_block_is_collected() -> None:
    """No Python block hides from the collector: every ```python fence starts its line."""
    hidden = [
        f"{page_id(page)}:{n}"
        for page in PAGES
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if line.strip().startswith("```python") and not FENCE.match(line)
    ]
    assert not hidden


def test_few_blocks_are_compile_only() -> None:
    """Blocks that only compile stay few, and each says why it cannot run."""
    marked = [block for page in PAGES for block in blocks(page) if block.compile_only]
    assert len(marked) <= MOST_COMPILE_ONLY, [f"{page_id(b.page)}:{b.line}" for b in marked]


def test_a_drifted_block_fails(tmp_path: Path) -> None:
    """A block calling an option the API does not have raises, so the page's test would fail."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nfrom saga_runtime import SagaExecutor, ToolRegistry\n"
        "SagaExecutor(ToolRegistry(), no_such_option=1)\n```\n"
    )
    (block,) = blocks(page)
    with pytest.raises(TypeError):
        eval(block.compiled(), {"__name__": "docs_page"})


def test_a_block_with_a_top_level_await_fails(tmp_path: Path) -> None:
    """A block that awaits at its top level fails, as it would pasted into a file."""
    page = tmp_path / "page.md"
    page.write_text("```python\nimport asyncio\n\nawait asyncio.sleep(0)\n```\n")
    (block,) = blocks(page)
    with pytest.raises(SyntaxError, match="outside"):
        block.compiled()


def test_the_exception_tree_the_reference_includes_is_the_whole_tree() -> None:
    """The line range of _exceptions.py the reference page includes holds the tree from SagaError to its last leaf."""
    page = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    found = re.search(r'--8<-- "saga_runtime/_exceptions.py:(\d+):(\d+)"', page)
    assert found is not None
    first, last = int(found[1]), int(found[2])
    lines = (ROOT / "saga_runtime" / "_exceptions.py").read_text(encoding="utf-8").splitlines()
    assert lines[first - 1].strip() == "SagaError"
    assert "└──" in lines[last - 1]
    assert not lines[last].strip()  # the line after the tree is blank: nothing left out
