"""Worker processes of a test, by slot: started, SIGKILLed, and every one left killed at the end."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any, BinaryIO


class WorkerProcesses:
    """Worker processes by slot, each writing its stderr (and with `merge`, its stdout) to a file of its own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.all: list[subprocess.Popen[bytes]] = []
        self.slots: dict[int, subprocess.Popen[bytes]] = {}
        self.killed: set[int] = set()
        self.logs: list[BinaryIO] = []
        self.paths: dict[int, Path] = {}

    def spawn(self, slot: int, command: list[str], *, merge: bool = False, **options: Any) -> None:
        """Start `command` as the worker of `slot` (a restart keeps the old process in `all`)."""
        path = self.folder / f"worker-{slot}-{len(self.all)}.err"
        self.paths[slot] = path
        log = path.open("wb")
        self.logs.append(log)
        process = subprocess.Popen(command, stdout=log if merge else None, stderr=log, **options)
        self.all.append(process)
        self.slots[slot] = process

    def kill(self, slot: int) -> int:
        """SIGKILL the worker of `slot`; return its pid."""
        process = self.slots[slot]
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.killed.add(process.pid)
        return process.pid

    def stop_all(self) -> None:
        """Kill every worker still running."""
        for process in self.all:
            if process.poll() is None:
                process.kill()
            process.wait()
        for log in self.logs:
            log.close()

    def errors(self) -> str:
        """Return what the workers wrote to their files."""
        return "".join(path.read_text() for path in sorted(self.folder.glob("worker-*.err")))
