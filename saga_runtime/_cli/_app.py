"""The commands of `saga-runtime`: typer for the arguments, rich for what people read, JSON for scripts."""

from __future__ import annotations

import enum
import getpass
import json
import logging
import os
import signal
import socket
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from saga_runtime._admin import BulkSummary, SagaAdmin
from saga_runtime._cli._common import (
    PROG,
    CliError,
    ExitCode,
    _check_sqlite_file,
    _error,
    _execute,
    _get,
    _json,
    _outcome_code,
    _registry,
    _stderr,
    _stdout,
    app,
)
from saga_runtime._cli._load import load_queues, parse_since
from saga_runtime._cli._options import DecideToolsOption, JsonOption, ToolsOption, options, store_options
from saga_runtime._cli._render import saga_table, timeline
from saga_runtime._cli._retention import verify_file
from saga_runtime._cli._serving import HealthServer, store_probe, use_json_logs
from saga_runtime._cli._ui import TOKEN_VAR, UiError, serve
from saga_runtime._engine import SagaEvent
from saga_runtime._exceptions import (
    StoreError,
)
from saga_runtime._executor import SagaExecutor
from saga_runtime._records import END_REASONS, SagaResult, SagaStatus
from saga_runtime._storage import SagaStore, sagas

__all__ = ["ExitCode", "app", "run"]


class LogFormat(enum.StrEnum):
    """How the worker writes its log lines."""

    TEXT = "text"
    JSON = "json"


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
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only sagas submitted to this queue.")] = None,
    reason: Annotated[
        str | None,
        typer.Option("--reason", "-r", help=f"Only sagas that ended for this reason ({', '.join(END_REASONS)})."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List stored sagas, newest first."""
    if reason is not None and reason not in END_REASONS:
        _error(f"unknown reason {reason!r}: use one of {', '.join(END_REASONS)}", ExitCode.USAGE)
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
        if queue is None:
            summaries = await sagas.list_sagas(store, wanted, limit=limit, offset=offset, reason=reason)
        else:
            admin = SagaAdmin(store)
            summaries = await admin.list_sagas(wanted, limit=limit, offset=offset, queue=queue, reason=reason)
        # Newest first: the sagas younger than the cutoff are a prefix of every page.
        summaries = [s for s in summaries if cutoff is None or s.created_at >= cutoff]
        if as_json:
            _json([s.model_dump(mode="json") for s in summaries])
        elif not summaries:
            where = f" in queue {queue!r}" if queue is not None else ""
            _stdout().print(f"no sagas{' ' + wanted.value if wanted else ''}{where} in {store.url}")
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
            _json({**result.to_dict(), "children": result.children})  # parent_id is a field; its children read
        else:
            _stdout().print(timeline(result, verbose=verbose))
        return ExitCode.OK

    _execute(ctx, work)


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
        document = await sagas.export_saga(store, saga_id)
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
    saga_id: Annotated[str | None, typer.Argument(metavar="ID", help="The saga id.")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", help="Check every saga of an export or archive file instead (offline).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Check a saga's hash chain; exit 4, listing the problems, when a record was altered, removed or moved."""
    if (saga_id is None) == (file is None):
        _error("give a saga ID, or --file FILE (an export or a purge's archive), not both", ExitCode.USAGE)
    if file is not None:
        verify_file(ctx, file, as_json)
    assert saga_id is not None

    async def work(store: SagaStore) -> ExitCode:
        verdict = await sagas.verify_saga(store, saga_id)
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
        result = await SagaAdmin(store).replay(saga_id)
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
                await sagas.import_saga(store, document)
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
            try:
                results = await executor.recover(limit=limit)
            finally:
                await executor.aclose()  # the tools' lifespan, if recovery entered it
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
    tools: ToolsOption,
    saga_id: Annotated[str | None, typer.Argument(metavar="[ID]", help="A COMPENSATION_FAILED saga.")] = None,
    every: Annotated[bool, typer.Option("--all", help="Every COMPENSATION_FAILED saga, each once.")] = False,
    since: Annotated[
        str | None, typer.Option("--since", help="With --all: only sagas that failed in this age (1h, 2d) or since.")
    ] = None,
) -> None:
    """Run again the compensations of a COMPENSATION_FAILED saga, once the cause is fixed; exit 6 if it fails again."""
    _one_or_all(saga_id, every, since=since)
    cutoff = _since(since)
    registry = _registry(tools)

    async def work(store: SagaStore) -> ExitCode:
        admin = SagaAdmin(store, registry=registry)
        try:
            if saga_id is None:
                return _bulk(await admin.retry_compensations(since=cutoff))
            result = await admin.retry_compensation(saga_id)
        finally:
            await admin.aclose()  # the tools' lifespan, if an action entered it
        console = _stdout()
        console.print(timeline(result))
        if result.status is SagaStatus.COMPENSATED:
            console.print(f"saga {saga_id}: every effect is undone now (COMPENSATED)")
        else:
            console.print(f"saga {saga_id}: still {result.status.value}; fix the cause and retry again")
        return _outcome_code([result])

    _execute(ctx, work)


def _one_or_all(saga_id: str | None, every: bool, *, since: str | None = None) -> None:
    """Refuse a command given both an ID and --all, or neither; --since only with --all."""
    if (saga_id is None) != every:
        _error("give one saga ID, or --all", ExitCode.USAGE)
    if since is not None and not every:
        _error("--since goes with --all", ExitCode.USAGE)


def _since(since: str | None) -> datetime | None:
    if since is None:
        return None
    try:
        return parse_since(since)
    except ValueError as exc:
        _error(str(exc), ExitCode.USAGE)


def _bulk(summary: BulkSummary) -> ExitCode:
    """Print what a bulk action did, a line a saga and the summary; exit 5 if it failed on one, 6 if not undone."""
    table = Table(box=None, pad_edge=False, show_header=False)
    for saga_id, result in summary.results.items():
        table.add_row(saga_id, "left to a worker with its tools" if result is None else result.status.value)
    for saga_id, error in summary.errors.items():
        table.add_row(saga_id, "FAILED", error)
    console = _stdout()
    if summary.results or summary.errors:
        console.print(table)
    console.print(str(summary))
    if summary.errors:
        return ExitCode.WRONG_STATE
    return ExitCode.NOT_UNDONE if summary.failed else ExitCode.OK


@app.command()
@store_options
def unpark(
    ctx: typer.Context,
    saga_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="A PARKED saga, or one stuck waiting for missing tools.")
    ] = None,
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
    every: Annotated[bool, typer.Option("--all", help="Every PARKED saga, each once.")] = False,
) -> None:
    """Make a PARKED saga live again; the next `recover` takes it over (or, with --compensate, undoes it).

    With --compensate and --tools, a saga stuck waiting for a tool no worker has is given up on too: the tools
    present undo what they can, each step of a missing tool ends COMPENSATION_FAILED.
    """
    _one_or_all(saga_id, every)
    registry = _registry(tools) if tools else None

    async def work(store: SagaStore) -> ExitCode:
        admin = SagaAdmin(store, registry=registry)
        try:
            if saga_id is None:
                return _bulk(await admin.unpark_all(compensate=compensate))
            undone = await admin.unpark(saga_id, compensate=compensate)
        finally:
            await admin.aclose()  # the tools' lifespan, if an action entered it
        if undone is not None:
            _stdout().print(timeline(undone))
            _stdout().print(f"saga {saga_id}: compensated by an operator, {undone.status.value}")
            return _outcome_code([undone])
        result = await _get(store, saga_id)
        then = "undoes it" if compensate else "takes it over"
        _stdout().print(f"saga {saga_id} is {result.status.value} again; `{PROG} recover --tools ...` {then}")
        return ExitCode.OK

    _execute(ctx, work)


