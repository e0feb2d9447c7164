"""The commands of `saga-runtime`: typer for the arguments, rich for what people read, JSON for scripts."""

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
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from saga_runtime._cli._load import load_registry, parse_since
from saga_runtime._cli._options import KEY_VAR, DecideToolsOption, JsonOption, ToolsOption, options, store_options
from saga_runtime._cli._render import saga_table, timeline
from saga_runtime._cli._ui import TOKEN_VAR, UiError, serve
from saga_runtime._engine import SagaEvent
from saga_runtime._exceptions import (
    ApprovalError,
    IdempotencyConflictError,
    ReplayDivergenceError,
    SagaError,
    SagaInProgressError,
    StoreError,
)
from saga_runtime._executor import SagaExecutor
from saga_runtime._records import SagaResult, SagaStatus
from saga_runtime._storage import DEFAULT_URL, ENV_VAR, SagaStore, open_store, redact_url
from saga_runtime._tools import ToolRegistry

__all__ = ["ExitCode", "app", "run"]

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


# -- reading ---------------------------------------------------------------------------------------------------


@app.command("list")
@store_options
def list_command(
    ctx: typer.Context,
    status: Annotated[
        str | None, typer.Option("--status", "-s", help=f"Only sagas with this status ({', '.join(SagaStatus)}).")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only sagas created in this age (30m, 1h, 2d, 1w) or since a date.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="At most this many sagas.")] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many (newest first).")] = 0,
    as_json: JsonOption = False,
) -> None:
    """List stored sagas, newest first."""
    wanted: SagaStatus | None = None
    if status is not None:
        try:
            wanted = SagaStatus(status.upper())
        except ValueError:
            _error(f"unknown status {status!r}: use one of {', '.join(SagaStatus)}", ExitCode.USAGE)
    cutoff = None
    if since is not None:
        try:
            cutoff = parse_since(since)
        except ValueError as exc:
            _error(str(exc), ExitCode.USAGE)

    async def work(store: SagaStore) -> ExitCode:
        summaries = await store.list_sagas(wanted, limit=limit, offset=offset)
        # Newest first: the sagas younger than the cutoff are a prefix of every page.
        summaries = [s for s in summaries if cutoff is None or s.created_at >= cutoff]
        if as_json:
            _json([s.model_dump(mode="json") for s in summaries])
        elif not summaries:
            _stdout().print(f"no sagas{' ' + wanted.value if wanted else ''} in {store.url}")
        else:
            console = _stdout()
            console.print(saga_table(summaries, width=console.width))
        return ExitCode.OK

    _execute(ctx, work)


@app.command()
@store_options
def show(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="ID", help="The saga id.")],
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also show args, results and keys.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Show a saga's timeline: groups, steps, attempts, durations, errors, compensations, cost."""

    async def work(store: SagaStore) -> ExitCode:
        result = await _get(store, saga_id)
        if as_json:
            _json(result.to_dict())
        else:
            _stdout().print(timeline(result, verbose=verbose))
        return ExitCode.OK

    _execute(ctx, work)


async def _get(store: SagaStore, saga_id: str) -> SagaResult:
    result = await store.get_saga(saga_id)
    if result is None:
        raise KeyError(f"no saga {saga_id!r} in {store.url}")
    return result


@app.command()
@store_options
def export(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="ID", help="The saga id.")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file, not stdout.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Export a saga as a versioned JSON document (to stdout, or to a file), for `import` into any store."""

    async def work(store: SagaStore) -> ExitCode:
        document = await store.export_saga(saga_id)
        if output is None:
            _json(document)
            return ExitCode.OK
        output.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        steps = len(document.get("steps", []))
        if as_json:
            _json({"saga_id": saga_id, "file": str(output), "steps": steps})
        else:
            _stdout().print(f"exported saga {saga_id} ({steps} steps) to {output}")
        return ExitCode.OK

    _execute(ctx, work)


@app.command()
@store_options
def verify(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="ID", help="The saga id.")],
    as_json: JsonOption = False,
) -> None:
    """Check a saga's hash chain; exit 4, listing the problems, when a record was altered, removed or moved."""

    async def work(store: SagaStore) -> ExitCode:
        verdict = await store.verify_saga(saga_id)
        if as_json:
            _json(
                {
                    "saga_id": saga_id,
                    "ok": verdict.ok,
                    "signed": verdict.signed,
                    "saga_sealed": verdict.saga_sealed,
                    "problems": verdict.problems,
                }
            )
        elif verdict.ok:
            signed = "signed and " if verdict.signed else ""
            legacy = "" if verdict.saga_sealed else "; its saga row predates sealed saga rows: steps checked only"
            _stdout().print(f"saga {saga_id}: the record is intact ({signed}chained{legacy})")
        else:
            console = _stdout()
            console.print(f"saga {saga_id}: the record is BROKEN ({len(verdict.problems)} problems)")
            for problem in verdict.problems:
                console.print(f"  - {problem}")
        return ExitCode.OK if verdict.ok else ExitCode.CHECK_FAILED

    _execute(ctx, work)


