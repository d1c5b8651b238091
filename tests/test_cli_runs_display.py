"""What `harness runs` shows a person, byte for byte, when the values are not plain ASCII.

Nothing a record, a file name, a path or the daemon's reply carries reaches the terminal
as a control: every such value is spelled as `render.visible` spells it, on stderr as in
the table. The plain table fits 80 terminal cells (DESIGN.md §2, SPEC-0022 REQ-14),
counted as a terminal counts them (a wide character takes two, a combining mark none)
and in the encoding the table is written in. The CLI runs as a subprocess, as a user runs
it; the layout helpers are also checked in process.
"""

from __future__ import annotations

from pathlib import Path

from conftest import World
from harness.timefmt import now_ns
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
