"""Where a purge puts sagas before their rows go.

An archive file holds one export per line, and a line is whole or absent: a purge stopped mid-append (killed, the
disk full) leaves a torn last line, and its sagas were not purged (their rows go only after the append is on disk
and read back), so the next append first cuts that torn tail off. Appends to one file take an exclusive lock on it
(`flock`), so purges in several processes never interleave their lines.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

if sys.platform != "win32":
    from fcntl import LOCK_EX, LOCK_UN, flock

__all__ = ["Archive", "ArchiveTarget"]

logger = logging.getLogger("saga_runtime")

ArchiveTarget = str | os.PathLike[str] | Callable[[dict[str, Any]], Awaitable[Any]]

_TAIL_CHUNK = 64 * 1024  # bytes read at a time looking back for the last whole line


class ArchiveReadBackError(OSError):
    """The archive file does not hold what was just appended to it (nothing of that batch is purged)."""


class Archive:
    """A file (one export per line, appended, on disk and read back before the rows go) or an async callable."""

    def __init__(self, target: ArchiveTarget) -> None:
        self._call: Callable[[dict[str, Any]], Awaitable[Any]] | None = None
        self._path: Path | None = None
        self._fd: int | None = None
        if callable(target):
            self._call = target
            self.name = getattr(target, "__qualname__", repr(target))
        elif isinstance(target, str | os.PathLike):
            self._path = Path(target)
            self.name = str(target)
        else:
            raise TypeError(f"archive must be a file path or an async callable, not {type(target).__name__}")

    def check(self, *, create: bool) -> None:
        """Raise ValueError if the file cannot be appended; with `create`, open it."""
        if self._path is None:
            return
        path = self._path
        if path.is_dir():
            raise ValueError(f"archive {str(path)!r} is a directory; give a file path")
        if not create:
            folder = path.parent if not path.exists() else path
            if not os.access(folder, os.W_OK):
                raise ValueError(f"archive {str(path)!r} cannot be written")
            return
        try:
            # Read and write (not O_APPEND): a torn tail is cut off, then each batch written where the file ends.
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ValueError(f"archive {str(path)!r} cannot be written: {exc.strerror or exc}") from None

    async def put(self, documents: Sequence[dict[str, Any]]) -> tuple[int, Exception | None]:
        """Archive exports in order; return how many, and the error stopping the rest."""
        if self._call is not None:
            for done, document in enumerate(documents):
                try:
                    await self._call(document)
                except Exception as exc:
                    return done, exc
            return len(documents), None
        try:
            lines = [json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n" for document in documents]
            self._append("".join(lines).encode())
        except Exception as exc:  # disk full, a read-back that differs: none of the batch counts
            return 0, exc
        return len(documents), None

    def _append(self, data: bytes) -> None:
        """Append whole lines, on disk and read back; on failure leave the file as it was."""
        fd = self._fd
        assert fd is not None, "check(create=True) opens the file first"
        with _locked(fd):
            end = self._whole_lines_end(fd)
            try:
                written = 0
                while written < len(data):
                    written += os.pwrite(fd, data[written:], end + written)
                os.fsync(fd)  # on disk before the rows go
                _read_back(fd, data, end)
            except BaseException:
                with suppress(OSError):  # the first error is the one to report
                    os.ftruncate(fd, end)  # whole lines only, even when this batch failed half-way
                raise

    def _whole_lines_end(self, fd: int) -> int:
        """Return where the file's last whole line ends, cutting off a torn tail after it."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return size
        end = size
        while end > 0:
            start = max(0, end - _TAIL_CHUNK)
            found = os.pread(fd, end - start, start).rfind(b"\n")
            if found >= 0:
                end = start + found + 1
                break
            end = start
        logger.warning(
            "archive %s: cut off a torn last line (%d bytes) left by a purge stopped mid-write; "
            "its sagas were not purged then",
            self.name,
            size - end,
        )
        os.ftruncate(fd, end)
        os.fsync(fd)
        return end

    def close(self) -> None:
        """Close the archive file, if open."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _read_back(fd: int, data: bytes, at: int) -> None:
    """Raise ArchiveReadBackError unless the file holds `data` at `at`, each line a readable JSON export."""
    back = os.pread(fd, len(data), at)
    if back != data:
        raise ArchiveReadBackError(f"the archive holds {len(back)} other bytes than the {len(data)} just written")
    for line in back.splitlines():
        json.loads(line)


@contextmanager
def _locked(fd: int) -> Iterator[None]:
    """Hold an exclusive lock on the file (released by closing it too, so a killed process never keeps it)."""
    if sys.platform == "win32":  # pragma: no cover - no flock: one purge at a time per archive file
        yield
        return
    flock(fd, LOCK_EX)
    try:
        yield
    finally:
        flock(fd, LOCK_UN)
