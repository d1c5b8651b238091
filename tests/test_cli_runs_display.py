"""What `harness runs` shows a person, byte for byte, when the values are not plain ASCII.

Nothing a record, a file name, a path or the daemon's reply carries reaches the terminal
as a control: every such value is spelled as `render.visible` spells it, on stderr as in
the table. The plain table fits 80 terminal cells, cutting only the harness name
(DESIGN.md §2, SPEC-0022 REQ-14), counted as a terminal counts them (a wide character
takes two, a combining mark none) and in the encoding the table is written in. The CLI
runs as a subprocess, as a user runs it; the layout helpers are also checked in process.
"""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import World
from harness.cli import render
from harness.timefmt import format_ns, now_ns, parse_ns
from test_cli_runs import HOUR, SEC, offline_warning, run_lines, runs, seed


def _with_state_home(world: World, state: Path) -> None:
    world.env = {**world.env, "XDG_STATE_HOME": str(state)}


# -- stderr and the echoed NAME: values shown escaped --------------------------------------


def test_stray_file_names_are_shown_escaped(world: World) -> None:
    """A file name in the ledger directory can hold anything but "/" and NUL: an OSC that
    sets the terminal's title or clipboard, a screen clear, a newline that forges a second
    "harness:" line. Each is spelled as its escape."""
    seed(world, run_lines("nightly", 1, now_ns() - HOUR))
    (world.ledger / "x\x1b]0;PWNED\x07\x1b[2J\x1b]52;c;ZWNobyBoaQ==\x07.jsonl").touch()
    (world.ledger / "bad\nharness: all good.txt").touch()
    res = runs(world, "--json")
    assert res.returncode == 0, res.stderr
    assert res.stderr == offline_warning(world) + (
        "harness: ignored file(s) that are not day files: bad\\nharness: all good.txt, "
        "x\\x1b]0;PWNED\\x07\\x1b[2J\\x1b]52;c;ZWNobyBoaQ==\\x07.jsonl\n")


def test_a_daemon_error_message_is_shown_escaped(world: World, tmp_path: Path) -> None:
    """The daemon's error message is the other end's text: shown on one line, escaped."""
    from test_cli_daemon import FakeDaemon

    seed(world, run_lines("nightly", 1, now_ns() - HOUR))
    path = tmp_path / "odd.sock"
    daemon = FakeDaemon(str(path), [], raw={"id": 1, "ok": False, "error": {
        "code": "x", "message": "boom\x1b]0;OWNED\x07\x1b[2J\nharness: forged line"}})
    try:
        res = world.harness("--socket", str(path), "runs", "--json")
    finally:
        daemon.close()
    assert res.returncode == 0, res.stderr
    assert res.stderr == (
        "harness: daemon failed (boom\\x1b]0;OWNED\\x07\\x1b[2J\\nharness: forged line); "
        f"read the ledger from disk ({world.ledger})\n")


def test_a_daemon_reply_of_another_shape_is_shown_escaped(world: World,
                                                          tmp_path: Path) -> None:
    """A reply quoted in the message (as JSON, which escapes the C0 controls but not a
    right-to-left override or a line separator) is escaped like any other value."""
    from test_cli_daemon import FakeDaemon

    seed(world, run_lines("nightly", 1, now_ns() - HOUR))
    path = tmp_path / "odd.sock"
    daemon = FakeDaemon(str(path), [], raw=["\u202eabc\u2028harness: x"])
    try:
        res = world.harness("--socket", str(path), "runs", "--json")
    finally:
        daemon.close()
    assert res.returncode == 0, res.stderr
    assert res.stderr == (
        "harness: daemon failed (the daemon's reply to runs is not a JSON object: "
        '["\\u202eabc\\u2028harness: x"]); '
        f"read the ledger from disk ({world.ledger})\n")


