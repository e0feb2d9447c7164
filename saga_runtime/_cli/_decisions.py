"""The approval commands: `approvals` (the inbox), `approve` and `reject` (a decision, recorded once)."""

from __future__ import annotations

from typing import Annotated

import typer

from saga_runtime._admin import SagaAdmin
from saga_runtime._cli._common import PROG, ExitCode, _execute, _get, _json, _outcome_code, _registry, _stdout, app
from saga_runtime._cli._options import DecideToolsOption, JsonOption, store_options
from saga_runtime._cli._render import approvals_table, timeline
from saga_runtime._records import SagaStatus
from saga_runtime._storage import SagaStore


@app.command()
@store_options
def approvals(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="At most this many requests.")] = 100,
    as_json: JsonOption = False,
) -> None:
    """List the steps waiting for a person's decision, oldest first, across sagas."""

    async def work(store: SagaStore) -> ExitCode:
        pending = await SagaAdmin(store).pending_approvals(limit=limit)
        if as_json:
            _json([request.model_dump(mode="json") for request in pending])
        elif not pending:
            _stdout().print(f"no step waits for a decision in {store.url}")
        else:
            console = _stdout()
            console.print(approvals_table(pending))
            console.print(f"decide with `{PROG} approve SAGA STEP --by NAME` or `{PROG} reject SAGA STEP --by NAME`")
        return ExitCode.OK

    _execute(ctx, work)


ByOption = Annotated[str, typer.Option("--by", help="Who decides (recorded with the decision).")]
NoteOption = Annotated[str | None, typer.Option("--note", help="Why (recorded with the decision).")]


def _decide(
    ctx: typer.Context,
    saga_id: str,
    step_id: str,
    decision: str,
    by: str,
    note: str | None,
    tools: str | None,
    digest: str | None = None,
) -> None:
    registry = _registry(tools) if tools is not None else None

    async def work(store: SagaStore) -> ExitCode:
        await _get(store, saga_id)  # an unknown saga is "not found"
        admin = SagaAdmin(store, registry=registry)
        try:
            if decision == "approved":
                result = await admin.approve(saga_id, step_id, by=by, note=note, args_digest=digest)
            else:
                result = await admin.reject(saga_id, step_id, by=by, note=note)
        finally:
            await admin.aclose()  # the tools' lifespan, if the decision went on with the saga
        console = _stdout()
        if tools is not None and result.status is not SagaStatus.WAITING:
            console.print(timeline(result))
        console.print(f"saga {saga_id}: step {step_id} {decision} by {by}; the saga is {result.status.value}")
        if result.status is SagaStatus.WAITING and result.pending_approvals:
            waiting = ", ".join(request.step_id for request in result.pending_approvals)
            console.print(f"still waiting for a decision on: {waiting}")
        elif tools is None and result.status is SagaStatus.WAITING:
            console.print(f"a worker (`{PROG} recover --tools ...` or executor.serve()) goes on with it")
        return _outcome_code([result])

    _execute(ctx, work)


@app.command()
@store_options
def approve(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="SAGA", help="The saga id.")],
    step_id: Annotated[str, typer.Argument(metavar="STEP", help="The step that waits.")],
    by: ByOption,
    note: NoteOption = None,
    tools: DecideToolsOption = None,
    args_digest: Annotated[
        str | None,
        typer.Option(
            "--args-digest",
            help="The arguments' digest you checked (`approvals --json` shows it): refused, nothing recorded, "
            "if the step's arguments differ.",
        ),
    ] = None,
) -> None:
    """Allow a waiting step to run (recorded once; exit 5 if it was decided already or the digest differs)."""
    _decide(ctx, saga_id, step_id, "approved", by, note, tools, args_digest)


@app.command()
@store_options
def reject(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="SAGA", help="The saga id.")],
    step_id: Annotated[str, typer.Argument(metavar="STEP", help="The step that waits.")],
    by: ByOption,
    note: NoteOption = None,
    tools: DecideToolsOption = None,
) -> None:
    """Refuse a waiting step: it never runs, and its saga compensates (recorded once; exit 5 if decided already)."""
    _decide(ctx, saga_id, step_id, "rejected", by, note, tools)
