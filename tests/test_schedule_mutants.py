"""Mutation-test survivors of schedules and operating hours (`harness.config.schedule`):
the instant an ``@every`` window falls on when its period is finer than a datetime can
hold, and the boundaries the other tests leave unpinned. Exact instants through the
public functions (parse_schedule, parse_hours and their objects' methods)."""

from __future__ import annotations

from datetime import UTC, datetime

from harness.config.schedule import parse_schedule


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)  # type: ignore[misc]


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
