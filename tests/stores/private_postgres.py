"""A PostgreSQL server of a test's own: its own data directory and port, stopped and started at will, then removed.

Tests that stop, kill or restart a database server use one of these, never the machine's shared servers. The
server binaries are found where Debian installs them (/usr/lib/postgresql/<version>/bin). They refuse to run as
root: as root, every command runs as the `postgres` user through `runuser`.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

__all__ = ["PrivatePostgres", "private_postgres_or_skip"]

SERVER_USER = "postgres"
_TIMEOUT = 60  # seconds any one pg_ctl or initdb command may take


def server_bindir() -> Path | None:
    """Return the bin directory of the newest installed PostgreSQL server that has initdb and pg_ctl, or None."""
    found = []
    for bindir in glob.glob("/usr/lib/postgresql/*/bin"):
        version = Path(bindir).parent.name
        if os.access(Path(bindir, "initdb"), os.X_OK) and os.access(Path(bindir, "pg_ctl"), os.X_OK):
            found.append((float(version) if version.replace(".", "", 1).isdigit() else 0.0, Path(bindir)))
    return max(found)[1] if found else None


def free_port() -> int:
    """Return a TCP port of 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivatePostgres:
    """One private server: `start()`, `stop()` (a clean or a crash stop), `start()` again, and `remove()`."""

    def __init__(self, bindir: Path, datadir: Path, port: int, as_user: list[str]) -> None:
        self.bindir = bindir
        self.datadir = datadir
        self.port = port
        self._as_user = as_user  # the prefix that runs a command as the server's user ([] when not root)

    @property
    def url(self) -> str:
        """Return the URL of the server's `postgres` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        """Run a server binary as the server's user; raise RuntimeError with its output if it fails."""
        command = [*self._as_user, str(self.bindir / tool), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT, check=False)
        if done.returncode != 0:
            log = self.datadir / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr or done.stdout}\n{tail}")

    def init(self) -> None:
        """Create the cluster: trust authentication for user postgres, no fsync (a test's data need not last)."""
        self._run("initdb", "-D", str(self.datadir), "--auth=trust", "-U", "postgres", "--no-sync", "-E", "UTF8")

    def start(self) -> None:
        """Start the server on its port (loopback only, its socket in its data directory); return once it is up."""
        options = f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(self.datadir), "-o", options, "-l", str(self.datadir / "server.log"), "-w", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: "fast" ends every connection and shuts down cleanly, "immediate" is like a crash."""
        self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        """Tell whether the server is running."""
        command = [*self._as_user, str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "status"]
        return subprocess.run(command, capture_output=True, timeout=_TIMEOUT, check=False).returncode == 0

    def remove(self) -> None:
        """Stop the server if it runs, and delete its data directory."""
        try:
            if self.datadir.exists() and self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.datadir, ignore_errors=True)


def _unavailable(message: str) -> NoReturn:
    """Fail under CI=true, else skip, saying why no private server can be had."""
    message = f"no private PostgreSQL server for this test: {message}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def private_postgres_or_skip() -> Iterator[PrivatePostgres]:
    """Start a private server and yield it; remove it at the end. Skip (fail under CI) if none can be started."""
    bindir = server_bindir()
    if bindir is None:
        _unavailable("no initdb and pg_ctl under /usr/lib/postgresql/*/bin (install the postgresql package)")
    as_user: list[str] = []
    uid = gid = -1
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            _unavailable("running as root, and no runuser to run the server as the postgres user")
        try:
            import pwd

            entry = pwd.getpwnam(SERVER_USER)
        except KeyError:
            _unavailable(f"running as root, and no {SERVER_USER!r} user to run the server as")
        as_user = [str(runuser), "-u", SERVER_USER, "--"]
        uid, gid = entry.pw_uid, entry.pw_gid
    datadir = Path(tempfile.mkdtemp(prefix="saga_rt_pg_"))
    if uid >= 0:
        os.chown(datadir, uid, gid)
    server = PrivatePostgres(bindir, datadir, free_port(), as_user)
    try:
        try:
            server.init()
            server.start()
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            _unavailable(f"it did not start ({type(exc).__name__}: {exc})")
        yield server
    finally:
        server.remove()
