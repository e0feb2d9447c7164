"""The ISO text of times that seals and the SQLite store write: byte for byte what isoformat writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from saga_runtime._records._times import iso_json, iso_text, iso_text_micro

_ZONES = st.one_of(
    st.none(),
    st.just(UTC),
    st.builds(lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(-23 * 60 - 59, 23 * 60 + 59)),
)


class _Stamp(datetime):
    """A datetime subclass (one whose isoformat could differ)."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return "stamp:" + super().isoformat(sep, timespec)


@given(st.datetimes(timezones=_ZONES))
def test_iso_text_is_isoformat_for_every_time(value: datetime) -> None:
    """iso_text gives value.isoformat() for any time: UTC or another offset or naive, zero microseconds or not."""
    assert iso_text(value) == value.isoformat()
    assert iso_text(value.replace(microsecond=0)) == value.replace(microsecond=0).isoformat()


@given(st.datetimes(timezones=_ZONES), st.sampled_from(["T", " "]))
def test_iso_text_micro_is_isoformat_in_microseconds(value: datetime, sep: str) -> None:
    """iso_text_micro gives value.isoformat(sep, "microseconds") for any time, with either separator."""
    assert iso_text_micro(value, sep) == value.isoformat(sep, "microseconds")
    whole = value.replace(microsecond=0)
    assert iso_text_micro(whole, sep) == whole.isoformat(sep, "microseconds")


def test_the_extremes_and_a_subclass_are_written_as_isoformat() -> None:
    """The first and last UTC times, and a datetime subclass's own isoformat, come out as isoformat writes them."""
    for value in (datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)):
        assert iso_text(value) == value.isoformat()
        assert iso_text_micro(value, " ") == value.isoformat(" ", "microseconds")
    stamp = _Stamp(2024, 5, 17, 9, 30, tzinfo=UTC)
    assert iso_text(stamp) == stamp.isoformat()
    assert iso_text_micro(stamp) == stamp.isoformat("T", "microseconds")
    assert iso_json(stamp) == json.dumps(stamp.isoformat(), ensure_ascii=False)


class _TimespecOnly(datetime):
    """A datetime subclass whose isoformat takes `timespec` alone (as some libraries' do)."""

    def isoformat(self, timespec: str = "auto") -> str:  # type: ignore[override]
        return super().isoformat("T", timespec)


def test_a_time_whose_isoformat_takes_timespec_alone_is_written_as_before() -> None:
    """A seal's instant of such a subclass is written as its isoformat(timespec=...) writes it, as before."""
    value = _TimespecOnly(2024, 5, 17, 9, 30, tzinfo=UTC)
    assert iso_text_micro(value) == "2024-05-17T09:30:00.000000+00:00"


@given(st.datetimes(timezones=_ZONES))
def test_iso_json_is_the_json_text_of_isoformat(value: datetime) -> None:
    """iso_json gives the JSON text (quoted, as seals write it) of value.isoformat() for any time."""
    assert iso_json(value) == json.dumps(value.isoformat(), ensure_ascii=False)
    whole = value.replace(microsecond=0)
    assert iso_json(whole) == json.dumps(whole.isoformat(), ensure_ascii=False)


@given(st.lists(st.tuples(st.datetimes(timezones=st.just(UTC)), st.sampled_from(["T", " ", "_"])), max_size=12))
def test_times_in_turn_near_and_across_minutes_are_written_as_isoformat(
    times: list[tuple[datetime, str]],
) -> None:
    """Times written one after another (the last minute's text reused) each come out as isoformat writes them."""
    edges = [datetime(2024, 5, 17, 9, 30, tzinfo=UTC) + timedelta(microseconds=delta) for delta in (-1, 0, 59999999)]
    edges += [datetime(2024, 5, 17, 9, 31, tzinfo=UTC), datetime.max.replace(tzinfo=UTC)]
    for value, sep in [*times, *((edge, sep) for edge in edges for sep in ("T", " "))]:
        assert iso_text_micro(value, sep) == value.isoformat(sep, "microseconds")
        assert iso_text(value) == value.isoformat()
        assert iso_json(value) == json.dumps(value.isoformat(), ensure_ascii=False)
