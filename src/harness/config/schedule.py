"""Schedules and operating hours: parsing, validation and wall-clock arithmetic.

This module owns the two time expressions a harness can carry:

* ``schedule``: a 5-field cron expression, a macro (``@hourly``, ``@daily``/``@midnight``,
  ``@weekly``, ``@monthly``, ``@yearly``/``@annually``) or ``@every DUR`` (each ``@`` word
  in any case), optionally prefixed by ``CRON_TZ=Zone `` (or ``TZ=Zone ``). Cron fields
  are evaluated by cronsim on the wall clock of the schedule's zone, so a ``0 9 * * *``
  job fires at 09:00 local time on both sides of a DST change (a time skipped by
  spring-forward fires at the first minute that exists; a time repeated by fall-back
  fires once). ``@every DUR`` windows are the multiples of DUR since the Unix epoch: the
  phase depends only on the expression, so a daemon restart or a reload never shifts it.
* ``operating_hours``: ``[TZ=Zone ]WINDOW[; WINDOW...]`` where a window is
  ``[DAYS ]HH:MM-HH:MM`` and DAYS is a comma list of ``Mon``…``Sun`` or ranges
  (``Mon-Fri``, wrapping ``Fri-Mon``). Windows are start-inclusive and end-exclusive;
  ``24:00`` is allowed only as an end; an end before the start is an overnight window
  that belongs to the day it starts on.

Invariant: every parse either returns an immutable, fully validated object or raises
``ScheduleError`` quoting the expression; every instant passed in must be timezone-aware
and every instant returned is aware (in the expression's zone).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from harness.config.durations import parse_duration_ns, shown

__all__ = [
    "OperatingHours",
    "Schedule",
    "ScheduleError",
    "Windows",
    "local_zone",
    "parse_hours",
    "parse_schedule",
]

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_TZ_PREFIX = re.compile(r"(?:CRON_TZ|TZ)=(\S+)\s+")
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_NS = 1_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ScheduleError(ValueError):
    """A schedule or operating-hours expression that cannot be used; the message quotes it."""


def local_zone() -> tzinfo:
    """The daemon's local zone as a DST-aware tzinfo (``TZ``, else /etc/localtime, else UTC).

    ``datetime.astimezone()`` would give a fixed offset, which is wrong across a DST
    change, so the zone is loaded from the tz database instead.
    """
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        with open("/etc/localtime", "rb") as fh:
            return ZoneInfo.from_file(fh, key="localtime")
    except (OSError, ValueError):
        return UTC


def _zone(name: str, expr: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(f"unknown time zone {shown(name)} in {shown(expr)}") from exc


def _aware(at: datetime) -> datetime:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"a timezone-aware datetime is required, got {at!r}")
    return at


@dataclass(frozen=True)
class Windows:
    """The schedule windows in an interval: how many, the earliest and the latest."""

    count: int
    first: datetime | None
    last: datetime | None


@dataclass(frozen=True)
class Schedule:
    """A validated schedule. Exactly one of ``cron`` and ``every_ns`` is set."""

    expr: str
    cron: str | None
    every_ns: int | None
    zone: tzinfo | None  # None: the daemon's local zone, looked up when computing

    def _tz(self) -> tzinfo:
        return self.zone if self.zone is not None else local_zone()

    def next_fire(self, after: datetime) -> datetime:
        """The first window strictly after ``after``."""
        after = _aware(after)
        tz = self._tz()
        if self.every_ns is not None:
            k = _ns_since_epoch(after) // self.every_ns + 1
            return _from_ns(k * self.every_ns).astimezone(tz)
        return next(self._cron_after(after))

    def windows_between(self, a: datetime, b: datetime) -> Windows:
        """Windows ``w`` with ``a < w <= b``: the count a missed record reports.

        ``a`` is the last window already decided and ``b`` the present, so a window is
        counted in exactly one of two consecutive calls.
        """
        a, b = _aware(a), _aware(b)
        if b <= a:
            return Windows(0, None, None)
        if self.every_ns is not None:
            # Arithmetic, not iteration: `@every 1s` across a week is 604,800 windows.
            lo = _ns_since_epoch(a) // self.every_ns + 1
            hi = _ns_since_epoch(b) // self.every_ns
            if hi < lo:
                return Windows(0, None, None)
            tz = self._tz()
            return Windows(hi - lo + 1, _from_ns(lo * self.every_ns).astimezone(tz),
                           _from_ns(hi * self.every_ns).astimezone(tz))
        count, first, last = 0, None, None
        for w in self._cron_after(a):
            if w > b:
                break
            count += 1
            if first is None:
                first = w
            last = w
        return Windows(count, first, last)

    def _cron_after(self, after: datetime) -> Iterator[datetime]:
        """The cron windows strictly after ``after``, in order.

        cronsim, started in the second pass of an hour repeated by fall-back
        (01:10 EST after 01:30 EDT), yields the first pass's window (01:30 EDT) once
        before the next day's: a window before ``after``, which the ticker would take
        as due at once, again and again until the wall clock passed it.
        """
        assert self.cron is not None
        # Compared in UTC: two times of the same zone compare by wall clock, fold
        # ignored (PEP 495), so 01:30 EDT would read as after 01:10 EST.
        floor = after.astimezone(UTC)
        for w in CronSim(self.cron, after.astimezone(self._tz())):
            if w.astimezone(UTC) > floor:
                yield w


def _ns_since_epoch(at: datetime) -> int:
    d = at - _EPOCH
    return (d.days * 86_400 + d.seconds) * _NS + d.microseconds * 1_000


def _from_ns(ns: int) -> datetime:
    # Rounded up to the microsecond a datetime can hold: a window of a period with a
    # sub-microsecond part (`@every 1.0000001s`) rounded down would fall before its own
    # instant, so next_fire would not be after `after` and windows_between from the
    # window just decided would count it again, firing it on every tick.
    return _EPOCH + timedelta(microseconds=-(-ns // 1_000))


def parse_schedule(expr: str) -> Schedule:
    """Validate ``expr`` and return its Schedule, or raise ScheduleError."""
    if not isinstance(expr, str):
        raise ScheduleError(f"a schedule must be a string, got {shown(expr)}")
    rest = expr.strip()
    zone: ZoneInfo | None = None
    m = _TZ_PREFIX.match(rest)
    if m:
        zone = _zone(m.group(1), expr)
        rest = rest[m.end():].strip()
    if not rest:
        raise ScheduleError(f"empty schedule {shown(expr)}")
    # Every `@` word is case-insensitive, as cron's day and month names are: `@Daily`
    # loading while `@Every 1h` was an unknown macro was one rule for two words.
    if rest[:len("@every")].lower() == "@every":
        dur = rest[len("@every"):].strip()
        try:
            ns = parse_duration_ns(dur)
        except ValueError as exc:
            raise ScheduleError(f"bad @every duration in {shown(expr)}: {exc}") from exc
        if ns < _NS:
            raise ScheduleError(f"@every needs at least 1s in {shown(expr)}")
        return Schedule(expr, None, ns, zone)
    if rest.startswith("@"):
        cron = _MACROS.get(rest.lower())
        if cron is None:
            raise ScheduleError(
                f"unknown schedule macro {shown(rest)} in {shown(expr)} (use @hourly, @daily, "
                "@weekly, @monthly, @yearly or @every DUR)")
    else:
        cron = " ".join(rest.split())
        if len(cron.split()) != 5:
            raise ScheduleError(f"a cron schedule needs 5 fields, got {len(cron.split())} "
                                f"in {shown(expr)}")
    try:
        # Construct once so a bad field fails at load time, not at the first tick.
        next(CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC)))
    except CronSimError as exc:
        raise ScheduleError(f"bad cron expression {shown(expr)}: {exc}") from exc
    except StopIteration as exc:
        raise ScheduleError(f"cron expression {shown(expr)} never fires") from exc
    return Schedule(expr, cron, None, zone)


# ---- operating hours -------------------------------------------------------------------

@dataclass(frozen=True)
class HoursWindow:
    """One window: the weekdays it starts on (0=Mon) and minutes of the day [start, end)."""

    days: frozenset[int]
    start: int
    end: int  # <= start: the window runs past midnight into the next day

    @property
    def overnight(self) -> bool:
        return self.end <= self.start


@dataclass(frozen=True)
class OperatingHours:
    """A validated operating-hours expression, evaluated on the zone's wall clock."""

    expr: str
    windows: tuple[HoursWindow, ...]
    zone: tzinfo | None  # None: the daemon's local zone

    def _tz(self) -> tzinfo:
        return self.zone if self.zone is not None else local_zone()

    def _open_wall(self, local: datetime) -> bool:
        wd = local.weekday()
        minute = local.hour * 60 + local.minute + (local.second + local.microsecond / 1e6) / 60
        for w in self.windows:
            if not w.overnight:
                if wd in w.days and w.start <= minute < w.end:
                    return True
            elif (wd in w.days and minute >= w.start) or (
                    (wd - 1) % 7 in w.days and minute < w.end):
                return True
        return False

    def is_open(self, at: datetime) -> bool:
        """Whether ``at`` falls inside a window."""
        return self._open_wall(_aware(at).astimezone(self._tz()))

    def next_change(self, at: datetime) -> datetime | None:
        """The first instant after ``at`` where is_open flips; None if it never does."""
        at = _aware(at)
        tz = self._tz()
        now_open = self._open_wall(at.astimezone(tz))
        day0 = at.astimezone(tz).date()
        candidates: set[datetime] = set()
        for offset in range(-1, 9):
            d = day0 + timedelta(days=offset)
            for w in self.windows:
                for minute in (w.start, w.end):
                    candidates.update(_wall_instants(d, minute, tz))
            shift = _offset_change(d, tz)
            if shift is not None:
                # Fall-back sets the wall clock back: in a window that started in the
                # repeated hour, the clock leaves it with no window edge crossed.
                candidates.add(shift)
        for c in sorted(candidates):
            if c > at and self._open_wall(c.astimezone(tz)) != now_open:
                return c.astimezone(tz)
        return None


