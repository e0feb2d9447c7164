"""What a CLI worker offers its platform: health endpoints (`--health-port`) and JSON logs (`--log-format json`)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HealthServer", "JsonFormatter", "store_probe", "use_json_logs"]

# Seconds a probe may take before the endpoint answers 503: the event loop, or the store, does not answer.
_PROBE_TIMEOUT = 5.0
# A saga id no saga has: reading it is one primary-key lookup, the cheapest round trip to the store.
_PROBE_ID = "saga-runtime-health-probe"


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object a line: time, level, logger, message (and the error, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def use_json_logs(logger: logging.Logger) -> None:
    """Make every handler of `logger` write JSON lines."""
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter())


class HealthServer:
    """Serve `/healthz` (the worker's event loop answers) and `/readyz` (it serves, and its store answers).

    Answered from a daemon thread, each probe run in the worker's loop: a frozen loop or an unreachable store
    turns the answer to 503 within `_PROBE_TIMEOUT` seconds. Nothing is probed between requests.
    """

    def __init__(self, port: int, store_probe: Callable[[], Awaitable[object]], *, host: str = "127.0.0.1") -> None:
        self.serving = False  # set while serve() runs: a stopping worker is alive, and not ready
        self._loop = asyncio.get_running_loop()
        self._probe = store_probe
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    code, text = health._alive()
                elif path == "/readyz":
                    code, text = health._ready()
                else:
                    code, text = 404, "not found: /healthz or /readyz"
                body = (text + "\n").encode()
                self.send_response(code)
                self.send_header("content-type", "text/plain; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None  # a probe every few seconds is not news

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host: str = self._server.server_address[0]  # type: ignore[assignment]
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="saga-runtime-health", daemon=True)
        self._thread.start()

    def _run(self, probe: Callable[[], Awaitable[object]]) -> None:
        future = asyncio.run_coroutine_threadsafe(_awaited(probe), self._loop)
        try:
            future.result(_PROBE_TIMEOUT)
        finally:
            future.cancel()  # (done already, or given up: not left running)

    def _alive(self) -> tuple[int, str]:
        try:
            self._run(_nothing)
        except Exception as exc:
            return 503, f"not alive: the worker's event loop does not answer ({type(exc).__name__})"
        return 200, "alive"

    def _ready(self) -> tuple[int, str]:
        if not self.serving:
            return 503, "not ready: not serving (starting or stopping)"
        try:
            self._run(self._probe)
        except Exception as exc:
            return 503, f"not ready: the store does not answer ({type(exc).__name__}: {exc})"
        return 200, "ready"

    def close(self) -> None:
        """Stop serving and free the port; blocks briefly, so call it from a thread in async code."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


async def _awaited(probe: Callable[[], Awaitable[object]]) -> object:
    return await probe()


async def _nothing() -> None:
    return None


def store_probe(get: Callable[[str], Awaitable[object]]) -> Callable[[], Awaitable[object]]:
    """Return a probe of a store: read a saga id no saga has (`get` is the store's `get_saga`)."""
    return lambda: get(_PROBE_ID)
