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

Also here: how every message quotes what a user wrote — a value (`shown`), a config key
(`shown_key`), a path (`shown_path`).
Invariant: each is scrubbed of secrets first, and a value or a part of a key longer
than ``QUOTE_MAX`` characters is cut to that and its length, so no message repeats a
token or grows with what it quotes; a path is only scrubbed (it must name the file).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, localcontext

from harness.ledger.scrub import scrub_text, scrub_value

__all__ = ["MAX_DURATION", "MAX_DURATION_NS", "QUOTE_MAX", "format_duration_ms",
           "is_bare_number", "parse_duration_ns", "shown", "shown_key", "shown_path"]

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


# The most of a value (or of one part of a key) that a message quotes. A problem is
# printed, logged by the daemon and sent to `harness reload`: a 1 MB string pasted into
# a config, or passed as a flag, made a 1 MB line of each. Past it, the message quotes
# this much and says how long the whole is.
QUOTE_MAX = 80


def _capped(clean: str, length: int, *, keep: int = QUOTE_MAX, most: int = QUOTE_MAX,
            quote: bool) -> str:
    """`clean` (scrubbed already) as a message quotes it, repr'd when `quote`; past `most`
    characters, its first `keep` and `length`, the length of what it stands for."""
    if len(clean) <= most:
        return repr(clean) if quote else clean
    head = clean[:keep] + "…"
    return f"{repr(head) if quote else head} ({length} characters)"


def shown(value: object, *, cut: bool = False, quote: bool = True) -> str:
    """A value from a config file (or a flag) as an error message quotes it: its repr,
    with every secret in it scrubbed first. A problem is printed, logged by the daemon and
    sent to `harness reload`, and a token pasted under the wrong key must reach none of
    them. Cut after the scrub (a token cut short is one the scrubber no longer knows):
    past `QUOTE_MAX` characters, to its first `QUOTE_MAX` and its length; with `cut`, a
    string past 40 to its first 24. A string is given without quotes when `quote` is
    false (a name within a message's own words)."""
    clean = scrub_value(value)[0]
    if isinstance(clean, str) and isinstance(value, str):
        keep, most = (24, 40) if cut else (QUOTE_MAX, QUOTE_MAX)
        return _capped(clean, len(value), keep=keep, most=most, quote=quote)
    text = repr(clean)  # a list or a table: its text is what is cut
    return _capped(text, len(text), quote=False)


def shown_key(path: tuple[str, ...]) -> str:
    """A dotted config key as a problem names it (``harness.nightly.timeout``): scrubbed
    whole, since a token may span its dots (a JWT pasted as a table name is three keys),
    then each part cut as `shown` cuts a value, so a 1 MB key cannot make a 1 MB line
    and every key a file may hold (a 64-character harness name) is shown whole."""
    clean = scrub_text(".".join(path))[0]
    return ".".join(_capped(part, len(part), quote=False) for part in clean.split("."))


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
        return _not_rounded_to_zero(int(Decimal(repr(value)).scaleb(9)), value, value > 0)
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
    return _not_rounded_to_zero(ns, value, any(c in "123456789" for c in s))


def _not_rounded_to_zero(ns: int, value: object, nonzero: bool) -> int:
    """`ns`, unless a duration written as more than zero came to none: 0 reads as "no
    limit" in every timeout, so `timeout = 1e-10` would lift the limit it asked for."""
    if ns == 0 and nonzero:
        raise ValueError(f"must be at least 1ns or 0, got {shown(value, cut=True)}")
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