@app.command()
@store_options
def replay(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="ID", help="The saga id.")],
    as_json: JsonOption = False,
) -> None:
    """Rebuild a plan saga from its records, calling no tool; exit 4 if the record diverges from the plan."""

    async def work(store: SagaStore) -> ExitCode:
        await _get(store, saga_id)  # a missing saga is "not found", not a divergence
        result = await SagaExecutor(ToolRegistry(), store=store).replay(saga_id)
        if as_json:
            _json(result.to_dict())
        else:
            _stdout().print(
                f"saga {saga_id}: replayed {len(result.steps)} steps from the record, no tool called; "
                f"the record agrees with its plan ({result.status.value})"
            )
        return ExitCode.OK

    _execute(ctx, work)


# -- operating -------------------------------------------------------------------------------------------------


@app.command("import")
@store_options
def import_command(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(metavar="FILE", help="An export: one document, a JSON list, or JSON lines.")],
) -> None:
    """Import exported sagas into the store (the same saga again is a no-op; other content under its id, exit 5)."""
    documents = _read_exports(file)

    async def work(store: SagaStore) -> ExitCode:
        with Progress(
            SpinnerColumn(),
            TextColumn("importing"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=_stderr(),
            transient=True,
        ) as progress:
            task = progress.add_task("import", total=len(documents))
            for document in documents:
                await store.import_saga(document)
                progress.advance(task)
        steps = sum(len(d.get("steps", [])) for d in documents)
        _stdout().print(f"imported {len(documents)} saga(s), {steps} steps, into {store.url}")
        return ExitCode.OK

    _execute(ctx, work, create=True)


def _read_exports(file: Path) -> list[dict[str, Any]]:
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        _error(f"cannot read {file}: {exc.strerror or exc}", ExitCode.USAGE)
    try:
        loaded: Any = json.loads(text)
        documents = loaded if isinstance(loaded, list) else [loaded]
    except json.JSONDecodeError:
        try:
            documents = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            _error(
                f"{file} is not JSON (line {exc.lineno}: {exc.msg}); give a file `{PROG} export` wrote", ExitCode.STORE
            )
    if not documents or not all(isinstance(d, dict) for d in documents):
        _error(f"{file} holds no saga export; give a file `{PROG} export` wrote", ExitCode.STORE)
    return documents


class _Ticker:
    """A hook that moves a progress display on as each recovered saga finishes."""

    def __init__(self, progress: Progress, task: Any) -> None:
        self.progress = progress
        self.task = task
        self.finished: dict[str, str] = {}

    def __call__(self, event: SagaEvent) -> None:
        if event.kind == "saga_finished":
            self.finished[event.saga_id] = event.status or "?"
            self.progress.update(self.task, completed=len(self.finished), description=f"last: {event.saga_id}")


def _outcome_code(results: list[SagaResult]) -> ExitCode:
    bad = {SagaStatus.COMPENSATION_FAILED, SagaStatus.PARKED}
    return ExitCode.NOT_UNDONE if any(r.status in bad for r in results) else ExitCode.OK


@app.command()
@store_options
def recover(
    ctx: typer.Context,
    tools: ToolsOption,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Claim at most this many sagas at a time.")] = 100,
    as_json: JsonOption = False,
) -> None:
    """Take over every live saga whose owner is gone and drive it to its end, with your tools."""
    registry = _registry(tools)

    async def work(store: SagaStore) -> ExitCode:
        with Progress(
            SpinnerColumn(),
            TextColumn("recovering"),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=_stderr(),
            transient=True,
        ) as progress:
            ticker = _Ticker(progress, progress.add_task("", total=None))
            executor = SagaExecutor(registry, store=store, hooks=[ticker])
            results = await executor.recover(limit=limit)
        if as_json:
            _json([{"saga_id": r.saga_id, "status": r.status.value, "error": r.error} for r in results])
        else:
            _print_outcomes(results, f"recovered {len(results)} saga(s) in {store.url}")
        return _outcome_code(results)

    _execute(ctx, work)


def _print_outcomes(results: list[SagaResult], title: str) -> None:
    console = _stdout()
    console.print(title)
    if not results:
        return
    table = Table(box=None, pad_edge=False, show_header=False)
    for result in results:
        table.add_row(result.saga_id, result.status.value, result.error or "")
    console.print(table)


@app.command("retry-compensation")
@store_options
def retry_compensation(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="ID", help="A COMPENSATION_FAILED saga.")],
    tools: ToolsOption,
) -> None:
    """Run again the compensations of a COMPENSATION_FAILED saga, once the cause is fixed; exit 6 if it fails again."""
    registry = _registry(tools)

    async def work(store: SagaStore) -> ExitCode:
        result = await SagaExecutor(registry, store=store).retry_compensation(saga_id)
        console = _stdout()
        console.print(timeline(result))
        if result.status is SagaStatus.COMPENSATED:
            console.print(f"saga {saga_id}: every effect is undone now (COMPENSATED)")
        else:
            console.print(f"saga {saga_id}: still {result.status.value}; fix the cause and retry again")
        return _outcome_code([result])

    _execute(ctx, work)


