"""What the console's pages and API show of a saga: plain data built from records, secrets masked, times to scale.

Nothing here is HTML: the templates escape every string they are given, and the API serialises the same data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from saga_runtime._records import (
    ApprovalRequest,
    SagaResult,
    SagaStatus,
    SagaSummary,
    StepRecord,
    Takeover,
    VerifyResult,
    approval_line,
    mask_secrets,
)

__all__ = [
    "STATUSES",
    "Bar",
    "StepView",
    "TakeoverMark",
    "TimelineView",
    "approval_data",
    "duration",
    "result_data",
    "shown_json",
    "summary_data",
    "timeline",
]

_JSON_LIMIT = 4000  # characters of an argument or result shown on a page; the API and `export` have them whole
_MIN_WIDTH = 0.6  # percent: a step too short to see at this scale is still drawn


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


def shown_json(value: Any, limit: int = _JSON_LIMIT) -> str:
    """Return a JSON value as indented text for a page, secrets masked, cut at `limit` characters."""
    text = json.dumps(mask_secrets(value), indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Bar:
    """One span drawn on a step's track: `left` and `width` in percent of the saga's time."""

    kind: str  # "run", "wait" (for a decision) or "undo" (the moment compensate() finished)
    left: float
    width: float
    label: str


@dataclass(frozen=True)
class TakeoverMark:
    """A takeover drawn across the timeline: where (percent of the saga's time), and what happened."""

    left: float
    label: str


@dataclass(frozen=True)
class StepView:
    """A step as the timeline shows it."""

    record: StepRecord
    args: str
    result: str | None
    took: str
    started: str
    bars: list[Bar]
    approval: ApprovalRequest | None
    approval_text: str | None


@dataclass(frozen=True)
class TimelineView:
    """A saga as its timeline page shows it: facts, groups of steps drawn to scale, and the compensations."""

    result: SagaResult
    took: str
    metadata: str | None
    groups: list[tuple[int, list[StepView]]]
    ticks: list[tuple[float, str]]
    undone: list[StepRecord]
    verified: bool
    problems: list[str] = field(default_factory=list)
    takeovers: list[TakeoverMark] = field(default_factory=list)


def _seconds(start: datetime, value: datetime) -> float:
    return max(0.0, (value - start).total_seconds())


def _end_of(result: SagaResult, current: datetime) -> datetime:
    """Return the last moment the record knows of (now, for a saga not finished)."""
    moments = [result.created_at]
    for record in result.steps:
        moments += [m for m in (record.started_at, record.finished_at, record.compensated_at) if m is not None]
    for request in result.approvals:
        moments += [m for m in (request.requested_at, request.decided_at) if m is not None]
    if result.finished_at is not None:
        moments.append(result.finished_at)
    if not result.status.is_terminal:
        moments.append(current)
    return max(moments)


def _undo_starts(steps: list[StepRecord]) -> dict[str, datetime]:
    """Return when each undone step's compensation began.

    Compensation undoes the groups in reverse, one group at a time: a group's undo starts when the later groups'
    last undo ended, and the first one when the saga's last step did.
    """
    ran = [r.finished_at for r in steps if r.finished_at is not None]
    starts = {}
    for record in steps:
        if record.compensated_at is None:
            continue
        later = [r.compensated_at for r in steps if r.group > record.group and r.compensated_at is not None]
        begin = max(later) if later else max(ran, default=record.compensated_at)
        starts[record.step_id] = min(begin, record.compensated_at)
    return starts


def _bars(
    record: StepRecord,
    request: ApprovalRequest | None,
    undo_start: datetime | None,
    start: datetime,
    span: float,
    end: datetime,
    takeovers: list[Takeover],
) -> list[Bar]:
    def place(kind: str, begin: datetime, until: datetime, label: str) -> Bar:
        left = 100.0 * _seconds(start, begin) / span
        width = max(_MIN_WIDTH, 100.0 * _seconds(begin, until) / span)
        return Bar(kind, round(min(left, 100.0 - _MIN_WIDTH), 3), round(min(width, 100.0 - left), 3), label)

    bars = []
    if request is not None:
        decided = request.decided_at or end
        bars.append(
            place(
                "wait",
                request.requested_at,
                decided,
                f"waited {duration(_seconds(request.requested_at, decided))} for a decision",
            )
        )
    if record.started_at is not None:
        finished = record.finished_at or end
        attempts = f"{record.attempts} attempt{'s' if record.attempts != 1 else ''}"
        label = f"{record.status.value}, {attempts}, {duration(record.duration)}"
        # A step that ran across takeovers ran in several processes: one bar per process, not one bar.
        cuts = [t for t in takeovers if record.started_at < t.at < finished]
        begin, owner = record.started_at, cuts[0].from_owner if cuts else None
        for cut in cuts:
            bars.append(place("run", begin, cut.at, f"{label}; under {owner or 'its first owner'}"))
            begin, owner = cut.at, cut.by
        last = f"{label}; under {owner}" if cuts else label
        bars.append(place("run resumed" if cuts else "run", begin, finished, last))
    if record.compensated_at is not None:
        began = undo_start or record.compensated_at
        took = duration(_seconds(began, record.compensated_at))
        bars.append(place("undo", began, record.compensated_at, f"undone by compensate() in about {took}"))
    return bars


def timeline(result: SagaResult, verdict: VerifyResult, *, current: datetime | None = None) -> TimelineView:
    """Return the timeline of a saga: every step's spans in percent of the time from its creation to its end."""
    start = result.created_at
    end = _end_of(result, current or datetime.now(UTC))
    span = max(_seconds(start, end), 0.001)
    requests = {request.step_id: request for request in result.approvals}
    undo_starts = _undo_starts(result.steps)
    groups: dict[int, list[StepView]] = {}
    for record in result.steps:
        request = requests.get(record.step_id)
        groups.setdefault(record.group, []).append(
            StepView(
                record=record,
                args=shown_json(record.args),
                result=None if record.result is None else shown_json(record.result),
                took=duration(record.duration),
                started="" if record.started_at is None else "+" + duration(_seconds(start, record.started_at)),
                bars=_bars(record, request, undo_starts.get(record.step_id), start, span, end, result.takeovers),
                approval=request,
                approval_text=None if request is None else approval_line(request),
            )
        )
    took = None if result.finished_at is None else _seconds(start, result.finished_at)
    undone = sorted((r for r in result.steps if r.compensated_at is not None), key=lambda r: r.compensated_at or start)
    return TimelineView(
        result=result,
        took=duration(took),
        metadata=shown_json(result.metadata) if result.metadata else None,
        groups=sorted(groups.items()),
        ticks=[(float(p), duration(span * p / 100)) for p in (0, 25, 50, 75, 100)],
        undone=undone,
        verified=verdict.ok,
        problems=list(verdict.problems),
        takeovers=[
            TakeoverMark(
                round(min(100.0, 100.0 * _seconds(start, t.at) / span), 3),
                f"+{duration(_seconds(start, t.at))} taken over by {t.by} from {t.from_owner or 'nobody'} ({t.reason})",
            )
            for t in result.takeovers
        ],
    )


def summary_data(summary: SagaSummary) -> dict[str, Any]:
    """Return a saga's line of the list as JSON-able data."""
    data = summary.model_dump(mode="json")
    took = None if summary.finished_at is None else _seconds(summary.created_at, summary.finished_at)
    data["duration"] = took
    return data


def approval_data(request: ApprovalRequest) -> dict[str, Any]:
    """Return an approval request as JSON-able data, secrets masked."""
    data = request.model_dump(mode="json")
    data["args"] = mask_secrets(data["args"])
    return data


def result_data(result: SagaResult, verdict: VerifyResult) -> dict[str, Any]:
    """Return a saga's whole record as JSON-able data, secrets masked, with whether its record verifies."""
    data = result.to_dict()
    for step in data["steps"]:
        step["args"] = mask_secrets(step["args"])
        step["result"] = mask_secrets(step["result"])
    data["metadata"] = mask_secrets(data["metadata"])
    for request in data["approvals"]:
        request["args"] = mask_secrets(request["args"])
    data["verified"] = {"ok": verdict.ok, "signed": verdict.signed, "problems": list(verdict.problems)}
    return data


STATUSES = [status.value for status in SagaStatus]
