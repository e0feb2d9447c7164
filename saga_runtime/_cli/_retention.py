"""The retention commands (API.md §14): `purge`, `hold`, `unhold`, `holds`, and `verify --file` of an archive."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from saga_runtime._admin import SagaAdmin
from saga_runtime._cli._common import PROG, ExitCode, _error, _execute, _json, _stdout, app
from saga_runtime._cli._load import parse_age
from saga_runtime._cli._options import JsonOption, options, store_options
from saga_runtime._exceptions import StoreError
from saga_runtime._records import verify_export
from saga_runtime._storage import SagaStore

__all__ = ["verify_file"]


@app.command()
@store_options
def purge(
    ctx: typer.Context,
    older_than: Annotated[
        str, typer.Option("--older-than", help="Purge sagas finished longer ago than this (90s, 30m, 1h, 2d, 1w).")
    ],
    status: Annotated[
        list[str] | None,
        typer.Option("--status", "-s", help="A terminal status to purge (repeat it); default SUCCESS and COMPENSATED."),
    ] = None,
    archive: Annotated[
        Path | None, typer.Option("--archive", help="Append each saga's export to this file before it goes.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Change nothing; list what would go.")] = False,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=0, help="At most this many sagas.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Remove the steps and payloads of old finished sagas, keeping a tombstone of each (held ones stay)."""
    try:
        age = parse_age(older_than, "--older-than")
    except ValueError as exc:
        _error(str(exc), ExitCode.USAGE)
    statuses = [s.upper() for s in status] if status else None

    async def work(store: SagaStore) -> ExitCode:
        report = await SagaAdmin(store).purge(
            older_than=age, statuses=statuses, archive=archive, dry_run=dry_run, limit=limit
        )
        if as_json:
            _json(
                {
                    "count": report.count,
                    "saga_ids": report.saga_ids,
                    "archived_to": report.archived_to,
                    "dry_run": report.dry_run,
                }
            )
            return ExitCode.OK
        console = _stdout()
        verb = "would purge" if report.dry_run else "purged"
        where = f", archived to {report.archived_to}" if report.archived_to and not report.dry_run else ""
        console.print(f"{verb} {report.count} saga(s) finished over {older_than} ago{where}")
        for saga_id in report.saga_ids[:20] if report.dry_run else []:
            console.print(f"  {saga_id}")
        if report.dry_run and report.count > 20:
            console.print(f"  ... and {report.count - 20} more (--json lists them all)")
        return ExitCode.OK

    _execute(ctx, work)


@app.command()
@store_options
def hold(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="SAGA", help="The saga id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is held (a dispute, an audit).")],
) -> None:
    """Hold a saga: it is never purged until `unhold`."""

    async def work(store: SagaStore) -> ExitCode:
        await SagaAdmin(store).hold(saga_id, reason=reason)
        _stdout().print(f"saga {saga_id}: held ({reason}); `{PROG} unhold {saga_id}` releases it")
        return ExitCode.OK

    _execute(ctx, work)


@app.command()
@store_options
def unhold(
    ctx: typer.Context,
    saga_id: Annotated[str, typer.Argument(metavar="SAGA", help="The saga id.")],
) -> None:
    """Release a saga's hold: a later purge may remove it."""

    async def work(store: SagaStore) -> ExitCode:
        released = await SagaAdmin(store).unhold(saga_id)
        _stdout().print(f"saga {saga_id}: " + ("released" if released else "was not held; nothing changed"))
        return ExitCode.OK

    _execute(ctx, work)


@app.command()
@store_options
def holds(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the held sagas, oldest hold first."""

    async def work(store: SagaStore) -> ExitCode:
        found = await SagaAdmin(store).holds()
        if as_json:
            _json([{"saga_id": h.saga_id, "reason": h.reason, "held_at": h.held_at.isoformat()} for h in found])
        elif not found:
            _stdout().print(f"no saga is held in {store.url}")
        for held in [] if as_json else found:
            _stdout().print(f"{held.saga_id}  held {held.held_at:%Y-%m-%d %H:%M:%S}  {held.reason}")
        return ExitCode.OK

    _execute(ctx, work)


def verify_file(ctx: typer.Context, path: Path, as_json: bool) -> None:
    """Check every saga of an export or archive file offline, each on its own; exit 4 when one does not verify.

    A line that is no readable export (a torn write, an edit) fails alone, named by its number; the rest are
    still checked.
    """
    key = options(ctx).signing_key
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        _error(f"cannot read {str(path)!r}: {exc.strerror or exc}", ExitCode.USAGE)
    checks = [_check_entry(number, entry, key) for number, entry in _entries(text)]
    broken = [check for check in checks if not check["ok"]]
    if as_json:
        _json(checks)
    else:
        console = _stdout()
        for check in broken:
            if check["saga_id"] is None:
                console.print(f"line {check['line']}: not a readable saga export")
            else:
                where = f"saga {check['saga_id']} (line {check['line']})"
                console.print(f"{where}: the record is BROKEN ({len(check['problems'])} problems)")
            for problem in check["problems"]:
                console.print(f"  - {problem}")
        console.print(f"{path}: {len(checks) - len(broken)} of {len(checks)} saga(s) intact")
    raise typer.Exit(int(ExitCode.CHECK_FAILED if broken else ExitCode.OK))


def _entries(text: str) -> list[tuple[int, str]]:
    """Return the file's exports as (line number, text): one indented export, or one per non-blank line."""
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped.rstrip():
        try:
            json.loads(text)
        except json.JSONDecodeError:
            pass
        else:
            return [(1, text)]  # one export (`export` writes it indented)
    return [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]


def _check_entry(number: int, entry: str, key: str | None) -> dict[str, Any]:
    """Return the verdict on one export of a file, as `verify --file --json` prints it."""
    verdict: dict[str, Any] = {"line": number, "saga_id": None, "ok": False, "signed": False, "problems": []}
    try:
        document = json.loads(entry)
    except json.JSONDecodeError as exc:
        verdict["problems"] = [f"not whole JSON ({exc}): a torn or edited line"]
        return verdict
    if isinstance(document, dict) and isinstance(document.get("saga"), dict):
        verdict["saga_id"] = document["saga"].get("saga_id")
    try:
        result = verify_export(document, signing_key=key)
    except (StoreError, ValueError, TypeError, AttributeError) as exc:
        verdict["problems"] = [str(exc)]
        return verdict
    verdict.update(saga_id=result.saga_id, ok=result.ok, signed=result.signed, problems=result.problems)
    return verdict
