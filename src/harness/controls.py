"""Spelling out what must not reach a terminal or start a line of its own: controls,
escape sequences, line breaks, format characters and code points a terminal draws as
nothing (Unicode's default-ignorable ones).

Every component that writes text it did not make (the CLI's tables and messages, the
daemon's log, the notes it puts in run logs, config problems) spells such characters as
their escapes through this module. Invariant: `one_line` gives one line holding no
character that acts on a terminal; `escape` and `shown` are the per-character rule that
`cli.render.visible` shares.
"""

from __future__ import annotations

from bisect import bisect_right

# A value may carry a newline or a tab (todo_id, model and reason are opaque): shown
# escaped, or one record would break across lines and misalign its columns. A backslash
# is doubled: a name that holds the six characters "\u202e" must not read as the escape
# of a right-to-left override in another name.
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"}

# Unicode's Default_Ignorable_Code_Point property (DerivedCoreProperties.txt; Unicode
# 14.0's ranges, those of Python 3.11's unicodedata): code points a terminal draws as
# nothing. Most are format characters or unassigned, which str.isprintable already
# refuses; the rest are letters and marks it passes (U+034F, U+115F..U+1160,
# U+17B4..U+17B5, U+180B..U+180D, U+180F, U+3164, U+FE00..U+FE0F, U+FFA0,
# U+E0100..U+E01EF), which would hide in a name ("T-1" and "T-1" + U+FE0F look alike)
# or make an invisible one (U+3164 alone). (first, last) pairs, inclusive, in order.
_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
    (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
    (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_IGNORABLE_FIRST = [first for first, _last in _IGNORABLE]


def _ignorable(c: str) -> bool:
    """Whether `c` is a Default_Ignorable_Code_Point."""
    i = bisect_right(_IGNORABLE_FIRST, ord(c)) - 1
    return i >= 0 and ord(c) <= _IGNORABLE[i][1]


def shown(c: str) -> bool:
    """Whether `c` is shown as it is (printable, not a backslash, not drawn as nothing)."""
    return c.isprintable() and c != "\\" and not _ignorable(c)


def escape(c: str) -> str:
    """`c` spelled as its escape (``\\n``, ``\\x1b``, ``\\u202e``)."""
    o = ord(c)
    return _NAMED.get(c) or (f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000
                             else f"\\U{o:08x}")


def one_line(message: str) -> str:
    """`message` as `cli.render.visible` shows a value, but with its backslashes as they are: a
    message quotes values with repr(), escapes included, and doubling those would only
    garble it; what must not reach a terminal (a control, an escape sequence, a line
    break) is still spelled out."""
    if message.isascii() and message.isprintable():  # a default-ignorable is no ASCII
        return message
    return "".join(c if c == "\\" or shown(c) else escape(c) for c in message)
