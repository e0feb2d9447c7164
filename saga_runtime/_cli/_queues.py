"""The queue commands: `queues` (each queue's depth, state and limits) and `queue pause|resume|drain NAME`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from saga_runtime._admin import SagaAdmin
from saga_runtime._cli._common import PROG, ExitCode, _error, _execute, _json, _stdout, app
from saga_runtime._cli._options import JsonOption, store_options
from saga_runtime._cli._render import duration
from saga_runtime._records import QueueInfo
from saga_runtime._storage import SagaStore


def _row(info: QueueInfo) -> dict[str, object]:
    return {**info.model_dump(mode="json"), "state": info.state}


def queues_table(infos: Sequence[QueueInfo], at: datetime) -> Table:
    """Return the table `saga-runtime queues` prints: one queue a row, by name."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("queue", overflow="fold", min_width=8)
    table.add_column("state", no_wrap=True)
    for name in ("queued", "running", "waiting"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("oldest queued", justify="right", no_wrap=True)
    table.add_column("limits", overflow="fold")
    for info in infos:
        age = None if info.oldest_queued_at is None else (at - info.oldest_queued_at).total_seconds()
        state = info.state
        shown = state if state == "active" else f"[bold yellow]{state}[/]"
        table.add_row(
            info.name,
            shown,
            str(info.queued),
            str(info.running),
            str(info.waiting),
            "-" if age is None else f"{duration(max(age, 0.0))} ago",
            info.limits() or "-",
        )
    return table


@app.command("queues")
@store_options
def queues_command(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the queues: sagas queued, running and waiting, the oldest queued, limits, and paused or draining."""

    async def work(store: SagaStore) -> ExitCode:
        infos = await SagaAdmin(store).queues()
        if as_json:
            _json([_row(info) for info in infos])
        elif not infos:
            _stdout().print(f"no queue holds a saga in {store.url}")
        else:
            console = _stdout()
            console.print(queues_table(infos, datetime.now(UTC)))
            console.print(
                f"steer one with `{PROG} queue pause|resume|drain NAME`; list its sagas with `{PROG} list --queue NAME`"
            )
        return ExitCode.OK

    _execute(ctx, work)


class QueueAction(StrEnum):
    """What `saga-runtime queue` does to a queue."""

    pause = "pause"
    resume = "resume"
    drain = "drain"


_SAID = {
    QueueAction.pause: "paused: workers start none of its sagas until `{prog} queue resume {name}`",
    QueueAction.resume: "resumed: workers start its sagas again",
    QueueAction.drain: "draining: workers start none of its sagas; those running finish",
}


@app.command("queue")
@store_options
def queue_command(
    ctx: typer.Context,
    action: Annotated[QueueAction, typer.Argument(metavar="ACTION", help="pause, resume or drain.")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="The queue's name.")],
    as_json: JsonOption = False,
) -> None:
    """Pause, resume or drain a queue (stored: every worker obeys within its interval, at once on PostgreSQL)."""
    if not name or len(name.encode()) > 255 or "\x00" in name:
        _error(f"a queue name must be non-empty text of at most 255 bytes, got {name!r}", ExitCode.USAGE)

    async def work(store: SagaStore) -> ExitCode:
        admin = SagaAdmin(store)
        change = {
            QueueAction.pause: admin.pause_queue,
            QueueAction.resume: admin.resume_queue,
            QueueAction.drain: admin.drain_queue,
        }[action]
        info = await change(name)
        if as_json:
            _json(_row(info))
        else:
            said = _SAID[action].format(prog=PROG, name=name)
            _stdout().print(
                f"queue {name} {said} ({info.queued} queued, {info.running} running, {info.waiting} waiting)"
            )
        return ExitCode.OK

    _execute(ctx, work)
