"""Rendering records for people: the `harness runs` table (REQ-14).

Invariants: the plain table fits 80 columns, counted in terminal cells as rich.cells
counts them (an East Asian wide character or an emoji takes two, a combining mark none),
cutting only the harness name (and its header), always visibly (with "…"); no other value
is ever cut: where they alone take more than 80 columns (a 13-digit run id, an
11000-day run, the lowest exit code and the longest outcome; a hand-edited trigger) the
name is cut to two cells and the row runs past 80; `--wide` never cuts or wraps a value
(nor rounds one: COST is the recorded cost whole, in plain decimal), and aligns its
columns in cells too; a record is one row, read as stored: a character that is not
printable (a control, a line separator, a right-to-left override) or that a terminal
draws as nothing (a default-ignorable code point: a variation selector, a Hangul filler)
is shown as its escape, ``\\n``, and a backslash as ``\\\\``, so what a cell shows
reads back as one value only; times are shown in local time as ``Jan _2 15:04``.

The table is laid out for the encoding it is written in (`table(..., encoding=)`): a
character of a value that encoding cannot write is escaped like a control before any
width is counted, so the width counts the escape, and each of the table's own marks that
it cannot write is replaced by one ASCII character of the same width: "—" (no value) by
"-", "…" (a cut) by "~", "×" (missed windows) by "x".
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

# rich.cells alone, not rich: the cell widths without the console and its imports.
from rich.cells import cell_len, get_character_cell_size

from ..config.durations import format_duration_ms
from ..controls import escape, shown
from ..timefmt import parse_ns

WIDTH = 80
# The narrowest the harness column is cut to: one cell of the name and the cut's mark.
NAME_FLOOR = 2
DASH = "—"


class Marks(NamedTuple):
    """What the table itself writes: for no value, at the end of a cut, before a count."""

    none: str = DASH
    more: str = "…"
    times: str = "×"


UNICODE = Marks()
# One cell each, as the marks they stand in for: a layout fits whatever the encoding.
ASCII = Marks("-", "~", "x")


def encodes(s: str, encoding: str | None) -> bool:
    """Whether `s` can be written in `encoding` (None: any text can)."""
    if encoding is None:
        return True
    try:
        s.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def marks_for(encoding: str | None) -> Marks:
    """The marks, each as it is where `encoding` can write it, else its ASCII stand-in."""
    return Marks(*(m if encodes(m, encoding) else a for m, a in zip(UNICODE, ASCII,
                                                                     strict=True)))


def started(rec: dict[str, Any], marks: Marks = UNICODE) -> str:
    return local_time(rec.get("started_at")) or marks.none


def local_time(s: Any) -> str | None:
    """An RFC 3339 instant as the tables show one, local and to the minute
    (`Jan _2 15:04`); None when `s` is no such instant."""
    if not isinstance(s, str):
        return None
    try:
        # Whole seconds, by integer division: a float of the nanoseconds rounds
        # 10:04:59.9999999 up into the next minute (and, at midnight, the next day).
        dt = datetime.fromtimestamp(parse_ns(s) // 1_000_000_000).astimezone()
    except (ValueError, OverflowError, OSError):
        return None
    return f"{dt:%b} {dt.day:>2} {dt:%H:%M}"


def took(rec: dict[str, Any], marks: Marks = UNICODE) -> str:
    outcome = rec.get("outcome")
    if outcome in ("running", "running?"):
        return str(outcome)
    ms = rec.get("duration_ms")
    if type(ms) is int and ms > 0:  # a bool is an int to isinstance: it would read "Truems"
        return format_duration_ms(ms)
    if isinstance(rec.get("ended_at"), str) and isinstance(rec.get("started_at"), str):
        try:
            return format_duration_ms(max(0, (parse_ns(rec["ended_at"]) -
                                              parse_ns(rec["started_at"])) // 1_000_000))
        except ValueError:
            return "unknown"
    if outcome in ("skipped", "missed"):
        return marks.none  # no process ran
    return "unknown"


def outcome_cell(rec: dict[str, Any], marks: Marks = UNICODE) -> str:
    out = str(rec.get("outcome") or marks.none)
    windows = rec.get("windows")
    if out == "missed" and type(windows) is int and windows > 1:
        out = f"missed {marks.times}{windows}"
    if rec.get("log_pruned"):
        out += " (log pruned)"
    return out


def usd(cost: int | float) -> str | None:
    """`cost` as dollars, the value as recorded in plain decimal: the cents always
    (``$1.50``, ``$0.00``) and every further digit it holds (``$0.00001``, ``$0.0001234``),
    never rounded away nor in scientific notation. A float is read from its repr, the
    shortest text that reads back as it, so no binary artefact shows (0.1 is ``$0.10``,
    not its 55 digits). None for a value that is no number (a non-finite float)."""
    d = Decimal(repr(cost)) if isinstance(cost, float) else Decimal(cost)
    exponent = d.as_tuple().exponent
    if not isinstance(exponent, int):  # infinity or NaN: no amount the ledger can hold
        return None
    return "$" + format(d, ".2f" if exponent >= -2 else "f")


def cost_cell(rec: dict[str, Any], marks: Marks = UNICODE) -> str:
    src, cost = rec.get("cost_source"), rec.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        amount = usd(cost)
        return "?" if amount is None else amount + (" priced" if src == "priced" else "")
    return "?" if src else marks.none


def _count(v: object) -> bool:
    return type(v) is int and v >= 0


def tokens_cell(rec: dict[str, Any], marks: Marks = UNICODE) -> str:
    t = rec.get("tokens")
    if not isinstance(t, dict):
        return marks.none
    counts = [t.get(k, 0) for k in ("input", "output")]
    if not all(_count(c) for c in counts):
        return "?"  # a line from disk with a mistyped count: shown as unknown, not summed
    return f"{sum(counts):,}"


def _exit(rec: dict[str, Any], marks: Marks = UNICODE) -> str:
    code = rec.get("exit_code")
    return str(code) if type(code) is int else marks.none


def visible(s: str, encoding: str | None = None) -> str:
    """`s` on one line, as it reads: every character Python does not count as printable
    spelled as its escape. Besides the C0 and C1 controls and DEL, that is the line and
    paragraph separators (which split a row where text is cut into lines), the format
    characters (a right-to-left override would show a row's cells in another order, a
    zero-width space hide in a name), spaces other than " ", and unassigned code points;
    and the default-ignorable code points, which a terminal draws as nothing. A backslash
    is doubled, so every escape shown is one the value does not spell out itself. With an
    `encoding`, a character it cannot write is escaped too: the escape is what the output
    would show for it anyway, and now the table counts it."""
    if s.isascii() and s.isprintable() and "\\" not in s:  # the usual value, as it is
        return s
    if encodes(s, encoding):
        encoding = None  # no need to ask again for each character
    return "".join(c if shown(c) and encodes(c, encoding) else escape(c) for c in s)


def rows(records: list[dict[str, Any]], wide: bool, *, encoding: str | None = None
         ) -> tuple[list[str], list[list[str]]]:
    """The header and a row of cells for each record, as `encoding` can write them."""
    m = marks_for(encoding)
    head = ["HARNESS", "RUN", "STARTED", "TOOK", "TRIGGER", "OUTCOME", "EXIT"]
    if wide:
        head += ["MODEL", "TOKENS", "COST", "TODO"]
    out = []
    for r in records:
        row = [str(r.get("harness", "")), str(r.get("run_id", "")), started(r, m),
               took(r, m), str(r.get("trigger") or m.none), outcome_cell(r, m), _exit(r, m)]
        if wide:
            row += [str(r.get("model") or m.none), tokens_cell(r, m), cost_cell(r, m),
                    str(r.get("todo_id") or m.none)]
        out.append([visible(c, encoding) for c in row])
    return head, out


def _start(s: str, room: int) -> tuple[str, int]:
    """The longest start of `s` at most `room` cells wide, and its width: a wide character
    that would straddle the edge is left out. Walked a character at a time rather than
    with rich's set_cell_size, whose grapheme split never ends in rich 14.3.2 on a string
    that starts with a zero-width character (a combining mark); on what `visible` returns
    (no joiner, no variation selector) the sum of the characters' widths is cell_len."""
    used = 0
    for i, c in enumerate(s):
        w = get_character_cell_size(c)
        if used + w > room:
            return s[:i], used
        used += w  # a zero-width mark stays with the character before it
    return s, used


