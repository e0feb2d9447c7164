"""The schedule commands (API.md §18): `schedules` lists them; `schedule pause|resume|delete NAME` steers one."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

import typer
from rich.table import Table

from saga_runtime._cli._common import PROG, ExitCode, _execute, _json, _stdout, app
from saga_runtime._cli._options import JsonOption, store_options
from saga_runtime._records import Schedule
from saga_runtime._schedules import Schedules
from saga_runtime._storage import SagaStore

__all__ = ["ScheduleAction"]


class ScheduleAction(StrEnum):
    """What `schedule` does to a schedule."""

    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"


def _time(value: datetime | None) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S} UTC"


def _as_json(schedule: Schedule) -> dict[str, object]:
    return {
        "name": schedule.name,
        "target": schedule.target,
        "function": schedule.function,
        "args": schedule.args,
        "plan": schedule.plan,
        "cron": schedule.cron,
        "every": schedule.every,
        "timezone": schedule.timezone,
        "queue": schedule.queue,
        "next_tick": schedule.next_tick.isoformat(),
        "last_tick": None if schedule.last_tick is None else schedule.last_tick.isoformat(),
        "paused": schedule.paused,
    }


@app.command("schedules")
@store_options
def list_schedules(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the schedules: name, target, when its ticks fall, next tick, paused."""

    async def work(store: SagaStore) -> ExitCode:
        found = await Schedules(store).all()
        if as_json:
            _json([_as_json(schedule) for schedule in found])
            return ExitCode.OK
        console = _stdout()
        if not found:
            console.print(f"no schedule in {store.url}")
            return ExitCode.OK
        table = Table("name", "target", "when", "queue", "next tick", "last tick", "paused")
        for schedule in found:
            table.add_row(
                schedule.name,
                schedule.target,
                schedule.when,
                schedule.queue,
                "-" if schedule.paused else _time(schedule.next_tick),
                _time(schedule.last_tick),
                "yes" if schedule.paused else "no",
            )
        console.print(table)
        return ExitCode.OK

    _execute(ctx, work)


@app.command("schedule")
@store_options
def steer_schedule(
    ctx: typer.Context,
    action: Annotated[ScheduleAction, typer.Argument(metavar="pause|resume|delete", help="What to do.")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name.")],
) -> None:
    """Pause a schedule (it submits nothing), resume it (from its next tick to come), or delete it."""

    async def work(store: SagaStore) -> ExitCode:
        schedules = Schedules(store)
        console = _stdout()
        try:
            if action is ScheduleAction.DELETE:
                await schedules.delete(name)
                console.print(f"schedule {name}: deleted (the sagas it submitted stay)")
            elif action is ScheduleAction.PAUSE:
                await schedules.pause(name)
                console.print(f"schedule {name}: paused; `{PROG} schedule resume {name}` resumes it")
            else:
                schedule = await schedules.resume(name)
                console.print(f"schedule {name}: resumed; next tick {_time(schedule.next_tick)}")
        except KeyError as exc:
            typer.echo(f"{PROG}: error: {exc.args[0]}", err=True)
            return ExitCode.NOT_FOUND
        return ExitCode.OK

    _execute(ctx, work)