def test_the_ledger_path_is_shown_escaped(world: World, tmp_path: Path) -> None:
    """The ledger's path comes from $XDG_STATE_HOME: shown escaped, in the note that the
    disk was read and in the error that it could not be."""
    state = tmp_path / "st\x1b[2Jate\n"
    _with_state_home(world, state)
    shown = f"{tmp_path}/st\\x1b[2Jate\\n/harness/ledger"
    res = runs(world, "--json")
    assert (res.returncode, res.stdout) == (0, "[]\n")
    assert res.stderr == f"harness: daemon not running; read the ledger from disk ({shown})\n"
    (state / "harness").mkdir(parents=True)
    (state / "harness" / "ledger").write_text("not a directory\n")
    res = runs(world)
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == ("harness: daemon not running, and the run ledger could not be "
                          f"read: ledger path {shown} is not a directory\n")


def test_the_echoed_name_is_shown_escaped(world: World) -> None:
    res = runs(world, "a\x1b]0;PWNED\x07b\nc")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "a\\x1b]0;PWNED\\x07b\\nc has no runs yet\n"


# -- visible: what a terminal draws as nothing, and the backslash ----------------------------

# The Default_Ignorable_Code_Point code points str.isprintable() passes (letters and
# marks, not format characters): each would hide in a value or make an invisible one.
PRINTABLE_IGNORABLES = [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D,
                        0x180F, 0x3164, 0xFE00, 0xFE0F, 0xFFA0, 0xE0100, 0xE01EF]

# Default_Ignorable_Code_Point as DerivedCoreProperties.txt lists it (Unicode 14.0).
DERIVED_IGNORABLES = [(0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C),
                      (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180D),
                      (0x180E, 0x180E), (0x180F, 0x180F), (0x200B, 0x200F),
                      (0x202A, 0x202E), (0x2060, 0x2064), (0x2065, 0x2065),
                      (0x2066, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F),
                      (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8),
                      (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0000),
                      (0xE0001, 0xE0001), (0xE0002, 0xE001F), (0xE0020, 0xE007F),
                      (0xE0080, 0xE00FF), (0xE0100, 0xE01EF), (0xE01F0, 0xE0FFF)]


IGNORABLE_SET = frozenset(chr(cp) for first, last in DERIVED_IGNORABLES
                          for cp in range(first, last + 1))


def _esc(cp: int) -> str:
    return f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


@pytest.mark.parametrize("cp", PRINTABLE_IGNORABLES, ids=[f"U+{c:04X}" for c in
                                                          PRINTABLE_IGNORABLES])
def test_visible_escapes_the_ignorables_isprintable_passes(cp: int) -> None:
    assert chr(cp).isprintable()
    assert render.visible(f"T-1{chr(cp)}x") == f"T-1{_esc(cp)}x"


def test_visible_escapes_every_default_ignorable_and_keeps_its_neighbours() -> None:
    for first, last in DERIVED_IGNORABLES:
        for cp in range(first, last + 1):
            assert render.visible(chr(cp)) == (_esc(cp) if cp > 0xFF else "\\xad")
    # Printable code points just outside the ranges the table adds are kept.
    kept = "\u034e\u0350\u115e\u1161\u17b3\u17b6\u180a\u1810\u3163\u3165\ufe10\uff9f\uffa1"
    assert render.visible(kept) == kept


def test_visible_doubles_a_backslash() -> None:
    """A value that spells out an escape is not shown as the character escaped."""
    assert render.visible("fix\\u202etxt") == "fix\\\\u202etxt"
    assert render.visible("fix\u202etxt") == "fix\\u202etxt"
    assert render.visible("C:\\tmp\n") == "C:\\\\tmp\\n"


_ESCAPE = re.compile(r"\\(?:(\\)|([ntr])|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")


def _unescape(shown: str) -> str:
    def one(m: re.Match[str]) -> str:
        backslash, named, *hexes = m.groups()
        if backslash:
            return "\\"
        if named:
            return {"n": "\n", "t": "\t", "r": "\r"}[named]
        return chr(int(next(h for h in hexes if h), 16))
    return _ESCAPE.sub(one, shown)


