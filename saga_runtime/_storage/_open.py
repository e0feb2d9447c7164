"""open_store(): pick a store by URL scheme, importing its driver lazily."""

from __future__ import annotations

import importlib
import os
from collections.abc import Generator
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from saga_runtime._exceptions import StoreError
from saga_runtime._storage._base import Store
from saga_runtime._storage._keys import signing_key_bytes

__all__ = ["DEFAULT_URL", "ENV_VAR", "StoreOpener", "open_store", "redact_url"]

ENV_VAR = "SAGA_RUNTIME_DATABASE_URL"
DEFAULT_URL = "sqlite:///sagas.db"

# scheme -> (module, extra installing its driver).
_DIALECTS: dict[str, tuple[str, str | None]] = {
    "memory": ("saga_runtime._storage._memory", None),
    "sqlite": ("saga_runtime._storage._sqlite", None),
    "postgresql": ("saga_runtime._storage._postgres", "postgres"),
    "postgres": ("saga_runtime._storage._postgres", "postgres"),
    "mysql": ("saga_runtime._storage._mysql", "mysql"),
    "mariadb": ("saga_runtime._storage._mysql", "mysql"),
}


def redact_url(url: str) -> str:
    """Return `url` with any password as `***`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


async def _open(url: str | None, options: dict[str, Any]) -> Store:
    url = url or os.environ.get(ENV_VAR) or DEFAULT_URL
    scheme = urlsplit(url).scheme.lower().split("+", 1)[0]
    if scheme not in _DIALECTS:
        known = ", ".join(f"{name}://" for name in sorted(_DIALECTS))
        raise StoreError(f"unsupported store URL {redact_url(url)!r}: use one of {known}", url=redact_url(url))
    module_name, extra = _DIALECTS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"pip install 'saga-runtime[{extra}]'" if extra else "reinstall saga-runtime"
        raise StoreError(
            f"the {scheme} store needs a driver that is not installed ({exc.name or exc}): run {hint}",
            url=redact_url(url),
        ) from exc
    key = signing_key_bytes(options.pop("signing_key", None))
    if scheme == "memory":
        options.pop("retry_for", None)
        keep = options.pop("keep", None)
        if options:
            raise TypeError(f"the memory store takes only signing_key=, keep= (and retry_for=), got {sorted(options)}")
        query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
        if keep is None:
            keep = query.pop("keep", None)
        else:
            query.pop("keep", None)
        if query:
            raise ValueError(f"the memory store's URL takes only ?keep=N, not {sorted(query)}")
        store: Store = module.MemoryStore(signing_key=key, keep=keep)
        return store
    opened = await module.open_sql(url, **options)
    opened.use_signing_key(key)
    result: Store = opened
    return result


class StoreOpener:
    """What `open_store` returns: awaitable, or an async context manager."""

    def __init__(self, url: str | None, options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._store: Store | None = None

    def __await__(self) -> Generator[Any, None, Store]:
        return _open(self._url, self._options).__await__()

    async def __aenter__(self) -> Store:
        self._store = await _open(self._url, self._options)
        return self._store

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            await store.close()


def open_store(url: str | None = None, **options: Any) -> StoreOpener:
    """Open the store at `url` (else `$SAGA_RUNTIME_DATABASE_URL`, else `sqlite:///sagas.db`).

    Await it (then `await store.close()`) or use `async with`. SQL schemas are created or migrated; each
    `memory://` store is fresh and private.

    `retry_for` (seconds, default 30; 0: off): how long a SQL store retries a lost connection's operation,
    with backoff on a fresh one, before `StoreConnectionError` (every operation is safe to repeat). Other
    options are the driver's.
    """
    return StoreOpener(url, options)
