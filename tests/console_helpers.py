"""What the console's tests share: the example store, copied per test, and the console served by uvicorn."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import uvicorn
from starlette.testclient import TestClient

from saga_runtime import SagaExecutor, open_store
from saga_runtime._console import create_app

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "console_store.py"
SCRIPT_TEXT = "<script>window.__pwned = 1</script>"
BASE = "http://127.0.0.1:8765"


def example() -> ModuleType:
    """Return examples/console_store.py as a module (loaded once: its tools log to its `effects`)."""
    name = "console_store_example"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLE)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


async def fill(url: str) -> None:
    """Fill a store with the example's sagas and one whose result holds a script tag."""
    module = example()
    await module.fill(url)
    async with open_store(url) as store:
        plan = [{"id": "ticket", "tool": "OpenTicket", "args": {"customer": "c-1", "text": SCRIPT_TEXT}}]
        await SagaExecutor(module.registry, store=store).run(plan, saga_id="note-1")


def copy_store(template: Path, folder: Path) -> str:
    """Return the URL of a fresh copy of a filled SQLite store."""
    target = folder / "console.db"
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"


def client(url: str, **options: Any) -> TestClient:
    """Return a test client of a console on `url`, as a browser on the loopback reaches it."""
    return TestClient(create_app(url, **options), base_url=BASE, follow_redirects=False)


def free_port() -> int:
    """Return a TCP port free on the loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def served(app: Any) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port, in a thread; yield its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, name="console-under-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError("the console did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(15)