@settings(max_examples=500, deadline=None)
@given(st.text(st.characters(codec=None), max_size=30) | st.text("\\\nux0123456789abcdef"))
def test_visible_reads_back_as_the_one_value_it_shows(s: str) -> None:
    """Every character shown is printable and drawn, and what is shown reads back as
    `s` and nothing else: no value shows as the escaped form of another."""
    shown = render.visible(s)
    assert all(c.isprintable() and c not in IGNORABLE_SET for c in shown)
    assert _unescape(shown) == s



def test_ignorables_and_backslashes_in_the_table(world: World) -> None:
    seed(world, run_lines("T-1\ufe0f", 1, parse_ns("2025-11-03T09:05:00Z"), took_ms=1000,
                          trigger="\u3164", model="m\u034fn", todo_id="fix\\u202etxt"))
    res = runs(world, "--since", "2025-11-01T00:00:00Z", "--wide")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "HARNESS    RUN  STARTED       TOOK  TRIGGER  OUTCOME  EXIT  MODEL     TOKENS  COST"
        "  TODO\n"
        "T-1\\ufe0f    1  Nov  3 09:05  1s    \\u3164   success  0     m\\u034fn  —       —"
        "     fix\\\\u202etxt\n")


# -- widths in terminal cells ----------------------------------------------------------------