def _offset_change(d: date, tz: tzinfo) -> datetime | None:
    """The instant ``tz`` takes a new UTC offset during the local day ``d``, else None."""
    lo = datetime.combine(d, time(), tzinfo=tz).astimezone(UTC)
    hi = datetime.combine(d + timedelta(days=1), time(), tzinfo=tz).astimezone(UTC)
    new = hi.astimezone(tz).utcoffset()
    if lo.astimezone(tz).utcoffset() == new:
        return None
    # lo has the old offset and hi the new one: bisect on whole minutes, which is what
    # offsets change on.
    a, b = 0, (hi - lo) // timedelta(minutes=1)
    while b - a > 1:
        m = (a + b) // 2
        if (lo + timedelta(minutes=m)).astimezone(tz).utcoffset() == new:
            b = m
        else:
            a = m
    return lo + timedelta(minutes=b)


def _wall_instants(d: date, minute: int, tz: tzinfo) -> list[datetime]:
    """The instants at which the wall clock of ``tz`` reads ``d`` + ``minute``.

    Two for a time repeated by fall-back; for a time skipped by spring-forward, the
    first wall-clock minute after it that exists (when the state really changes).
    """
    if minute == 1440:
        base = datetime.combine(d + timedelta(days=1), time(), tzinfo=tz)
    else:
        base = datetime.combine(d, time(minute // 60, minute % 60), tzinfo=tz)
    out: list[datetime] = []
    for fold in (0, 1):
        local = base.replace(fold=fold)
        steps = 0
        while local.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != \
                local.replace(tzinfo=None) and steps < 24 * 60:
            local = local + timedelta(minutes=1)
            steps += 1
        out.append(local.astimezone(UTC))
    return out


_HHMM = r"(\d{1,2}):(\d{2})"


def _minute_of(text: str, expr: str, *, end: bool) -> int:
    # ASCII digits only: \d and int() take any script's ("٠٩:٠٠" read as 09:00).
    m = re.fullmatch(_HHMM, text, re.ASCII)
    if not m:
        how = "HH:MM in ASCII digits 0-9" if re.fullmatch(_HHMM, text) else "HH:MM"
        raise ScheduleError(f"bad time {shown(text)} in {shown(expr)} (use {how})")
    h, mi = int(m.group(1)), int(m.group(2))
    if h == 24 and mi == 0:
        if not end:
            raise ScheduleError(f"24:00 may only end a window, in {shown(expr)}")
        return 1440
    if h > 23 or mi > 59:
        raise ScheduleError(f"bad time {shown(text)} in {shown(expr)}")
    return h * 60 + mi


def _day(text: str, expr: str) -> int:
    key = text.strip().lower()
    if key in _FULL_DAYS:
        key = key[:3]
    if key not in _DAYS:
        raise ScheduleError(f"unknown day {shown(text.strip())} in {shown(expr)} (use Mon … Sun)")
    return _DAYS.index(key)


_FULL_DAYS = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}


def _days(spec: str, expr: str) -> frozenset[int]:
    out: set[int] = set()
    for part in spec.split(","):
        if not part.strip():
            raise ScheduleError(f"empty day in {shown(expr)}")
        if "-" in part:
            a, _, b = part.partition("-")
            i, j = _day(a, expr), _day(b, expr)
            # A range may wrap the week: Fri-Mon is Fri, Sat, Sun, Mon.
            k = i
            while True:
                out.add(k)
                if k == j:
                    break
                k = (k + 1) % 7
        else:
            out.add(_day(part, expr))
    return frozenset(out)


def parse_hours(expr: str) -> OperatingHours:
    """Validate an operating-hours expression, or raise ScheduleError naming the problem."""
    if not isinstance(expr, str):
        raise ScheduleError(f"operating hours must be a string, got {shown(expr)}")
    rest = expr.strip()
    zone: ZoneInfo | None = None
    m = re.match(r"TZ=(\S+)\s*", rest)
    if m:
        zone = _zone(m.group(1), expr)
        rest = rest[m.end():]
    windows: list[HoursWindow] = []
    for raw in rest.split(";"):
        part = raw.strip()
        if not part:
            raise ScheduleError(f"empty window in {shown(expr)}")
        pieces = part.split()
        if len(pieces) == 1:
            days, span = frozenset(range(7)), pieces[0]
        elif len(pieces) == 2:
            days, span = _days(pieces[0], expr), pieces[1]
        else:
            raise ScheduleError(f"bad window {shown(part)} in {shown(expr)} "
                                "(use e.g. Mon-Fri 09:00-17:00)")
        start_s, sep, end_s = span.partition("-")
        if not sep:
            raise ScheduleError(f"bad window {shown(part)} in {shown(expr)} (use HH:MM-HH:MM)")
        start = _minute_of(start_s, expr, end=False)
        end = _minute_of(end_s, expr, end=True)
        if start == end:
            raise ScheduleError(f"empty window {shown(part)} in {shown(expr)} (start equals end; "
                                "use 00:00-24:00 for a whole day)")
        windows.append(HoursWindow(days, start, end))
    return OperatingHours(expr, tuple(windows), zone)
