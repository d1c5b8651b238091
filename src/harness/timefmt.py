"""Time on the wire: RFC 3339 instants with nanoseconds, in UTC.

Invariant: `format_ns` always writes ``YYYY-MM-DDTHH:MM:SS.fffffffffZ`` (a four-digit
year, nine fraction digits, ``Z``), so two stamps written by harness compare correctly
as strings and name their UTC day in their first ten characters; an instant outside
the years 0001-9999 (UTC) has no such stamp and is a ValueError. `parse_ns` accepts
any RFC 3339 instant (any fraction length, ``Z`` or an offset), since hand-written
and imported lines need not be ours; it keeps nanoseconds and drops finer digits.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import TypeGuard

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)
_FIRST_S = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _SECOND  # the first second of year 1
_END_S = (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - _EPOCH) // _SECOND + 1
_RFC3339 = re.compile(
    # ASCII digits only: RFC 3339's grammar has no others, and \d would take "٢٠٢٦".
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]+))?(Z|z|[+-][0-9]{2}:[0-9]{2})\Z"
)


def now_ns() -> int:
    return time.time_ns()


# The last second formatted and its text: every append stamps `at` with now, so nearly
# every call falls in the same second as the one before, and the strftime (most of the
# cost) is done once a second. One tuple, replaced whole: safe across threads. None
# matches no second (-1 is one: the last second of 1969).
_last_second: tuple[int | None, str] = (None, "")


def format_ns(ns: int) -> str:
    """The canonical UTC stamp of an epoch-nanosecond instant; ValueError outside 0001-9999."""
    global _last_second
    secs, frac = divmod(ns, 1_000_000_000)
    last = _last_second
    if secs == last[0]:
        return f"{last[1]}.{frac:09d}Z"
    if 0 <= secs < _END_S:  # years 1970-9999: the C formatter, 4x faster
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs))
        _last_second = (secs, text)
        return f"{text}.{frac:09d}Z"
    if not _FIRST_S <= secs < _END_S:
        raise ValueError(f"{ns} ns since the epoch is outside the years 0001-9999")
    # isoformat pads the year to four digits; strftime's %Y writes year 999 as "999".
    dt = _NAIVE_EPOCH + timedelta(seconds=secs)
    return f"{dt.isoformat(timespec='seconds')}.{frac:09d}Z"


def parse_ns(s: str) -> int:
    """Epoch nanoseconds of an RFC 3339 instant; ValueError naming the value otherwise."""
    m = _RFC3339.match(s) if isinstance(s, str) else None
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {s!r}")
    y, mo, d, h, mi, sec, frac, tz = m.groups()
    leap = sec == "60"  # RFC 3339 allows a leap second, which POSIX time cannot count
    try:
        dt = datetime(int(y), int(mo), int(d), int(h), int(mi), 59 if leap else int(sec),
                      tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"not an RFC 3339 time: {s!r} ({exc})") from None
    ns = (int((dt - _EPOCH).total_seconds())) * 1_000_000_000
    if leap:
        # The last instant of the second before it: in time order, and on the same day,
        # so a line stamped in a leap second stays in its day's file.
        ns += 999_999_999
    elif frac:
        # RFC 3339 allows any number of fraction digits, but an instant here is whole
        # nanoseconds: finer digits are dropped (truncated, not rounded, so an instant
        # never moves into the next second, or day).
        ns += int(frac[:9].ljust(9, "0"))
    if tz not in ("Z", "z"):
        if int(tz[1:3]) > 23 or int(tz[4:6]) > 59:
            raise ValueError(f"not an RFC 3339 time: {s!r} (offset {tz} out of range)")
        sign = 1 if tz[0] == "+" else -1
        ns -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60) * 1_000_000_000
    return ns


# The canonical spelling, with field ranges; only days 29-31 need a calendar check.
_CANON = re.compile(
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8]|(29|3[01]))T(?:[01][0-9]|2[0-3]):"
    r"[0-5][0-9]:[0-5][0-9]\.[0-9]{9}Z"
)


def _is_canonical(s: str) -> bool:
    m = _CANON.fullmatch(s)
    if m is None:
        return False
    if m.group(1) is None:
        return True
    try:
        datetime(int(s[:4]), int(s[5:7]), int(s[8:10]))
    except ValueError:
        return False
    return True


def is_rfc3339(s: object) -> TypeGuard[str]:
    if not isinstance(s, str):
        return False
    if _is_canonical(s):
        return True
    try:
        parse_ns(s)
    except ValueError:
        return False
    return True


def utc_day(ns: int) -> str:
    """YYYY-MM-DD of the UTC day holding `ns`."""
    return format_ns(ns)[:10]


def day_start_ns(day: str) -> int:
    return parse_ns(f"{day}T00:00:00Z")


def canon(s: object) -> str | None:
    """The canonical spelling of an RFC 3339 instant (cheap when already canonical), or None.

    Canonical stamps sort as strings in time order, so filters compare them directly.
    """
    if type(s) is not str:
        return None
    if len(s) == 30 and _is_canonical(s):
        return s
    try:
        return format_ns(parse_ns(s))
    except ValueError:
        return None