def cells(s: str) -> int:
    """A terminal's width of `s`, from the Unicode data alone (not rich): two cells for an
    East Asian wide or fullwidth character, none for a combining mark, one otherwise. Right
    for the characters these tests use."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF"
               else 1 for c in s)


T0 = parse_ns("2025-11-03T09:05:00Z")
PLAIN_TAIL = "  RUN  STARTED       TOOK  TRIGGER   OUTCOME  EXIT"


def test_a_wide_name_is_cut_to_80_cells(world: World) -> None:
    """30 wide characters are 60 cells: the name is cut to the 36 cells left, and the
    17 characters that fit leave one cell, a space after the "…"."""
    seed(world, run_lines("夜間" * 15, 1, T0))
    res = runs(world, "--since", "2025-11-01T00:00:00Z")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "HARNESS".ljust(36) + " RUN STARTED      TOOK TRIGGER  OUTCOME EXIT\n"
        + "夜間" * 8 + "夜… " + "   1 Nov  3 09:05 5s   schedule success 0\n")
    assert [cells(line) for line in res.stdout.splitlines()] == [80, 77]


WIDE_NAMES = ["日本語のハーネス名前テスト長い", "emoji" + "🚀" * 10, "e\u0301e\u0301e\u0301"]


def _wide_names(world: World) -> None:
    seed(world, [*run_lines(WIDE_NAMES[0], 1, T0, model="模型模型", todo_id="任务任务"),
                 *run_lines(WIDE_NAMES[1], 2, T0 + 15 * 60 * SEC),
                 *run_lines(WIDE_NAMES[2], 3, T0 + 30 * 60 * SEC)])


def test_wide_and_combining_characters_align_in_cells(world: World) -> None:
    """The HARNESS column is 30 cells (15 wide characters); the emoji name is 25, the
    accented one 3 (each accent a combining mark)."""
    _wide_names(world)
    res = runs(world, "--since", "2025-11-01T00:00:00Z")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (
        "HARNESS" + " " * 23 + PLAIN_TAIL + "\n"
        "e\u0301e\u0301e\u0301" + " " * 27 + "    3  Nov  3 09:35  5s    schedule  success  0\n"
        "emoji" + "🚀" * 10 + " " * 5 + "    2  Nov  3 09:20  5s    schedule  success  0\n"
        "日本語のハーネス名前テスト長い" + "    1  Nov  3 09:05  5s    schedule  success  0\n")
    assert [cells(line) for line in res.stdout.splitlines()] == [80, 77, 77, 77]


def test_wide_table_aligns_in_cells(world: World) -> None:
    _wide_names(world)
    res = runs(world, "--since", "2025-11-01T00:00:00Z", "--wide")
    assert res.returncode == 0, res.stderr
    tail = "  MODEL     TOKENS  COST  TODO"
    none = "  —         —       —     —"
    assert res.stdout == (
        "HARNESS" + " " * 23 + PLAIN_TAIL + tail + "\n"
        "e\u0301e\u0301e\u0301" + " " * 27 + "    3  Nov  3 09:35  5s    schedule  success  0   "
        + none + "\n"
        "emoji" + "🚀" * 10 + " " * 5 + "    2  Nov  3 09:20  5s    schedule  success  0   "
        + none + "\n"
        "日本語のハーネス名前テスト長い" + "    1  Nov  3 09:05  5s    schedule  success  0   "
        "  模型模型  —       —     任务任务\n")
    # Each column starts at the same cell on every line: TODO at the 107th.
    assert [cells(line[:-len(todo)]) for line, todo in zip(
        res.stdout.splitlines(), ["TODO", "—", "—", "任务任务"], strict=True)] == [106] * 4


@pytest.mark.parametrize(("s", "width", "out"), [
    ("日本語", 6, "日本語"),
    ("日本語", 5, "日本…"),
    ("日本語", 4, "日… "),  # 本 would straddle the edge: a space holds its cell
    ("日本語", 2, "… "),
    ("a🚀b", 3, "a… "),
    ("e\u0301e\u0301e\u0301x", 3, "e\u0301e\u0301…"),  # an accent stays with its letter
    ("\u0301abc", 2, "\u0301a…"),  # a string that starts with a zero-width mark
])
def test_cut_counts_cells(s: str, width: int, out: str) -> None:
    assert render.cut(s, width) == out
    assert cells(out) == width


def test_grid_pads_in_cells() -> None:
    assert render.grid(["A", "NUM"], [["日本", "1"], ["x", "22"]], right=frozenset({1})) == (
        "A     NUM\n日本    1\nx      22")


POOL = ["a", "Z", "-", " ", "日", "🚀", "e\u0301", "\u1100", "Ａ", "ｱ", "…", "\u0e33", "\x1b",
        "\u202e", "\u3164", "\ufe0f", "\\"]


def _text(max_size: int) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(POOL), max_size=max_size).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "harness": _text(40), "run_id": st.integers(1, 10 ** 40),
    "started_at": st.just("2026-06-15T12:00:00Z"), "duration_ms": st.integers(1, 10 ** 20),
    "trigger": st.one_of(st.just("schedule"), _text(30)),
    "outcome": st.one_of(st.just("missed"), _text(30)), "windows": st.integers(0, 10 ** 6),
    "log_pruned": st.booleans(), "exit_code": st.integers(-10 ** 30, 255),
    "model": _text(20), "todo_id": _text(20)}), min_size=1, max_size=5))
def test_the_plain_table_cuts_only_the_name_to_fit_80_cells_whatever_the_values(
        records: list[dict[str, Any]]) -> None:
    def laid_out(row: list[str], widths: list[int], gap: int) -> str:
        return (" " * gap).join(
            " " * (w - cells(c)) + c if i == 1 else c + " " * (w - cells(c))
            for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()

    # Plain: every value but the name whole, each column as wide as its widest value in
    # cells; the name column (header included) alone narrowed, to no less than 2 cells.
    # The rows fit 80 cells unless the other columns alone leave the name less than that.
    head, body = render.rows(records, wide=False)
    widths = [max(cells(c) for c in col) for col in zip(head, *body, strict=True)]
    gap = 2 if sum(widths) + 2 * 6 <= 80 else 1
    widths[0] = max(2, min(widths[0], 80 - gap * 6 - sum(widths[1:])))
    lines = render.table(records).split("\n")
    assert lines == [laid_out([render.cut(r[0], widths[0]), *r[1:]], widths, gap)
                     for r in [head, *body]]
    assert max(cells(line) for line in lines) <= 80 or widths[0] == 2
    # --wide: every value whole, each column as wide as its widest value in cells.
    head, body = render.rows(records, wide=True)
    widths = [max(cells(c) for c in col) for col in zip(head, *body, strict=True)]
    assert render.table(records, wide=True).split("\n") == [laid_out(r, widths, 2)
                                                             for r in [head, *body]]


# -- the encoding the table is written in ----------------------------------------------------


def _encoded_world(world: World) -> None:
    """A name that must be cut, a value outside latin-1 (and one inside it), missed
    windows, and cells with no value."""
    t = parse_ns("2025-11-03T09:00:00Z")
    seed(world, [
        {"type": "decided", "harness": "revue-été", "run_id": 1, "at": format_ns(t),
         "kind": "oneshot", "trigger": "schedule", "outcome": "missed",
         "started_at": format_ns(t), "window": format_ns(t), "windows": 3},
        *run_lines("n" * 40, 2, t + HOUR, trigger="日本", exit_code=None),
    ])


def _table_in(world: World, encoding: str, *args: str) -> bytes:
    res = subprocess.run([sys.executable, "-m", "harness.cli", "runs", "--since",
                          "2025-11-01T00:00:00Z", *args],
                         env={**world.env, "PYTHONIOENCODING": encoding},
                         capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert b"Traceback" not in res.stderr
    return res.stdout


def test_a_latin1_table_is_laid_out_for_latin1(world: World) -> None:
    """"—" and "…" are not in latin-1: written as "\\u2014", 6 columns counted as one,
    they pushed the row past 80. Now the table writes "-" and "~", and "日本", which
    latin-1 cannot write either, is escaped before its column's width is counted."""
    _encoded_world(world)
    out = _table_in(world, "latin-1")
    assert out == (
        "HARNESS" + " " * 23 + " RUN STARTED      TOOK TRIGGER      OUTCOME   EXIT\n"
        + "n" * 29 + "~   2 Nov  3 10:00 5s   \\u65e5\\u672c success   -\n"
        "revue-été" + " " * 21 + "   1 Nov  3 09:00 -    schedule     missed ×3 -\n"
    ).encode("latin-1")
    assert max(len(line) for line in out.splitlines()) == 80
    wide = _table_in(world, "latin-1", "--wide").decode("latin-1").splitlines()
    assert [line.split()[-4:] for line in wide] == [
        ["MODEL", "TOKENS", "COST", "TODO"], ["-"] * 4, ["-"] * 4]


