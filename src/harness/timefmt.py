"""Time on the wire: RFC 3339 instants with nanoseconds, in UTC.

Invariant: `format_ns` always writes ``YYYY-MM-DDTHH:MM:SS.fffffffffZ`` (nine
fraction digits, ``Z``), so two stamps written by harness compare correctly as
strings and name their UTC day in their first ten characters. `parse_ns` accepts
any RFC 3339 instant (any fraction length, ``Z`` or an offset), since hand-written
and imported lines need not be ours.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})\Z"
)


def now_ns() -> int:
    return time.time_ns()


def format_ns(ns: int) -> str:
    """The canonical UTC stamp of an epoch-nanosecond instant."""
    secs, frac = divmod(ns, 1_000_000_000)
    if 0 <= secs < 253402300800:  # years 1970-9999: the C formatter, 4x faster
        return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(secs))}.{frac:09d}Z"
    dt = _EPOCH + timedelta(seconds=secs)
    return f"{dt:%Y-%m-%dT%H:%M:%S}.{frac:09d}Z"


def parse_ns(s: str) -> int:
    """Epoch nanoseconds of an RFC 3339 instant; ValueError naming the value otherwise."""
    m = _RFC3339.match(s) if isinstance(s, str) else None
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {s!r}")
    y, mo, d, h, mi, sec, frac, tz = m.groups()
    try:
        dt = datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"not an RFC 3339 time: {s!r} ({exc})") from None
    ns = (int((dt - _EPOCH).total_seconds())) * 1_000_000_000
    if frac:
        ns += int(frac.ljust(9, "0"))
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        ns -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60) * 1_000_000_000
    return ns


# The canonical spelling, with field ranges; only days 29-31 need a calendar check.
_CANON = re.compile(
    r"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8]|(29|3[01]))T(?:[01]\d|2[0-3]):[0-5]\d:"
    r"[0-5]\d\.\d{9}Z"
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


def is_rfc3339(s: object) -> bool:
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