def cut(s: str, width: int, more: str = UNICODE.more) -> str:
    """`s`, or when it takes more than `width` cells its start and `more` (one cell) in
    `width` cells (a space after `more` where a wide character did not fit)."""
    if cell_len(s) <= width:
        return s
    room = max(0, width - 1)
    start, used = _start(s, room)
    return start + more + " " * (room - used)


def column_widths(header: list[str], body: list[list[str]]) -> list[int]:
    return [max(cell_len(c) for c in col) for col in zip(header, *body, strict=True)]


def _pad(s: str, width: int, right: bool) -> str:
    fill = " " * max(0, width - cell_len(s))  # str.ljust would count characters
    return fill + s if right else s + fill


def grid(header: list[str], body: list[list[str]], *, right: frozenset[int] = frozenset(),
         widths: list[int] | None = None, gap: int = 2, more: str = UNICODE.more) -> str:
    """Aligned columns (those in `right` right-aligned), widths in terminal cells; a cell
    wider than its column is cut with a visible `more`; no trailing spaces."""
    widths = widths or column_widths(header, body)
    lines = []
    for row in [header, *body]:
        cells = [_pad(cut(c, w, more), w, i in right)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append((" " * gap).join(cells).rstrip())
    return "\n".join(lines)


def table(records: list[dict[str, Any]], *, wide: bool = False,
          encoding: str | None = None) -> str:
    """The table of `records`, laid out for `encoding` (None: one that writes any text)."""
    head, body = rows(records, wide, encoding=encoding)
    widths = column_widths(head, body)
    gap = 2
    if not wide:
        total = sum(widths) + gap * (len(widths) - 1)
        if total > WIDTH:
            gap = 1
            total = sum(widths) + gap * (len(widths) - 1)
        if total > WIDTH:
            # Only the harness column gives way (DESIGN.md §2), its header too when the
            # other columns leave less than its width (long run ids beside the longest
            # outcome), never below NAME_FLOOR. The others keep every value whole: a row
            # whose other values alone pass 80 columns (the widest a writer makes, or a
            # hand-edited trigger) runs past 80 rather than show one of them cut, which
            # would read as another value.
            widths[0] = max(NAME_FLOOR, widths[0] - (total - WIDTH))
    return grid(head, body, right=frozenset({1}), widths=widths, gap=gap,
                more=marks_for(encoding).more)