def test_an_ascii_table_is_all_ascii(world: World) -> None:
    """Under an ASCII locale click writes UTF-8, taking ASCII for a misconfigured
    locale; the table is made for the ASCII it was asked for, which reads the same in
    both: "×" is "x", and "é" an escape too."""
    _encoded_world(world)
    out = _table_in(world, "ascii")
    assert out == (
        "HARNESS" + " " * 23 + " RUN STARTED      TOOK TRIGGER      OUTCOME   EXIT\n"
        + "n" * 29 + "~   2 Nov  3 10:00 5s   \\u65e5\\u672c success   -\n"
        "revue-\\xe9t\\xe9" + " " * 15 + "   1 Nov  3 09:00 -    schedule     missed x3 -\n"
    ).encode("ascii")
    assert max(len(line) for line in out.splitlines()) == 80


def test_a_utf8_table_keeps_its_marks(world: World) -> None:
    _encoded_world(world)
    out = _table_in(world, "utf-8").decode()
    assert out == (
        "HARNESS" + " " * 27 + " RUN STARTED      TOOK TRIGGER  OUTCOME   EXIT\n"
        + "n" * 33 + "…   2 Nov  3 10:00 5s   日本     success   —\n"
        "revue-été" + " " * 25 + "   1 Nov  3 09:00 —    schedule missed ×3 —\n")


def test_the_marks_and_escapes_for_an_encoding() -> None:
    assert render.marks_for(None) == render.marks_for("utf-8") == ("—", "…", "×")
    assert render.marks_for("latin-1") == ("-", "~", "×")
    assert render.marks_for("ascii") == ("-", "~", "x")
    assert render.visible("été 日\n", "latin-1") == "été \\u65e5\\n"
    assert render.visible("été 日\n", "ascii") == "\\xe9t\\xe9 \\u65e5\\n"
    assert render.cut("abcdef", 4, "~") == "abc~"
