"""The shape of driver-error conversion: each driver module holds one table and one `map_exceptions`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from saga_runtime._exceptions import StoreBusyError, StoreConnectionError, StoreError

__all__ = ["ErrorMap", "convert", "mapping_errors"]

# driver exception class -> (StoreError subclass, what to do); looked up along the exception's MRO, so a table
# that holds the driver's base class converts every error the driver raises.
ErrorMap = Mapping[type[BaseException], tuple[type[StoreError], str]]

CONNECT_ADVICE = "is the server up, and are the host, port, user, password and database name right?"
BUSY_ADVICE = "the transaction was rolled back, nothing was written; retry it"


def convert(
    exc: BaseException,
    table: ErrorMap,
    url: str,
    *,
    kind: type[StoreError] | None = None,
    advice: str | None = None,
    connecting: bool = False,
) -> StoreError:
    """Return the StoreError for a driver error: the class from `table` (or `kind`), a message naming `url`."""
    found: tuple[type[StoreError], str] = (StoreError, "")
    for cls in type(exc).__mro__:
        if cls in table:
            found = table[cls]
            break
    error_class = kind or found[0]
    hint = advice if advice is not None else found[1]
    if connecting and error_class is StoreError:
        error_class = StoreConnectionError
    if error_class is StoreConnectionError:
        head = f"cannot connect to {url}" if connecting else f"lost the connection to {url}"
        hint = hint or CONNECT_ADVICE
    elif error_class is StoreBusyError:
        head = f"the database at {url} is busy"
        hint = hint or BUSY_ADVICE
    else:
        head = f"the database at {url} failed"
    text = str(exc).strip() or type(exc).__name__
    message = f"{head}: {type(exc).__name__}: {text}"
    return error_class(f"{message}; {hint}" if hint else message, url=url)


@contextmanager
def mapping_errors(
    catch: tuple[type[BaseException], ...], table: ErrorMap, url: str, *, connecting: bool = False
) -> Iterator[None]:
    """Convert the driver errors `catch` raised inside the block with `table`; let everything else through."""
    try:
        yield
    except catch as exc:
        raise convert(exc, table, url, connecting=connecting) from exc
