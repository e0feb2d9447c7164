"""Where a purge puts sagas before their rows go."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Archive", "ArchiveTarget"]

ArchiveTarget = str | os.PathLike[str] | Callable[[dict[str, Any]], Awaitable[Any]]


class Archive:
    """A file (one export per line, appended and flushed) or an async callable."""

    def __init__(self, target: ArchiveTarget) -> None:
        self._call: Callable[[dict[str, Any]], Awaitable[Any]] | None = None
        self._path: Path | None = None
        self._file: Any = None
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
            self._file = path.open("a", encoding="utf-8")
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
            self._file.writelines(lines)
            self._file.flush()
            os.fsync(self._file.fileno())  # on disk before the rows go
        except Exception as exc:  # disk full: none of the batch counts
            return 0, exc
        return len(documents), None

    def close(self) -> None:
        """Close the archive file, if open."""
        if self._file is not None:
            self._file.close()
            self._file = None
