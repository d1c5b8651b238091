"""Durations as config and flags spell them: ``500ms``, ``2s``, ``15m``, ``1h``, ``7d``, ``1h30m``.

Invariant: a duration is a whole number of nanoseconds from 0 to ``MAX_DURATION_NS``
(1000000d, about 2,700 years); a bare number (in config) means seconds; anything
else — negative, not finite (TOML's ``inf``/``nan``), longer than the maximum, not
a duration at all — is a ValueError that quotes the value. No other exception
escapes, so every caller's ``except ValueError`` is complete.

Why that maximum: it is far beyond any timeout, restart delay, retention or
``@every`` period that means something, yet small enough that the daemon's time
arithmetic stays in range — an ``@every`` window (a multiple of the period after the
epoch, at most one period after now) is still a date before year 9999, and
``harness runs --since 999999d`` names an instant the query clamps to year 1.
Arithmetic is exact (integers and decimals, never binary floats), so ``1.001s`` is
1001000000ns (float arithmetic gives 1000999999) and a 400-digit number is refused
instead of overflowing.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, localcontext

from harness.ledger.scrub import scrub_text, scrub_value

__all__ = ["MAX_DURATION", "MAX_DURATION_NS", "format_duration_ms", "is_bare_number",
           "parse_duration_ns", "shown", "shown_path"]

_SECOND = 1_000_000_000
_UNITS = {"ms": 1_000_000, "s": _SECOND, "m": 60 * _SECOND, "h": 3_600 * _SECOND,
          "d": 86_400 * _SECOND}
MAX_DURATION_NS = 1_000_000 * _UNITS["d"]
MAX_DURATION = "1000000d (about 2,700 years)"
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d))+\Z")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")  # ASCII digits only
# More integer digits than this exceed the maximum in any unit (10**20 ms > 1000000d);
# refusing them before int() keeps the work small and clear of Python's digit limit.
_MAX_WHOLE_DIGITS = 20


def shown(value: object, *, cut: bool = False) -> str:
    """A value from a config file (or a flag) as an error message quotes it: its repr,
    with every secret in it scrubbed first. A problem is printed, logged by the daemon and
    sent to `harness reload`, and a token pasted under the wrong key must reach none of
    them. With `cut`, a long string is shortened, after the scrub: a token cut short is
    one the scrubber no longer knows."""
    clean = scrub_value(value)[0]
    if cut and isinstance(clean, str) and isinstance(value, str) and len(clean) > 40:
        return f"{clean[:24] + '…'!r} ({len(value)} characters)"
    return repr(clean)


def shown_path(path: str) -> str:
    """A path as an error message names it: as written, with every secret in it scrubbed.
    A directory may be named after a token (or a user's argument hold one); the message
    must still say which file, so a path is neither quoted nor cut, only scrubbed."""
    return scrub_text(path)[0]


def _too_long(value: str | int | float) -> ValueError:
    return ValueError(f"must be at most {MAX_DURATION}, got {shown(value, cut=True)}")


def _not_a_duration(value: object) -> ValueError:
    return ValueError(f"not a duration: {shown(value, cut=True)} "
                      "(use e.g. 500ms, 2s, 15m, 1h, 7d)")


def _number_ns(number: str, unit: int, value: str) -> int:
    """Nanoseconds of ``number`` units (digits, optionally a fraction), rounded down."""
    whole, _, frac = number.partition(".")
    if len(whole.lstrip("0")) > _MAX_WHOLE_DIGITS:
        raise _too_long(value)
    ns = int(whole) * unit
    if frac:
        # Exact at any fraction length: the context keeps every digit of the product.
        with localcontext() as ctx:
            ctx.prec = len(frac) + 20
            ns += int(Decimal("0." + frac) * unit)
    return ns


def is_bare_number(value: str) -> bool:
    """Whether `value` is a number with no unit: seconds in config, a slip on a flag."""
    return bool(_NUMBER.fullmatch(value.strip()))


def parse_duration_ns(value: str | int | float) -> int:
    """Nanoseconds of a duration string, or of a bare number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"must be finite, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value!r}")
        if value > MAX_DURATION_NS // _SECOND:
            raise _too_long(value)
        if isinstance(value, int):
            return value * _SECOND
        # The shortest repr is the number as written (1.001, not 1.000999999999999889...).
        return int(Decimal(repr(value)).scaleb(9))
    s = value.strip() if isinstance(value, str) else value
    if not isinstance(s, str) or not s:
        raise _not_a_duration(value)
    if _NUMBER.fullmatch(s):
        ns = _number_ns(s, _SECOND, value)
    elif _WHOLE.match(s):
        ns = sum(_number_ns(n, _UNITS[u], value) for n, u in _PART.findall(s))
    else:
        raise _not_a_duration(value)
    if ns > MAX_DURATION_NS:
        raise _too_long(value)
    return ns


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