@app.command()
@store_options
def unpark(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="ID", help="A PARKED saga.")],
    tools: Annotated[
        str | None,
        typer.Option(
            "--tools",
            "-t",
            help="Your ToolRegistry (module:attribute or path/to/file.py:attribute): with --compensate, undo the "
            "saga here and now. Without it a worker with the tools (recover, serve) does.",
        ),
    ] = None,
    compensate: Annotated[
        bool,
        typer.Option("--compensate", help="Give up on the saga: undo every step it did (now, with --tools)."),
    ] = False,
) -> None:
    """Make a PARKED saga live again; the next `recover` takes it over (or, with --compensate, undoes it)."""
    registry = _registry(tools) if tools else ToolRegistry()

    async def work(store: SagaStore) -> ExitCode:
        undone = await SagaExecutor(registry, store=store).unpark(saga_id, compensate=compensate)
        if undone is not None:
            _stdout().print(timeline(undone))
            _stdout().print(f"saga {saga_id}: compensated by an operator, {undone.status.value}")
            return _outcome_code([undone])
        result = await _get(store, saga_id)
        then = "undoes it" if compensate else "takes it over"
        _stdout().print(f"saga {saga_id} is {result.status.value} again; `{PROG} recover --tools ...` {then}")
        return ExitCode.OK

    _execute(ctx, work)


# -- the web console -------------------------------------------------------------------------------------------


@app.command()
@store_options
def ui(
    ctx: typer.Context,
    tools: DecideToolsOption = None,
    host: Annotated[str, typer.Option("--host", help="Listen here; beyond the loopback a token is required.")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Listen on this port.")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            "--token", envvar=TOKEN_VAR, show_envvar=True, help="Required for every page, API call and action."
        ),
    ] = None,
    check: Annotated[bool, typer.Option("--check", help="Only check that the console can start, and exit.")] = False,
) -> None:
    """Serve the web console: the sagas, their timelines, the approvals inbox, and a JSON API under /api/."""
    registry = _registry(tools) if tools is not None else None
    given = options(ctx)
    try:
        _check_sqlite_file(given.url)
        serve(
            given.url,
            signing_key=given.signing_key,
            registry=registry,
            host=host,
            port=port,
            token=token,
            check=check,
        )
    except CliError as exc:
        _error(str(exc), exc.code)
    except UiError as exc:
        _error(str(exc), ExitCode.USAGE if exc.usage else ExitCode.STORE)
    except StoreError as exc:
        _error(str(exc), ExitCode.STORE)
    except KeyboardInterrupt:
        _error("interrupted", ExitCode.INTERRUPTED)


def _registry(spec: str) -> ToolRegistry:
    try:
        return load_registry(spec)
    except (ImportError, AttributeError, TypeError, ValueError, SyntaxError) as exc:
        _error(str(exc), ExitCode.USAGE)


def run() -> None:
    """Run the command line (the console script's body)."""
    app(prog_name=PROG)


# The approval commands live in a module of their own; importing it registers them on `app`.
from saga_runtime._cli import _decisions, _mcp  # noqa: E402, F401