@app.command()
@store_options
def cancel(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="ID", help="The saga to cancel.")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why; recorded in the saga's error.")] = None,
    by: Annotated[
        str | None, typer.Option("--by", help="Who asks, recorded with the cancel (default: cli:USER@HOST).")
    ] = None,
) -> None:
    """Cancel a saga: a QUEUED one ends at once; a running or waiting one is asked to stop and compensate."""

    async def work(store: SagaStore) -> ExitCode:
        result = await SagaAdmin(store).cancel(saga_id, reason=reason, by=by or _operator())
        if result.status.is_terminal:
            _stdout().print(f"saga {saga_id}: {result.status.value}" + (f" ({result.error})" if result.error else ""))
        else:
            _stdout().print(f"saga {saga_id}: {result.status.value}, asked to stop; its owner compensates it")
        return ExitCode.OK

    _execute(ctx, work)


def _operator() -> str:
    """Return who runs this command: "cli:" and the user at the host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container)
        user = str(os.getuid())
    return f"cli:{user}@{socket.gethostname()}"


@app.command()
@store_options
def worker(
    ctx: typer.Context,
    tools: ToolsOption,
    queues: Annotated[
        str | None,
        typer.Option(
            "--queues", "-q", help="A list of Queue objects (module:attribute); without it, the `default` queue."
        ),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", min=1, help="Drive at most this many sagas at once here.")
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=0, max=65535, help="Serve Prometheus metrics on this port (loopback)."),
    ] = None,
    executor_id: Annotated[
        str | None, typer.Option("--executor-id", help="This worker's executor id (unique per live process).")
    ] = None,
    lease_timeout: Annotated[
        float, typer.Option("--lease-timeout", min=0.1, help="Seconds unrenewed before recovery takes a saga over.")
    ] = 30.0,
    interval: Annotated[
        float | None,
        typer.Option("--interval", min=0.001, help="Seconds between an idle worker's looks for queued sagas."),
    ] = None,
    compensation_timeout: Annotated[
        float,
        typer.Option(
            "--compensation-timeout", min=0.001, help="Seconds a stop waits for running tool code (and bounds an undo)."
        ),
    ] = 300.0,
    health_port: Annotated[
        int | None,
        typer.Option(
            "--health-port", min=0, max=65535, help="Serve /healthz and /readyz on this port (see --health-host)."
        ),
    ] = None,
    health_host: Annotated[
        str, typer.Option("--health-host", help="The address --health-port listens on (0.0.0.0 for a pod's probes).")
    ] = "127.0.0.1",
    log_format: Annotated[
        LogFormat, typer.Option("--log-format", help="Log lines as text, or as one JSON object a line.")
    ] = LogFormat.TEXT,
) -> None:
    """Run queued sagas and recover orphans until SIGTERM or SIGINT; then stop without compensating anything."""
    if log_format is LogFormat.JSON:
        use_json_logs(logging.getLogger("saga_runtime"))
    registry = _registry(tools)
    served = None
    if queues is not None:
        try:
            served = load_queues(queues)
        except (ImportError, AttributeError, TypeError, ValueError, SyntaxError) as exc:
            _error(str(exc), ExitCode.USAGE)

    async def work(store: SagaStore) -> ExitCode:
        hooks: list[Any] = []
        server = None
        if metrics_port is not None:
            from saga_runtime.metrics import PrometheusHook, start_metrics_server

            hook = PrometheusHook()
            hooks.append(hook)
            server = start_metrics_server(metrics_port, hook)
        executor = SagaExecutor(
            registry,
            store=store,
            hooks=hooks,
            executor_id=executor_id,
            lease_timeout=lease_timeout,
            compensation_timeout=compensation_timeout,
        )
        names = ", ".join(queue.name for queue in served) if served else "default"
        try:
            health = (
                None
                if health_port is None
                else HealthServer(
                    health_port, store_probe(lambda saga_id: sagas.get_saga(store, saga_id)), host=health_host
                )
            )
        except OSError as exc:  # the port is taken, or not ours to bind
            raise CliError(f"--health-port {health_port}: cannot listen: {exc}", ExitCode.USAGE) from None
        if health is not None:
            _stderr().print(f"{PROG} worker: health at http://{health.host}:{health.port}/healthz and /readyz")
        try:
            # Entered, the executor takes back at once the sagas a killed process of its id left (API.md §13); it
            # is left once the task group is done, outside its cancelled scope (its lifespan exits whole).
            async with executor, anyio.create_task_group() as tg:

                async def stop_on_signal() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                        async for received in signals:
                            _stderr().print(f"{PROG} worker: {signal.Signals(received).name}, stopping")
                            if health is not None:
                                health.serving = False  # alive while it stops, no longer ready
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(stop_on_signal)
                await anyio.lowlevel.checkpoint()  # the signal handlers are in place before the first saga starts
                _stderr().print(f"{PROG} worker {executor.executor_id}: serving {names} on {store.url}")
                if health is not None:
                    health.serving = True
                await executor.serve(queues=served, concurrency=concurrency, interval=interval)
        finally:
            if health is not None:
                health.serving = False
            if server is not None:
                await anyio.to_thread.run_sync(server.close)
            if health is not None:
                await anyio.to_thread.run_sync(health.close)
        _stderr().print(f"{PROG} worker {executor.executor_id}: stopped; its sagas are released")
        global _worker_stopped
        _worker_stopped = True
        return ExitCode.OK

    _execute(ctx, work)


# Set once a worker has stopped and released its sagas: `run` then exits at once.
_worker_stopped = False


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


def run() -> None:
    """Run the command line (the console script's body).

    A worker that has stopped cleanly exits without tearing the interpreter down: freeing its hundreds of modules
    takes longer than the stop itself (0.3-0.7 s on a busy machine), and a deploy waits for the exit.
    """
    try:
        app(prog_name=PROG)
    except SystemExit as done:
        if _worker_stopped:
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(done.code if isinstance(done.code, int) else 1)
        raise


# The approval commands live in a module of their own; importing it registers them on `app`.
from saga_runtime._cli import _decisions, _functions, _mcp, _queues, _schedules  # noqa: E402, F401  (import _common)
