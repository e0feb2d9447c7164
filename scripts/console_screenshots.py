"""Make the README's pictures of the web console: the saga list, and the timeline of a compensated saga.

It fills a fresh SQLite store with the `console_store` example, serves the console on a free loopback port, and
photographs it with headless Chromium (the system's: `apt-get install chromium`, or SAGA_RUNTIME_CHROMIUM; the
`playwright` package drives it, from `pip install -e '.[all,dev]'`). Run it from the repository's root:

    python scripts/console_screenshots.py            # writes docs/console-list.png and docs/console-timeline.png
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from saga_runtime._console import create_app

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs"


def example() -> object:
    """Return the packaged console_store example (its registry and `fill`)."""
    return importlib.import_module("saga_runtime.examples.console_store")


def free_port() -> int:
    """Return a TCP port free on the loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def main() -> None:
    """Fill a store, serve the console, and photograph two of its pages."""
    chromium = os.environ.get("SAGA_RUNTIME_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no Chromium: apt-get install chromium (or set SAGA_RUNTIME_CHROMIUM to its path)")
    module = example()
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'console.db'}"
        asyncio.run(module.fill(url))  # type: ignore[attr-defined]
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(url), host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        OUT.mkdir(exist_ok=True)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, headless=True)
                page = browser.new_page(viewport={"width": 1180, "height": 330})
                page.goto(base + "/?refresh=0")
                page.screenshot(path=OUT / "console-list.png")
                page.set_viewport_size({"width": 1180, "height": 800})
                page.goto(base + "/sagas/order-A-1002")
                page.screenshot(path=OUT / "console-timeline.png", full_page=True)
                browser.close()
        finally:
            server.should_exit = True
            thread.join(10)
    for name in ("console-list.png", "console-timeline.png"):
        print(f"wrote {(OUT / name).relative_to(ROOT)} ({(OUT / name).stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    sys.exit(main())
