"""The built site: `mkdocs build --strict` in a temporary directory, served on the loopback, read in headless Chromium.

The browser is the system's Chromium (Debian's `chromium` package), never one Playwright downloads. Without it the
browser tests skip saying how to install it; under CI=true they fail.
"""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium import chromium_path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
]
SEARCH_READY = """() => {
    const meta = document.querySelector(".md-search-result__meta");
    return meta !== null && meta.textContent.trim() !== "" && !/initializ/i.test(meta.textContent);
}"""
HINT = "install Chromium to run the site's browser test: apt-get install chromium"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the site once for the module, strictly, into a temporary directory."""
    target = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert not warnings, warnings
    return target


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_site_builds_with_llms_txt_and_the_reference(site: Path) -> None:
    """The strict build writes llms.txt, llms-full.txt and an API reference holding the façade's classes."""
    llms = (site / "llms.txt").read_text(encoding="utf-8")
    assert "getting-started" in llms
    assert "executor.retry_compensation(" in (site / "llms-full.txt").read_text(encoding="utf-8")
    reference = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("saga_runtime.SagaExecutor", "saga_runtime.ToolRegistry", "saga_runtime.RetryPolicy"):
        assert f'id="{name}"' in reference, name
    assert 'id="saga_runtime.testing.check_crash_points"' in (site / "reference" / "testing" / "index.html").read_text()


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """Serve the built site on a free loopback port; yield its base URL."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serve files without logging every request to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def heading(page: Any) -> str:
    """Return the page's title as a reader sees it (without the permalink sign)."""
    return str(page.locator("article h1").inner_text()).removesuffix("¶").strip()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_reader_opens_the_index_a_how_to_and_searches(served: str) -> None:
    """Headless Chromium opens the index, opens a how-to page, and the search finds the harness."""
    path = chromium_path(HINT)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(30_000)  # a loaded machine is slow to index
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))

            page.goto(f"{served}/")
            assert "saga_runtime" in page.title()
            assert heading(page) == "saga_runtime"

            page.goto(f"{served}/how-to/retries-and-timeouts/")
            assert heading(page) == "Retries and timeouts"
            assert (
                page.locator("article pre code")
                .first.inner_text()
                .startswith("import asyncio\n\nfrom saga_runtime import")
            )

            page.goto(f"{served}/")
            query = page.locator("input[data-md-component='search-query']")
            query.click()
            # A query typed before the index is built is not searched again: wait for the index first.
            page.wait_for_function(SEARCH_READY, timeout=120_000)
            query.press_sequentially("crash points", delay=20)  # the search listens to keys, not to a fill
            results = page.locator(".md-search-result__item")
            results.first.wait_for()
            assert "crash" in page.locator(".md-search-result").inner_text().lower()
            assert not errors, errors
        finally:
            browser.close()
