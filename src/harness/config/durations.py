"""Durations as config and flags spell them: ``500ms``, ``2s``, ``15m``, ``1h``, ``7d``, ``1h30m``.

Invariant: a duration is a non-negative number of nanoseconds; a bare number (in
config) means seconds; anything else is a ValueError that quotes the value.
"""

from __future__ import annotations

import re

_UNITS = {"ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000,
          "d": 86_400_000_000_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+\Z")


def parse_duration_ns(value: str | int | float) -> int:
    """Nanoseconds of a duration string, or of a bare number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value!r}")
        return int(value * 1_000_000_000)
    s = value.strip() if isinstance(value, str) else value
    if not isinstance(s, str) or not s:
        raise ValueError(f"not a duration: {value!r} (use e.g. 500ms, 2s, 15m, 1h, 7d)")
    if re.fullmatch(r"\d+(?:\.\d+)?", s):
        return int(float(s) * 1_000_000_000)
    if not _WHOLE.match(s):
        raise ValueError(f"not a duration: {value!r} (use e.g. 500ms, 2s, 15m, 1h, 7d)")
    return sum(int(float(n) * _UNITS[u]) for n, u in _PART.findall(s))


def format_duration_ms(ms: int) -> str:
    """A short human duration: 850ms, 42s, 3m05s, 12h30m, 2d4h."""
    if ms < 1000:
        return f"{ms}ms"
    s = ms // 1000
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h}h"
