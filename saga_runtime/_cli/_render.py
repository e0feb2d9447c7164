"""How the command line draws sagas for people: the list table and the timeline of one saga.

Everything here must read the same without colour (piped, NO_COLOR): styles only repeat what the words say.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from saga_runtime._records import (
    ApprovalRequest,
    SagaResult,
    SagaStatus,
    SagaSummary,
    StepRecord,
    StepStatus,
    Takeover,
    approval_line,
)

__all__ = ["approvals_table", "duration", "saga_table", "timeline"]

_STATUS_STYLE = {
    "SUCCESS": "green",
    "COMPENSATED": "yellow",
    "COMPENSATION_FAILED": "bold red",
    "FAILED": "red",
    "CANCELLED": "magenta",
    "RUNNING": "cyan",
    "COMPENSATING": "cyan",
    "PENDING": "dim",
    "PARKED": "bold magenta",
    "WAITING": "bold yellow",
    "REJECTED": "red",
}
_DETAIL_LIMIT = 300  # characters of args/results shown with --verbose; `show --json` has them whole


def duration(seconds: float | None) -> str:
    """Return a duration for people: 0.5ms, 1.23s, 2m05s; '-' when unknown."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.1f}ms"
    if seconds < 120:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _offset(start: datetime, value: datetime | None) -> str:
    return "" if value is None else "+" + duration(max(0.0, (value - start).total_seconds()))


def _status(value: str) -> Text:
    return Text(value, style=_STATUS_STYLE.get(value, ""))


def _short(value: Any) -> str:
    return _cut(json.dumps(value, ensure_ascii=False, default=str), _DETAIL_LIMIT)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def saga_table(summaries: Sequence[SagaSummary], *, width: int = 120) -> Table:
    """Return the table `saga-runtime list` prints: one saga a row, newest first; errors when `width` allows."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("saga", overflow="fold", min_width=12)
    table.add_column("status", no_wrap=True)
    table.add_column("why", no_wrap=True)  # how it ended, or what it waits for
    table.add_column("steps", justify="right", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    with_errors = width >= 120
    if with_errors:
        table.add_column("error", overflow="fold")
    for item in summaries:
        took = None if item.finished_at is None else (item.finished_at - item.created_at).total_seconds()
        cells: list[str | Text] = [
            item.saga_id if item.kind == "plan" else f"{item.saga_id} (dynamic)",
            _status(item.status.value),
            _why(item),
            str(item.step_count),
            item.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            duration(took),
            f"{item.cost:g}" if item.cost else "-",
            str(item.tokens) if item.tokens else "-",
        ]
        if with_errors:
            cells.append(_cut(item.error or "", 60))  # one line a saga: `show ID` has the error whole
        table.add_row(*cells)
    return table


def _why(item: SagaSummary) -> str:
    """Return how a saga ended ("budget", ...) or what it waits for ("tool", ...); "-" for neither."""
    if item.end_reason is not None:
        return item.end_reason
    if item.waiting_for is not None:
        return f"waits: {item.waiting_for['kind']}"
    return "-"


def approvals_table(requests: Sequence[ApprovalRequest]) -> Table:
    """Return the table `saga-runtime approvals` prints: one waiting step a row, oldest first."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for name in ("saga", "step", "tool", "arguments", "requested (UTC)", "deadline (UTC)", "args digest"):
        table.add_column(name, overflow="fold")
    for request in requests:
        table.add_row(
            request.saga_id,
            request.step_id,
            request.tool_name,
            _short(request.args),
            request.requested_at.strftime("%Y-%m-%d %H:%M:%S"),
            "-" if request.deadline is None else request.deadline.strftime("%Y-%m-%d %H:%M:%S"),
            request.args_digest[:12],
        )
    return table


def _header(result: SagaResult) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("status", _status(result.status.value))
    grid.add_row("kind", result.kind if result.function is None else f"saga function {result.function}")
    grid.add_row("created", _when(result.created_at))
    total = None if result.finished_at is None else (result.finished_at - result.created_at).total_seconds()
    grid.add_row(
        "finished", "not yet" if result.finished_at is None else f"{_when(result.finished_at)}, took {duration(total)}"
    )
    counts = Counter(record.status.value for record in result.steps)
    groups = len({record.group for record in result.steps})
    tally = ", ".join(f"{count} {status}" for status, count in counts.items())
    steps = f"{_plural(len(result.steps), 'step')} in {_plural(groups, 'group')}"
    grid.add_row("steps", f"{steps}: {tally}" if tally else steps)
    grid.add_row("cost", f"{result.cost:g}, {_plural(result.tokens, 'token')}")
    if result.output is not None:
        grid.add_row("output", _short(result.output))
    if result.parent_id is not None:
        grid.add_row(
            "parent", f"{result.parent_id} (this saga is one step of it: saga-runtime show {result.parent_id})"
        )
    if result.children:
        grid.add_row("children", ", ".join(result.children))
    if result.metadata:
        grid.add_row("metadata", _short(result.metadata))
    if result.error:
        grid.add_row("error", Text(result.error, style="red"))
    if result.end_reason is not None:
        grid.add_row("ended", result.end_reason)
    if result.effects_standing:
        standing = ", ".join(result.effects_standing)
        grid.add_row("standing", Text(f"{standing}: its effect stands, not undone (no compensate)", style="yellow"))
    if result.waiting_for is not None:
        grid.add_row("waits for", f"{result.waiting_for['kind']}: {result.waiting_for['detail']}")
    if result.cancel is not None:
        why = f": {result.cancel.reason}" if result.cancel.reason else ""
        came = {"compensating": " (it was compensating already)", "ignored": " (ignored: it had ended)"}
        outcome = came.get(result.cancel.outcome or "", "")
        grid.add_row("cancelled", f"asked {_when(result.cancel.at)} by {result.cancel.by}{why}{outcome}")
    if result.takeovers:
        grid.add_row("takeovers", _plural(len(result.takeovers), "takeover") + " (see the timeline)")
    return grid


