"""Mutation-test survivors of schedules and operating hours (`harness.config.schedule`):
the instant an ``@every`` window falls on when its period is finer than a datetime can
hold, and the boundaries the other tests leave unpinned. Exact instants through the
public functions (parse_schedule, parse_hours and their objects' methods)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from harness.config.schedule import OperatingHours, ScheduleError, parse_hours, parse_schedule


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)  # type: ignore[misc]


def fires(expr: str, start: datetime, n: int) -> list[datetime]:
    """The next `n` windows after `start`, in UTC (an instant of a repeated hour never
    equals one of another zone, PEP 495, so the zone's own instants are not compared)."""
    s = parse_schedule(expr)
    out = []
    for _ in range(n):
        start = s.next_fire(start)
        out.append(start.astimezone(UTC))
    return out


def test_an_every_period_finer_than_a_microsecond_still_moves_forward() -> None:
    """Window k of ``@every 1.0000001s`` is k * 1000000100 ns after the epoch; the one
    after 2026-01-01 is 1767225600.7225424 s, which a datetime holds as .722543 (rounded
    up). Rounded down, it fell before its own instant: next_fire of a window returned the
    window itself and every tick decided that window again, firing it over and over."""
    s = parse_schedule("CRON_TZ=UTC @every 1.0000001s")
    w = s.next_fire(utc(2026, 1, 1))
    assert w == datetime(2026, 1, 1, 0, 0, 0, 722543, tzinfo=UTC)
    assert s.next_fire(w) == datetime(2026, 1, 1, 0, 0, 1, 722543, tzinfo=UTC)
    # The window just decided is not counted again from itself.
    got = s.windows_between(w, datetime(2026, 1, 1, 0, 0, 1, 500000, tzinfo=UTC))
    assert (got.count, got.first, got.last) == (0, None, None)
    got = s.windows_between(utc(2026, 1, 1), w)
    assert (got.count, got.first, got.last) == (1, w, w)


def test_a_fixed_time_job_asked_in_the_repeated_hour_fires_the_next_day() -> None:
    """2026-11-01, New York: 01:00-02:00 happens twice (EDT 05:00-06:00Z, then EST
    06:00-07:00Z). The 01:30 job fired at 01:30 EDT (05:30Z), once. Asked during the second
    pass (a daemon started or reloaded at 01:10 EST), the next window is tomorrow's; cronsim
    alone answered 05:30Z, before the question, so the ticker found it due at once, again
    and again, without yielding, until the wall clock passed 01:30 EST."""
    s = parse_schedule("CRON_TZ=America/New_York 30 1 * * *")
    for asked in (utc(2026, 11, 1, 6, 0), utc(2026, 11, 1, 6, 10), utc(2026, 11, 1, 6, 29)):
        assert s.next_fire(asked) == utc(2026, 11, 2, 6, 30)
    got = s.windows_between(utc(2026, 11, 1, 6, 10), utc(2026, 11, 2, 7, 0))
    assert (got.count, got.first, got.last) == (1, utc(2026, 11, 2, 6, 30), utc(2026, 11, 2, 6, 30))
    got = s.windows_between(utc(2026, 11, 1, 6, 0), utc(2026, 11, 1, 6, 59))
    assert (got.count, got.first, got.last) == (0, None, None)
    # From the first pass it is still that morning's one window. (Compared in UTC: an
    # instant of a repeated hour never equals one of another zone, PEP 495.)
    assert s.next_fire(utc(2026, 11, 1, 5, 10)).astimezone(UTC) == utc(2026, 11, 1, 5, 30)
    both = parse_schedule("CRON_TZ=America/New_York 0,30 1 * * *")
    assert both.next_fire(utc(2026, 11, 1, 6, 10)) == utc(2026, 11, 2, 6, 0)
    # Asked with a time of the schedule's own zone (the ticker's last window is one):
    # 01:10 EST is fold=1, and a same-zone comparison ignores fold, reading 01:30 EDT as
    # after it.
    ny = ZoneInfo("America/New_York")
    second_pass = utc(2026, 11, 1, 6, 10).astimezone(ny)
    assert (second_pass.hour, second_pass.fold) == (1, 1)
    assert s.next_fire(second_pass) == utc(2026, 11, 2, 6, 30)
    got = s.windows_between(second_pass, utc(2026, 11, 2, 7, 0).astimezone(ny))
    assert (got.count, got.first) == (1, utc(2026, 11, 2, 6, 30))


def test_every_windows_between_counts_the_multiples_in_a_half_open_interval() -> None:
    """(a, b] off the grid of ``@every 90s`` (2026-01-01T00:00Z is a multiple of 90 s):
    the count and both ends are exact when a is no window, when exactly one window is in
    the interval, and when b is not after a."""
    s = parse_schedule("CRON_TZ=UTC @every 90s")
    got = s.windows_between(utc(2026, 1, 1, 0, 0, 10), utc(2026, 1, 1, 0, 4, 30))
    assert (got.count, got.first, got.last) == (3, utc(2026, 1, 1, 0, 1, 30),
                                                utc(2026, 1, 1, 0, 4, 30))
    got = s.windows_between(utc(2026, 1, 1, 0, 0, 10), utc(2026, 1, 1, 0, 1, 30))
    assert (got.count, got.first, got.last) == (1, utc(2026, 1, 1, 0, 1, 30),
                                                utc(2026, 1, 1, 0, 1, 30))
    at = utc(2026, 1, 1, 0, 3)
    for b in (at, utc(2026, 1, 1, 0, 1)):
        got = s.windows_between(at, b)
        assert (got.count, got.first, got.last) == (0, None, None)


def test_month_ends_and_leap_days_fire_only_when_the_day_exists() -> None:
    """As cron: a day-of-month a month lacks skips that month, and 29 February waits for
    the next leap year; ``L`` is each month's last day."""
    assert fires("CRON_TZ=UTC 0 12 29 2 *", utc(2024, 2, 29, 12), 2) == [
        utc(2028, 2, 29, 12), utc(2032, 2, 29, 12)]
    assert fires("CRON_TZ=UTC 0 0 31 * *", utc(2026, 1, 31), 3) == [
        utc(2026, 3, 31), utc(2026, 5, 31), utc(2026, 7, 31)]
    assert fires("CRON_TZ=UTC 59 23 L * *", utc(2026, 1, 31, 23, 59), 3) == [
        utc(2026, 2, 28, 23, 59), utc(2026, 3, 31, 23, 59), utc(2026, 4, 30, 23, 59)]


def test_hours_that_start_in_a_spring_forward_gap_open_at_the_first_minute_that_exists(
        ) -> None:
    """New York, 2026-03-08: 02:00 EST is followed by 03:00 EDT (07:00Z). A 02:30-04:00
    window opens at 03:00 EDT and closes at 04:00 EDT; a window ending at 02:30 ends then."""
    h = parse_hours("TZ=America/New_York 02:30-04:00")
    assert h.next_change(utc(2026, 3, 8, 5)) == utc(2026, 3, 8, 7)
    assert not h.is_open(utc(2026, 3, 8, 6, 59, 59)) and h.is_open(utc(2026, 3, 8, 7))
    assert h.next_change(utc(2026, 3, 8, 7)) == utc(2026, 3, 8, 8)
    early = parse_hours("TZ=America/New_York 00:00-02:30")
    assert early.next_change(utc(2026, 3, 8, 5)) == utc(2026, 3, 8, 7)
    odd = parse_hours("TZ=America/New_York 02:17-04:00")  # not on the gap's 30-minute grid
    assert odd.next_change(utc(2026, 3, 8, 5)) == utc(2026, 3, 8, 7)


def changes(h: OperatingHours, t: datetime, n: int) -> list[tuple[datetime, bool]]:
    """The next `n` changes of `h` after `t`: each instant (UTC) and is_open there."""
    seen = []
    for _ in range(n):
        nxt = h.next_change(t)
        assert nxt is not None
        seen.append((nxt.astimezone(UTC), h.is_open(nxt)))
        t = nxt
    return seen


def test_hours_in_an_hour_repeated_by_fall_back_open_twice() -> None:
    """New York, 2026-11-01: 01:00-01:30 comes once in EDT (05:00Z) and again in EST
    (06:00Z); the wall clock is in the window both times."""
    h = parse_hours("TZ=America/New_York 01:00-01:30")
    assert changes(h, utc(2026, 11, 1, 4), 4) == [
        (utc(2026, 11, 1, 5), True), (utc(2026, 11, 1, 5, 30), False),
        (utc(2026, 11, 1, 6), True), (utc(2026, 11, 1, 6, 30), False)]


def test_next_change_sees_fall_back_set_the_clock_out_of_a_window() -> None:
    """New York, 2026-11-01: a 01:30-02:00 window opens at 01:30 EDT (05:30Z); at 06:00Z
    the clock falls back to 01:00 EST, outside it, with no window edge crossed; it opens
    again at 01:30 EST (06:30Z) and closes at 02:00 EST (07:00Z). next_change skipped the
    06:00Z close, answering 07:00Z while is_open said closed from 06:00Z."""
    h = parse_hours("TZ=America/New_York 01:30-02:00")
    assert changes(h, utc(2026, 11, 1, 4), 5) == [
        (utc(2026, 11, 1, 5, 30), True), (utc(2026, 11, 1, 6), False),
        (utc(2026, 11, 1, 6, 30), True), (utc(2026, 11, 1, 7), False),
        (utc(2026, 11, 2, 6, 30), True)]
    again = h.next_change(utc(2026, 11, 1, 5, 40))
    assert again is not None and again.astimezone(UTC) == utc(2026, 11, 1, 6)


def test_hours_edges_hold_to_the_microsecond() -> None:
    """Start-inclusive, end-exclusive, at every fraction of the edge minute."""
    h = parse_hours("TZ=UTC 09:00-13:00")
    assert not h.is_open(datetime(2026, 12, 1, 8, 59, 59, 999999, tzinfo=UTC))
    assert h.is_open(datetime(2026, 12, 1, 9, 0, 0, 500000, tzinfo=UTC))
    assert h.is_open(datetime(2026, 12, 1, 12, 59, 59, 999999, tzinfo=UTC))
    assert not h.is_open(datetime(2026, 12, 1, 13, 0, 0, 500000, tzinfo=UTC))


def test_an_overnight_window_runs_into_the_next_weekday_across_the_week_end() -> None:
    """Sunday night's window holds Monday morning; Saturday night's does not reach it."""
    sun = parse_hours("TZ=UTC Sun 22:00-02:00")
    assert sun.is_open(utc(2026, 11, 29, 23))       # Sunday
    assert sun.is_open(utc(2026, 11, 30, 1, 59))    # Monday morning
    assert not sun.is_open(utc(2026, 11, 30, 2))
    assert not sun.is_open(utc(2026, 11, 29, 1))    # Sunday morning: Saturday's night
    sat = parse_hours("TZ=UTC Sat 22:00-02:00")
    assert sat.is_open(utc(2026, 11, 29, 1))        # Sunday morning
    assert not sat.is_open(utc(2026, 11, 30, 1))    # Monday morning
    assert sat.next_change(utc(2026, 11, 29, 2)) == utc(2026, 12, 5, 22)


def test_hours_with_minutes_full_day_names_and_the_last_minute_of_the_day() -> None:
    h = parse_hours("TZ=UTC Monday-Friday 09:30-17:45")
    mon = (2026, 11, 30)
    assert not h.is_open(utc(*mon, 9, 29, 59)) and h.is_open(utc(*mon, 9, 30))
    assert h.is_open(utc(*mon, 17, 44, 59)) and not h.is_open(utc(*mon, 17, 45))
    assert not h.is_open(utc(2026, 12, 5, 10))  # Saturday
    assert h.next_change(utc(*mon, 12)) == utc(*mon, 17, 45)
    late = parse_hours("TZ=UTC Sunday 23:00-23:59")
    assert late.is_open(utc(2026, 11, 29, 23, 58, 59))
    assert not late.is_open(utc(2026, 11, 29, 23, 59))
    assert late.next_change(utc(2026, 11, 29, 12)) == utc(2026, 11, 29, 23)


@pytest.mark.parametrize(("expr", "message"), [
    ("24:30-10:00", "bad time '24:30' in '24:30-10:00'"),
    ("10:00-24:30", "bad time '24:30' in '10:00-24:30'"),
    ("09:60-10:00", "bad time '09:60' in '09:60-10:00'"),
    ("Mon,,Tue 09:00-10:00", "empty day in 'Mon,,Tue 09:00-10:00'"),
])
def test_bad_hours_at_the_edges_of_a_clock(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_hours(expr)
    assert str(info.value) == message


def test_an_expression_that_is_no_string_is_a_schedule_error() -> None:
    with pytest.raises(ScheduleError) as info:
        parse_hours(5)  # type: ignore[arg-type]
    assert str(info.value) == "operating hours must be a string, got 5"
    with pytest.raises(ScheduleError) as info:
        parse_schedule(5)  # type: ignore[arg-type]
    assert str(info.value) == "a schedule must be a string, got 5"
