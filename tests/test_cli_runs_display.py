"""What `harness runs` shows a person, byte for byte, when the values are not plain ASCII.

Nothing a record, a file name, a path or the daemon's reply carries reaches the terminal
as a control: every such value is spelled as `render.visible` spells it, on stderr as in
the table. The plain table fits 80 terminal cells (DESIGN.md §2, SPEC-0022 REQ-14),
counted as a terminal counts them (a wide character takes two, a combining mark none)
and in the encoding the table is written in. The CLI runs as a subprocess, as a user runs
it; the layout helpers are also checked in process.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import World
from harness.cli import render
from harness.timefmt import now_ns, parse_ns
from test_cli_runs import HOUR, offline_warning, run_lines, runs, seed


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