def _step_line(record: StepRecord, id_width: int, tool_width: int, start: datetime) -> Text:
    line = Text()
    line.append(f"{record.step_id:<{id_width}}  ", style="bold")
    line.append(f"{record.tool_name:<{tool_width}}  ")
    line.append_text(_status(f"{record.status.value:<19}"))
    if record.attempts == 0:
        line.append("  never ran")
        return line
    line.append(f"  {_plural(record.attempts, 'attempt'):<11} {duration(record.duration):>8}")
    if record.started_at is not None:
        line.append(f"  started {_offset(start, record.started_at)}", style="dim")
    return line


def _step_details(
    record: StepRecord, start: datetime, verbose: bool, request: ApprovalRequest | None = None
) -> list[Text]:
    details: list[Text] = []
    if request is not None:
        details.append(Text(approval_line(request), style="yellow" if request.decision is None else ""))
    if verbose:
        details.append(Text(f"args: {_short(record.args)}"))
        if record.result is not None:
            details.append(Text(f"result: {_short(record.result)}"))
        details.append(Text(f"idempotency key: {record.idempotency_key}", style="dim"))
    if record.error:
        details.append(Text(f"error: {record.error}", style="red"))
    comp_attempts = _plural(record.compensation_attempts, "attempt")
    if record.compensated_at is not None:
        details.append(
            Text(
                f"undone by compensate() at {_offset(start, record.compensated_at)}, after {comp_attempts}",
                style="yellow",
            )
        )
        if record.compensation_error:
            details.append(Text(f"an earlier compensation attempt failed: {record.compensation_error}", style="dim"))
    elif record.status is StepStatus.COMPENSATION_FAILED or record.compensation_error:
        details.append(
            Text(
                f"NOT undone: compensate() gave up after {comp_attempts}: {record.compensation_error}", style="bold red"
            )
        )
    elif record.status is StepStatus.FAILED:
        details.append(Text("not compensated: it raised, so it had no effect", style="dim"))
    elif record.status is StepStatus.REJECTED:
        details.append(Text("never ran, so nothing to undo", style="dim"))
    return details


def _takeover_line(takeover: Takeover, start: datetime) -> Text:
    before = takeover.from_owner or "nobody (released)"
    return Text(
        f"{_offset(start, takeover.at)}  taken over by {takeover.by} from {before} ({takeover.reason})", style="magenta"
    )


def _spans(record: StepRecord, takeover: Takeover) -> bool:
    """Tell whether a step was started before a takeover and ended (or not yet) after it: two processes ran it."""
    if record.started_at is None or record.started_at > takeover.at:
        return False
    return record.finished_at is None or record.finished_at > takeover.at


def timeline(result: SagaResult, *, verbose: bool = False) -> RenderableType:
    """Return the timeline `saga-runtime show` prints: the saga's facts in a box, then its groups and steps."""
    start = result.created_at
    id_width = max((len(record.step_id) for record in result.steps), default=4)
    tool_width = max((len(record.tool_name) for record in result.steps), default=4)
    tree = Tree(Text("timeline", style="bold"), guide_style="dim")
    by_group: dict[int, list[StepRecord]] = {}
    for record in result.steps:
        by_group.setdefault(record.group, []).append(record)
    requests = {request.step_id: request for request in result.approvals}
    for group, records in sorted(by_group.items()):
        branch = tree.add(Text(f"group {group}", style="bold"))
        for record in records:
            node = branch.add(_step_line(record, id_width, tool_width, start))
            for detail in _step_details(record, start, verbose, requests.get(record.step_id)):
                node.add(detail)
            for takeover in result.takeovers:
                if _spans(record, takeover):
                    node.add(
                        Text(
                            f"ran in two processes: started under {takeover.from_owner or 'an earlier owner'}, "
                            f"taken over by {takeover.by} at {_offset(start, takeover.at)}",
                            style="magenta",
                        )
                    )
    if not result.steps:
        tree.add(Text("no steps", style="dim"))
    if result.takeovers:
        branch = tree.add(Text("takeovers", style="bold"))
        for takeover in result.takeovers:
            branch.add(_takeover_line(takeover, start))
    if result.status in (SagaStatus.COMPENSATED, SagaStatus.COMPENSATION_FAILED):
        tree.add(Text("compensation runs in reverse: the last group first", style="dim"))
    panel = Panel(_header(result), title=f"saga {result.saga_id}", title_align="left", box=box.ROUNDED, expand=False)
    return Group(panel, tree)
