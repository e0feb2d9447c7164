"""What every command of `saga-runtime` shares: the typer app, exit codes, output, and running work on a store.

The command modules (`_app`, `_decisions`) import it; it imports neither, so they import no one another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from saga_runtime._cli._load import load_registry
from saga_runtime._cli._options import KEY_VAR, options, store_options
from saga_runtime._exceptions import (
    ApprovalError,
    IdempotencyConflictError,
    ReplayDivergenceError,
    SagaError,
    SagaInProgressError,
    StoreError,
)
from saga_runtime._records import SagaResult, SagaStatus
from saga_runtime._storage import DEFAULT_URL, ENV_VAR, SagaStore, open_store, redact_url, sagas
from saga_runtime._tools import ToolRegistry

PROG = "saga-runtime"


class ExitCode(IntEnum):
    """What the exit status of `saga-runtime` means."""

    OK = 0
    NOT_FOUND = 1  # no saga with that id in the store
    USAGE = 2  # bad arguments or options (typer's own usage errors exit 2 as well), an unimportable --tools
    STORE = 3  # the store failed: unreachable, bad URL, missing driver or extra, newer schema, bad export file
    CHECK_FAILED = 4  # verify found a broken chain, or replay found the record diverging from the plan
    WRONG_STATE = 5  # the saga's status does not allow the command, or an import conflicts with a stored saga
    NOT_UNDONE = 6  # the command ran, but a saga ended COMPENSATION_FAILED or PARKED: effects are not undone
    INTERRUPTED = 130  # stopped by Ctrl-C


EPILOG = (
    f"Store: --db URL, else ${ENV_VAR}, else {DEFAULT_URL}. URLs: sqlite:///relative.db, sqlite:////absolute.db, "
    "postgresql://user:pw@host:port/db, mysql://user:pw@host:port/db. Signing key: --signing-key, else "
    f"${KEY_VAR}. Every command takes --db and --signing-key before or after its name (`{PROG} --db URL list` "
    f"or `{PROG} list --db URL`); given in both places, the one after the command wins.\n\n"
    "Exit codes: 0 ok; 1 saga not found; 2 usage error; 3 store error (unreachable, bad URL, missing driver); "
    "4 verify failed or replay diverged; 5 the saga's status does not allow the command, or an import conflicts; "
    "6 a saga ended COMPENSATION_FAILED or PARKED; 130 interrupted."
)

app = typer.Typer(
    name=PROG,
    help="Inspect and operate the sagas of a saga_runtime store.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class CliError(Exception):
    """An expected failure: printed as one line on stderr, and the process exits with `code`."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


def _stdout() -> Console:
    # Piped output is not cut at 80 columns: the error texts of a timeline are what people look for.
    width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else 120
    return Console(width=width, highlight=False, soft_wrap=False)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _one_line(text: str) -> str:
    return "; ".join(part.strip(" -") for part in str(text).splitlines() if part.strip())


def _fail(message: str, code: ExitCode) -> NoReturn:
    raise CliError(message, code)


def _check_sqlite_file(url: str) -> None:
    """Refuse to create an empty database by reading one that is not there (a wrong --db or cwd)."""
    if not url.lower().startswith("sqlite:"):
        return
    from saga_runtime._storage._sqlite import sqlite_path  # the one parser of SQLite URLs

    path = sqlite_path(url)
    if path != ":memory:" and not Path(path).exists():
        _fail(
            f"no SQLite database at {path!r} ({redact_url(url)}): pass --db URL or set {ENV_VAR}",
            ExitCode.STORE,
        )


def _execute(ctx: typer.Context, work: Callable[[SagaStore], Awaitable[ExitCode]], *, create: bool = False) -> NoReturn:
    """Open the store, run `work` on it, close the store whatever happens; exit with what `work` returned."""
    given = options(ctx)

    async def main() -> ExitCode:
        if not create:
            _check_sqlite_file(given.url)
        extra: dict[str, Any] = {} if given.signing_key is None else {"signing_key": given.signing_key}
        async with open_store(given.url, **extra) as store:
            return await work(store)

    try:
        code = asyncio.run(main())
    except CliError as exc:
        _error(str(exc), exc.code)
    except KeyError as exc:  # the stores' and the executor's "no saga ... in URL"
        message = exc.args[0] if exc.args else "no such saga"
        _error(f"{message}; `{PROG} list` shows the stored ids", ExitCode.NOT_FOUND)
    except (IdempotencyConflictError, SagaInProgressError, ApprovalError) as exc:
        _error(str(exc), ExitCode.WRONG_STATE)
    except ReplayDivergenceError as exc:
        _error(str(exc), ExitCode.CHECK_FAILED)
    except StoreError as exc:
        _error(str(exc), ExitCode.STORE)
    except ValueError as exc:  # an empty signing key, a malformed option of the URL
        _error(str(exc), ExitCode.USAGE)
    except SagaError as exc:
        _error(f"{type(exc).__name__}: {exc}", ExitCode.WRONG_STATE)
    except KeyboardInterrupt:
        _error("interrupted; the store was closed", ExitCode.INTERRUPTED)
    raise typer.Exit(int(code))


def _error(message: str, code: ExitCode) -> NoReturn:
    sys.stderr.write(f"{PROG}: error: {_one_line(message)}\n")
    raise typer.Exit(int(code))


@app.callback()
@store_options
def _main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log what the library does (INFO).")] = False,
) -> None:
    """Inspect and operate the sagas of a saga_runtime store."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{PROG}: %(levelname)s: %(message)s"))
    library = logging.getLogger("saga_runtime")
    library.addHandler(handler)
    library.setLevel(logging.INFO if verbose else logging.WARNING)


async def _get(store: SagaStore, saga_id: str) -> SagaResult:
    result = await sagas.get_saga(store, saga_id)
    if result is None:
        raise KeyError(f"no saga {saga_id!r} in {store.url}")
    return result


def _outcome_code(results: list[SagaResult]) -> ExitCode:
    bad = {SagaStatus.COMPENSATION_FAILED, SagaStatus.PARKED}
    return ExitCode.NOT_UNDONE if any(r.status in bad for r in results) else ExitCode.OK


def _registry(spec: str) -> ToolRegistry:
    try:
        return load_registry(spec)
    except (ImportError, AttributeError, TypeError, ValueError, SyntaxError) as exc:
        _error(str(exc), ExitCode.USAGE)
