"""Schedules (cron, macros, @every, CRON_TZ across DST) and operating hours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from harness.config.schedule import ScheduleError, local_zone, parse_hours, parse_schedule

NY = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)  # type: ignore[misc]


def fires(expr: str, start: datetime, n: int) -> list[datetime]:
    s = parse_schedule(expr)
    out = []
    t = start
    for _ in range(n):
        t = s.next_fire(t)
        out.append(t)
    return out


# ---- cron and macros ---------------------------------------------------------------------

def test_five_field_cron_next_fires() -> None:
    got = fires("CRON_TZ=UTC */15 9-10 * * 1-5", utc(2026, 11, 27, 10, 40), 4)  # a Friday
    assert got == [utc(2026, 11, 27, 10, 45), utc(2026, 11, 30, 9, 0),
                   utc(2026, 11, 30, 9, 15), utc(2026, 11, 30, 9, 30)]


def test_next_fire_is_strictly_after() -> None:
    s = parse_schedule("CRON_TZ=UTC 0 12 * * *")
    assert s.next_fire(utc(2026, 1, 1, 12, 0)) == utc(2026, 1, 2, 12, 0)
    assert s.next_fire(utc(2026, 1, 1, 11, 59, 59)) == utc(2026, 1, 1, 12, 0)


@pytest.mark.parametrize(("expr", "expected"), [
    ("CRON_TZ=UTC @hourly", [utc(2026, 3, 1, 11), utc(2026, 3, 1, 12), utc(2026, 3, 1, 13)]),
    ("CRON_TZ=UTC @daily", [utc(2026, 3, 2), utc(2026, 3, 3), utc(2026, 3, 4)]),
    # 2026-03-01 is a Sunday: @weekly fires at midnight between Saturday and Sunday.
    ("CRON_TZ=UTC @weekly", [utc(2026, 3, 8), utc(2026, 3, 15), utc(2026, 3, 22)]),
    ("CRON_TZ=UTC @monthly", [utc(2026, 4, 1), utc(2026, 5, 1), utc(2026, 6, 1)]),
    ("CRON_TZ=UTC @yearly", [utc(2027, 1, 1), utc(2028, 1, 1), utc(2029, 1, 1)]),
])
def test_macros(expr: str, expected: list[datetime]) -> None:
    assert fires(expr, utc(2026, 3, 1, 10, 30), 3) == expected


def test_every_90s_is_phase_locked_to_the_epoch() -> None:
    # 2026-01-01T00:00:00Z is 1767225600 s after the epoch, a multiple of 90.
    got = fires("@every 90s", utc(2026, 1, 1, 0, 0, 10), 3)
    assert got == [utc(2026, 1, 1, 0, 1, 30), utc(2026, 1, 1, 0, 3, 0), utc(2026, 1, 1, 0, 4, 30)]
    # The phase does not depend on when we ask: a restart at any time sees the same windows.
    s = parse_schedule("@every 90s")
    assert s.next_fire(utc(2026, 1, 1, 0, 1, 29)) == utc(2026, 1, 1, 0, 1, 30)
    assert s.next_fire(utc(2026, 1, 1, 0, 1, 30)) == utc(2026, 1, 1, 0, 3, 0)
    assert parse_schedule("@every 1h30m").every_ns == 5400 * 10**9


def test_cron_tz_new_york_across_spring_forward() -> None:
    # 2026-03-08: New York jumps from 02:00 EST to 03:00 EDT.
    nine = fires("CRON_TZ=America/New_York 0 9 * * *", datetime(2026, 3, 6, 12, tzinfo=NY), 3)
    assert [t.astimezone(UTC) for t in nine] == [
        utc(2026, 3, 7, 14, 0), utc(2026, 3, 8, 13, 0), utc(2026, 3, 9, 13, 0)]
    assert all(t.astimezone(NY).hour == 9 for t in nine)
    # 02:30 does not exist on the 8th: that day's window fires at the first minute that does.
    skipped = fires("CRON_TZ=America/New_York 30 2 * * *", datetime(2026, 3, 7, 3, tzinfo=NY), 3)
    assert [t.astimezone(UTC) for t in skipped] == [
        utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30), utc(2026, 3, 10, 6, 30)]


def test_cron_tz_new_york_across_fall_back_fires_once() -> None:
    # 2026-11-01: 01:00-02:00 happens twice in New York; the 01:30 job runs once.
    got = fires("CRON_TZ=America/New_York 30 1 * * *", datetime(2026, 10, 31, 3, tzinfo=NY), 3)
    assert [t.astimezone(UTC) for t in got] == [
        utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30), utc(2026, 11, 3, 6, 30)]


def test_tz_prefix_alias_and_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_schedule("TZ=Europe/Berlin 0 8 * * *").zone == BERLIN
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert local_zone() == ZoneInfo("Asia/Tokyo")
    s = parse_schedule("0 8 * * *")
    assert s.next_fire(utc(2026, 6, 1)) == utc(2026, 6, 1, 23, 0)


def test_windows_between_cron() -> None:
    s = parse_schedule("CRON_TZ=UTC @hourly")
    w = s.windows_between(utc(2026, 5, 1, 10, 0), utc(2026, 5, 1, 13, 30))
    assert (w.count, w.first, w.last) == (3, utc(2026, 5, 1, 11), utc(2026, 5, 1, 13))
    # (a, b]: the window at `a` was already decided; the one at `b` is due now.
    w = s.windows_between(utc(2026, 5, 1, 10, 0), utc(2026, 5, 1, 13, 0))
    assert w.count == 3
    assert s.windows_between(utc(2026, 5, 1, 10, 5), utc(2026, 5, 1, 10, 55)).count == 0
    assert s.windows_between(utc(2026, 5, 1, 12), utc(2026, 5, 1, 11)).first is None


def test_windows_between_dst_day_counts_wall_clock_windows() -> None:
    s = parse_schedule("CRON_TZ=America/New_York @hourly")
    a = datetime(2026, 3, 8, 0, 0, tzinfo=NY)
    w = s.windows_between(a, a + timedelta(hours=23))
    # 23 real hours on a 23-hour day: every wall-clock hour from 01:00 to 23:00 but 02:00.
    assert w.count == 22
    assert w.last is not None and w.last.astimezone(NY).hour == 23


def test_windows_between_every_is_arithmetic() -> None:
    s = parse_schedule("@every 1s")
    w = s.windows_between(utc(2026, 1, 1), utc(2026, 1, 8))
    assert w.count == 7 * 86_400
    assert w.first == utc(2026, 1, 1, 0, 0, 1) and w.last == utc(2026, 1, 8)
    w = parse_schedule("@every 90s").windows_between(utc(2026, 1, 1, 0, 0, 1),
                                                     utc(2026, 1, 1, 0, 1, 29))
    assert (w.count, w.first, w.last) == (0, None, None)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_schedule("@hourly").next_fire(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_hours("09:00-17:00").is_open(datetime(2026, 1, 1))


@pytest.mark.parametrize(("expr", "message"), [
    ("", "empty schedule ''"),
    ("* * * *", "a cron schedule needs 5 fields, got 4 in '* * * *'"),
    ("0 0 * * * *", "a cron schedule needs 5 fields, got 6 in '0 0 * * * *'"),
    ("61 * * * *", "bad cron expression '61 * * * *': Bad minute"),
    ("0 0 31 2 *", "bad cron expression '0 0 31 2 *': Bad day-of-month"),
    ("@fortnightly", "unknown schedule macro '@fortnightly' in '@fortnightly' "
                     "(use @hourly, @daily, @weekly, @monthly, @yearly or @every DUR)"),
    ("@every soon", "bad @every duration in '@every soon': not a duration: 'soon' "
                    "(use e.g. 500ms, 2s, 15m, 1h, 7d)"),
    ("@every 500ms", "@every needs at least 1s in '@every 500ms'"),
    ("CRON_TZ=Mars/Olympus @daily", "unknown time zone 'Mars/Olympus' in "
                                    "'CRON_TZ=Mars/Olympus @daily'"),
])
def test_bad_schedules(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_schedule(expr)
    assert str(info.value) == message


# ---- operating hours ---------------------------------------------------------------------

HOURS = "TZ=Europe/Berlin Mon-Fri 09:00-13:00; Sat 10:00-12:00"


def berlin(*a: int) -> datetime:
    return datetime(*a, tzinfo=BERLIN)  # type: ignore[misc]


def test_hours_open_and_closed_at_boundaries() -> None:
    h = parse_hours(HOURS)
    mon = (2026, 11, 30)
    assert not h.is_open(berlin(*mon, 8, 59, 59))
    assert h.is_open(berlin(*mon, 9, 0))          # start-inclusive
    assert h.is_open(berlin(*mon, 12, 59, 59))
    assert not h.is_open(berlin(*mon, 13, 0))     # end-exclusive
    assert h.is_open(berlin(2026, 12, 5, 10, 0))  # Saturday window
    assert not h.is_open(berlin(2026, 12, 5, 9, 30))
    assert not h.is_open(berlin(2026, 12, 6, 10, 30))  # Sunday: none
    # The zone is the expression's, whatever zone the caller speaks.
    assert h.is_open(utc(2026, 11, 30, 8, 0))      # 09:00 in Berlin (CET)
    assert not h.is_open(utc(2026, 11, 30, 12, 0))  # 13:00 in Berlin


def test_hours_next_change_over_several_windows() -> None:
    h = parse_hours(HOURS)
    t = berlin(2026, 12, 4, 12, 0)  # Friday, open
    seen = []
    for _ in range(5):
        nxt = h.next_change(t)
        assert nxt is not None
        seen.append((nxt.astimezone(BERLIN).replace(tzinfo=None), h.is_open(nxt)))
        t = nxt
    assert seen == [
        (datetime(2026, 12, 4, 13, 0), False),
        (datetime(2026, 12, 5, 10, 0), True),
        (datetime(2026, 12, 5, 12, 0), False),
        (datetime(2026, 12, 7, 9, 0), True),
        (datetime(2026, 12, 7, 13, 0), False),
    ]


def test_hours_next_change_is_strictly_after() -> None:
    h = parse_hours(HOURS)
    assert h.next_change(berlin(2026, 11, 30, 9, 0)) == berlin(2026, 11, 30, 13, 0)


def test_hours_overnight_window() -> None:
    h = parse_hours("TZ=UTC Fri 22:00-02:00")
    assert not h.is_open(utc(2026, 12, 4, 21, 59))
    assert h.is_open(utc(2026, 12, 4, 22, 0))
    assert h.is_open(utc(2026, 12, 5, 1, 59))  # Saturday morning belongs to Friday's window
    assert not h.is_open(utc(2026, 12, 5, 2, 0))
    assert not h.is_open(utc(2026, 12, 5, 23, 0))  # no Saturday night
    assert not h.is_open(utc(2026, 12, 4, 1, 0))   # Thursday's night is not Friday's
    assert h.next_change(utc(2026, 12, 4, 12)) == utc(2026, 12, 4, 22)
    assert h.next_change(utc(2026, 12, 4, 23)) == utc(2026, 12, 5, 2)


def test_hours_every_day_wrapping_ranges_and_24_00() -> None:
    h = parse_hours("TZ=UTC Fri-Mon 00:00-24:00")
    assert [h.is_open(utc(2026, 11, d, 12)) for d in range(23, 30)] == [
        True, False, False, False, True, True, True]  # Mon … Sun
    assert h.next_change(utc(2026, 11, 23, 12)) == utc(2026, 11, 24, 0)
    daily = parse_hours("TZ=UTC 08:00-09:00")
    assert daily.is_open(utc(2026, 11, 29, 8, 30))
    assert parse_hours("TZ=UTC 00:00-24:00").next_change(utc(2026, 1, 1)) is None


def test_hours_across_dst_use_the_wall_clock() -> None:
    h = parse_hours("TZ=Europe/Berlin 09:00-10:00")
    # Berlin leaves summer time on 2026-10-25: 09:00 is 07:00Z before, 08:00Z after.
    assert h.next_change(utc(2026, 10, 24, 12)) == utc(2026, 10, 25, 8, 0)
    assert h.is_open(utc(2026, 10, 24, 7, 30)) and h.is_open(utc(2026, 10, 25, 8, 30))


@pytest.mark.parametrize(("expr", "message"), [
    ("Fry 09:00-13:00", "unknown day 'Fry' in 'Fry 09:00-13:00' (use Mon … Sun)"),
    ("Mon-Fri 09:00-25:00", "bad time '25:00' in 'Mon-Fri 09:00-25:00'"),
    ("Mon 9am-5pm", "bad time '9am' in 'Mon 9am-5pm' (use HH:MM)"),
    ("24:00-02:00", "24:00 may only end a window, in '24:00-02:00'"),
    ("Mon 09:00-09:00", "empty window 'Mon 09:00-09:00' in 'Mon 09:00-09:00' (start equals end; "
                        "use 00:00-24:00 for a whole day)"),
    ("Mon 09:00", "bad window 'Mon 09:00' in 'Mon 09:00' (use HH:MM-HH:MM)"),
    ("Mon-Fri 09:00-13:00;", "empty window in 'Mon-Fri 09:00-13:00;'"),
    ("TZ=Nowhere/Land 09:00-10:00", "unknown time zone 'Nowhere/Land' in "
                                    "'TZ=Nowhere/Land 09:00-10:00'"),
    ("on weekdays 09:00-10:00", "bad window 'on weekdays 09:00-10:00' in "
                                "'on weekdays 09:00-10:00' (use e.g. Mon-Fri 09:00-17:00)"),
])
def test_bad_hours(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_hours(expr)
    assert str(info.value) == message
