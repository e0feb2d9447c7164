"""The ISO text of a time, as `datetime.isoformat` writes it, at about half its cost for UTC times.

isoformat formats each field with C's printf (about 14 K instructions a time; a durable saga writes dozens: the
store's time columns, the seals' times). A saga's times share a few minutes: the text up to the minute is kept,
and the rest formatted by Python. A time that is not a plain UTC `datetime` is given to isoformat itself.

The minute of the last time written is found by two comparisons (`_LAST`): reading the five fields that name a
minute and hashing them costs about three times as much, and a saga's times nearly all fall in the minute before.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

__all__ = ["iso_json", "iso_text", "iso_text_micro"]

_quote = json.encoder.encode_basestring  # the JSON text of a str, as canonical_json writes it

# The text of a time up to its minute, by (year, month, day, hour, minute, separator).
_MINUTES: dict[tuple[int, int, int, int, int, str], str] = {}
_MINUTES_KEPT = 1024
# A second's text and its dot; a second's text and the offset (isoformat drops a zero microsecond).
_SECONDS = tuple(f"{second:02}." for second in range(60))
_WHOLE_SECONDS = tuple(f"{second:02}+00:00" for second in range(60))
# The text of each number of thousandths (and of microseconds within one): a microsecond is two table reads, not a
# %-format (about 1,500 instructions less).
_THREE = tuple(f"{n:03}" for n in range(1000))


def _head(minute: tuple[int, int, int, int, int, str]) -> str:
    if len(_MINUTES) >= _MINUTES_KEPT:
        _MINUTES.clear()
    head = _MINUTES[minute] = f"{minute[0]:04}-{minute[1]:02}-{minute[2]:02}{minute[5]}{minute[3]:02}:{minute[4]:02}:"
    return head


_MINUTE = timedelta(minutes=1)
_NEVER = datetime(1, 1, 1, tzinfo=UTC)
# The last minute written: its first instant, the next minute's, and its text up to the minute with "T" and with " "
# between date and time (a UTC time `value` falls in it when `start <= value < end`: two comparisons of the times'
# bytes, the tzinfo being the same object). Replaced as a whole, so a thread reads one minute's four values.
_LAST: tuple[datetime, datetime, str, str] = (_NEVER, _NEVER, "", "")


def _minute_head(value: datetime, sep: str) -> str:
    """Return the text of a UTC time's minute with `sep` (`_MINUTES`), noting it as the last minute written."""
    global _LAST
    minute = (value.year, value.month, value.day, value.hour, value.minute, sep)
    head = _MINUTES.get(minute) or _head(minute)
    if sep == "T" or sep == " ":
        start = value.replace(second=0, microsecond=0)
        try:
            end = start + _MINUTE
        except OverflowError:  # the last minute of year 9999: not noted (the minute cache has it)
            return head
        _LAST = (start, end, head[:10] + "T" + head[11:], head[:10] + " " + head[11:])
    return head


def iso_text(value: datetime) -> str:
    """Return `value.isoformat()`."""
    if value.tzinfo is not UTC or type(value) is not datetime:
        return value.isoformat()
    start, end, head, _ = _LAST
    if not start <= value < end:
        head = _minute_head(value, "T")
    micro = value.microsecond
    if not micro:
        return head + _WHOLE_SECONDS[value.second]
    return f"{head}{_SECONDS[value.second]}{_THREE[micro // 1000]}{_THREE[micro % 1000]}+00:00"


def iso_json(value: datetime) -> str:
    """Return the JSON text of `value.isoformat()` (a quoted str: a UTC time's text holds nothing to escape)."""
    if value.tzinfo is not UTC or type(value) is not datetime:
        return _quote(value.isoformat())
    start, end, head, _ = _LAST
    if not start <= value < end:
        head = _minute_head(value, "T")
    micro = value.microsecond
    if not micro:
        return f'"{head}{_WHOLE_SECONDS[value.second]}"'
    return f'"{head}{_SECONDS[value.second]}{_THREE[micro // 1000]}{_THREE[micro % 1000]}+00:00"'


def iso_text_micro(value: datetime, sep: str = "T") -> str:
    """Return `value.isoformat(sep, "microseconds")`."""
    if value.tzinfo is not UTC or type(value) is not datetime:
        # (Called as the seal's `_instant` called it before: a subclass's own isoformat may take `timespec` only.)
        return value.isoformat(timespec="microseconds") if sep == "T" else value.isoformat(sep, "microseconds")
    start, end, head_t, head_space = _LAST
    if start <= value < end and (sep == "T" or sep == " "):
        head = head_t if sep == "T" else head_space
    else:
        head = _minute_head(value, sep)
    micro = value.microsecond
    return f"{head}{_SECONDS[value.second]}{_THREE[micro // 1000]}{_THREE[micro % 1000]}+00:00"
