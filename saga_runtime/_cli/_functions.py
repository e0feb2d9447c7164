"""The saga function commands: `submit` (a saga function, queued for a worker) and `send` (a message to one)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from saga_runtime._cli._common import PROG, ExitCode, _error, _execute, _json, _registry, _stdout, app
from saga_runtime._cli._options import JsonOption, ToolsOption, store_options
from saga_runtime._exceptions import IdempotencyConflictError, PlanValidationError, SagaError
from saga_runtime._executor import SagaExecutor
from saga_runtime._storage import SagaStore
from saga_runtime._tools import ToolRegistry


def _json_argument(text: str, what: str) -> Any:
    """Return the JSON value of a command-line argument; exit 2 naming it when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError as exc:
        _error(f"{what} is not JSON ({exc}): {text!r}", ExitCode.USAGE)


@app.command()
@store_options
def submit(
    ctx: typer.Context,
    function: Annotated[str, typer.Argument(metavar="FUNCTION", help="The saga function's registered name.")],
    tools: ToolsOption,
    args: Annotated[str, typer.Option("--args", "-a", help="The function's arguments, a JSON object.")] = "{}",
    saga_id: Annotated[str | None, typer.Option("--id", help="The saga's id (its idempotency key).")] = None,
    queue: Annotated[str, typer.Option("--queue", "-q", help="The queue a worker takes it from.")] = "default",
    as_json: JsonOption = False,
) -> None:
    """Queue a saga function (registered with @registry.saga in --tools) for a worker; print its saga id."""
    registry = _registry(tools)
    arguments = _json_argument(args, "the --args value")
    if not isinstance(arguments, dict):
        _error(f"--args takes a JSON object of the function's arguments, got {args!r}", ExitCode.USAGE)

    async def work(store: SagaStore) -> ExitCode:
        executor = SagaExecutor(registry, store=store)
        try:
            handle = await executor.submit(function, args=arguments, saga_id=saga_id, queue=queue)
        except PlanValidationError as exc:
            _error(str(exc), ExitCode.USAGE)
        except IdempotencyConflictError as exc:
            _error(str(exc), ExitCode.WRONG_STATE)
        status = await handle.status()
        if as_json:
            _json({"saga_id": handle.saga_id, "function": function, "queue": queue, "status": status.value})
        else:
            _stdout().print(
                f"saga {handle.saga_id} ({function}) is {status.value} in queue {queue!r}; "
                f"`{PROG} show {handle.saga_id}` follows it"
            )
        return ExitCode.OK

    _execute(ctx, work, create=True)


@app.command()
@store_options
def send(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="SAGA", help="The saga to send the message to.")],
    topic: Annotated[str, typer.Argument(metavar="TOPIC", help="The topic its saga.recv(TOPIC) waits on.")],
    message: Annotated[str, typer.Argument(metavar="JSON", help="The message, a JSON value.")],
    key: Annotated[
        str | None, typer.Option("--key", help="An idempotency key: a key used before stores nothing.")
    ] = None,
) -> None:
    """Send a message (JSON) to a saga's TOPIC; its saga.recv receives it once."""
    value = _json_argument(message, "the message")

    async def work(store: SagaStore) -> ExitCode:
        try:
            await SagaExecutor(ToolRegistry(), store=store).send(saga_id, topic, value, idempotency_key=key)
        except SagaError as exc:
            _error(str(exc), ExitCode.WRONG_STATE)
        except (TypeError, ValueError) as exc:
            _error(str(exc), ExitCode.USAGE)
        _stdout().print(f"sent to saga {saga_id} on {topic!r}")
        return ExitCode.OK

    _execute(ctx, work)
