"""`harness up`, `harness down` and `harness reload` (DESIGN.md §2-§3): the real CLI, real
registry file, real daemons.

`up` checks a project's harness.toml before the registry changes and a daemon started
afterwards serves its harnesses as PROJECT/NAME; `down` forgets it (twice is an error);
`reload` without a daemon exits 1. The last two tests drive a running daemon's `reload`
op (the daemon side of reload), so they pass once the daemon serves that op.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from daemons import DEADLINE, Daemons
from harness.config.load import RegistryError, register_project

PROJECT = """
[harness.worker]
kind = "oneshot"
argv = ["echo", "from the project"]
"""


def _project(world: World, name: str = "proj", text: str = PROJECT) -> Path:
    d = world.root / name
    d.mkdir()
    (d / "harness.toml").write_text(text)
    return d


def _registry(world: World) -> dict[str, Any] | None:
    path = world.state / "projects.json"
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _run(world: World, *args: str) -> tuple[int, str, str]:
    res = world.harness(*args)
    return res.returncode, res.stdout, res.stderr


def _run_in(cwd: Path, world: World, *args: str) -> tuple[int, str, str]:
    """The CLI run from `cwd`, for the commands whose DIR defaults to the current one."""
    res = subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=world.env,
                         capture_output=True, text=True, timeout=120)
    return res.returncode, res.stdout, res.stderr


def _names(world: World) -> dict[str, str]:
    code, out, err = _run(world, "list", "--json")
    assert code == 0, err
    return {h["name"]: h["kind"] for h in json.loads(out)}


def test_reload_without_a_daemon_exits_1(world: World) -> None:
    sock = world.root / "run" / "harness.sock"
    assert _run(world, "reload") == (
        1, "", f"harness: daemon not running ({sock}); start it with `harness daemon`\n")
    assert _run(world, "reload", "--json")[0] == 1


def test_a_daemon_that_holds_the_socket_but_does_not_answer(world: World) -> None:
    """Stuck, or stopped with SIGSTOP: `reload` says so, not that none runs (a second
    daemon would refuse to start), and `up` registers all the same and says when the
    change will be seen."""
    proj = _project(world)
    sock = world.root / "run" / "harness.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(sock))
        listener.listen(4)  # connections queue in the backlog; nobody ever replies
        assert _run(world, "reload") == (1, "", f"harness: daemon not responding ({sock})\n")
        assert _run(world, "up", str(proj)) == (
            0, f"project proj registered ({proj}): proj/worker\n"
               f"the daemon is not responding ({sock}); the project loads when it is "
               "reloaded or started again\n", "")
    assert _registry(world) == {"version": 1, "projects": [{"name": "proj", "dir": str(proj)}]}


def test_up_then_a_daemon_serves_the_project_then_down(world: World, daemons: Daemons) -> None:
    proj = _project(world)
    daemons.write_config('[harness.solo]\nkind = "oneshot"\nargv = ["true"]\n')
    assert _run(world, "up", str(proj)) == (
        0, f"project proj registered ({proj}): proj/worker\n"
           "the daemon is not running; the project loads at its next start\n", "")
    assert _registry(world) == {"version": 1, "projects": [{"name": "proj", "dir": str(proj)}]}
    # `up` again is idempotent.
    assert _run(world, "up", str(proj))[0] == 0
    assert _registry(world) == {"version": 1, "projects": [{"name": "proj", "dir": str(proj)}]}

    daemons.start()
    assert _names(world) == {"proj/worker": "oneshot", "solo": "oneshot"}
    res = world.harness("trigger", "proj/worker", "--wait")
    assert res.returncode == 0, res.stderr
    # Its log lives under its full name, PROJECT/NAME.
    assert _run(world, "logs", "proj/worker") == (0, "from the project\n", "")
    assert (world.state / "jobs" / "proj" / "worker").is_dir()
    daemons.kill_all()

    assert _run(world, "down", str(proj)) == (
        0, f"project proj unregistered ({proj})\n"
           "the daemon is not running; its harnesses are gone at its next start\n", "")
    assert _registry(world) == {"version": 1, "projects": []}
    assert _run(world, "down", str(proj)) == (
        1, "", f"harness: {proj} is not a registered project\n")


def test_a_project_whose_directory_was_deleted_stops_the_boot_saying_how_to_drop_it(
        world: World, daemons: Daemons) -> None:
    """A checkout removed without `harness down` stopped the daemon's boot with a bare
    "PATH/harness.toml: No such file or directory". It still stops it, with exit 2, as
    any project file that does not load does (DESIGN.md §3: errors name the file; a
    config is loaded whole or not at all), but the line names the registration, its
    directory and the command that drops it; after that command the daemon boots."""
    proj = _project(world)
    daemons.write_config('[harness.solo]\nkind = "oneshot"\nargv = ["true"]\n')
    assert _run(world, "up", str(proj))[0] == 0
    shutil.rmtree(proj)
    booted = daemons.start(wait=False)
    assert booted.wait(timeout=DEADLINE) == 2
    assert daemons.stderr() == (
        f"{proj}/harness.toml: cannot read: No such file or directory: project 'proj' is "
        f"registered (harness up) at {proj}, which is not there any more; restore it, or "
        f"unregister it with: harness down {proj}\n")
    assert not daemons.socket.exists()

    assert _run(world, "down", str(proj)) == (
        0, f"project proj unregistered ({proj})\n"
           "the daemon is not running; its harnesses are gone at its next start\n", "")
    daemons.start()
    assert _names(world) == {"solo": "oneshot"}


def test_up_uses_the_current_directory_and_a_given_name(world: World) -> None:
    proj = _project(world, "checkout")
    assert _run_in(proj, world, "up", "--name", "web") == (
        0, f"project web registered ({proj}): web/worker\n"
           "the daemon is not running; the project loads at its next start\n", "")
    assert _registry(world) == {"version": 1, "projects": [{"name": "web", "dir": str(proj)}]}
    # Another name for the same directory is refused; the registry keeps the first.
    assert _run(world, "up", str(proj), "--name", "other") == (
        1, "", f"harness: {proj}: already registered as 'web'\n")
    assert _run_in(proj, world, "down")[0] == 0
    assert _registry(world) == {"version": 1, "projects": []}


def test_up_refuses_a_project_carrying_the_ledger(world: World) -> None:
    proj = _project(world, text=PROJECT + '\n[ledger]\nretention = "30d"\n')
    code, out, err = _run(world, "up", str(proj))
    assert (code, out) == (2, "")
    assert err == (f"{proj}/harness.toml:6: ledger: the ledger is configured globally, "
                   "in the daemon's harness.toml\n"
                   f"harness: {proj} was not registered\n")
    assert _registry(world) is None


def test_up_refuses_a_project_a_schedule_and_a_clash(world: World) -> None:
    proj = _project(world, text='[harness.worker]\nschedule = "@hourly"\nargv = ["true"]\n')
    code, _out, err = _run(world, "up", str(proj))
    assert code == 2
    assert err.splitlines()[0] == (
        f"{proj}/harness.toml:2: harness.worker.schedule: a project harness cannot be "
        "scheduled; schedules are configured globally")
    assert _registry(world) is None

    # Two projects may not share a name: the second needs --name.
    first = _project(world, "a")
    (world.root / "b").mkdir()
    second = _project(world, "b/a")
    assert _run(world, "up", str(first))[0] == 0
    assert _run(world, "up", str(second)) == (
        1, "", f"harness: {second}: project name 'a' is already taken by {first}\n")
    assert _run(world, "up", str(second), "--name", "a2")[0] == 0
    assert [p["name"] for p in _registry(world)["projects"]] == ["a", "a2"]  # type: ignore[index]


def test_an_error_never_puts_a_control_on_the_terminal(world: World) -> None:
    """Every `harness: ...` error line shows what it quotes as a terminal cannot act on
    it: a path with a title-setting escape and a line break read as their escapes, on
    one line, and a backslash stays one backslash."""
    odd = world.root / "x\x1b]0;owned\x07\nharness: all good\\y"
    assert _run(world, "up", str(odd)) == (
        1, "", f"harness: {world.root}/x\\x1b]0;owned\\x07\\nharness: all good\\y: "
        "not a directory\n")


def test_a_config_problem_never_puts_a_control_on_the_terminal(world: World) -> None:
    """A project's file is not always to be trusted: a key spelled with an escape that
    retitles the terminal is reported as its escape, and the project is not registered."""
    proj = _project(world, text=PROJECT + '"\\u001b]0;PWN\\u0007" = 1\n')
    code, out, err = _run(world, "up", str(proj))
    assert (code, out) == (2, "")
    assert "\x1b" not in err and "\x07" not in err
    assert "harness.worker.\\x1b]0;PWN\\x07: " in err, err
    assert err.endswith(f"harness: {proj} was not registered\n")


def test_up_bad_input(world: World) -> None:
    empty = world.root / "empty"
    empty.mkdir()
    assert _run(world, "up", str(empty)) == (
        1, "", f"harness: {empty}: no harness.toml in this directory\n")
    assert _run(world, "up", str(world.root / "nowhere")) == (
        1, "", f"harness: {world.root / 'nowhere'}: not a directory\n")
    proj = _project(world)
    code, out, err = _run(world, "up", str(proj), "--name", "a b")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == ("Error: Invalid value for '--name': 'a b' is not a usable "
                                    "project name (letters, digits, '.', '_', '-')")
    assert _registry(world) is None
    assert _run(world, "down", str(proj)) == (
        1, "", f"harness: {proj} is not a registered project\n")


# ---- with a running daemon: these need the daemon's `reload` op -----------------------

def test_reload_applies_and_refuses(world: World, daemons: Daemons) -> None:
    daemons.write_config('[harness.a]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    daemons.write_config('[harness.a]\nkind = "oneshot"\nargv = ["true"]\n'
                         '[harness.b]\nkind = "oneshot"\nargv = ["true"]\n')
    assert _run(world, "reload") == (0, "reloaded: added b; 1 unchanged\n", "")
    assert _names(world) == {"a": "oneshot", "b": "oneshot"}
    daemons.write_config('[harness.b]\nkind = "oneshot"\nargv = ["false"]\n')
    code, out, err = _run(world, "reload", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {"added": [], "removed": ["a"], "changed": ["b"],
                               "unchanged": 0}

    daemons.write_config('[harness.b]\nkind = "oneshot"\nargv = "false"\n')
    code, out, err = _run(world, "reload")
    assert (code, out) == (2, "")
    assert err.splitlines()[0] == ("harness: the daemon refused the new config and keeps "
                                   "its last good one:")
    assert err.splitlines()[1].startswith(f"{daemons.config}:3: harness.b.argv: ")
    assert _names(world) == {"b": "oneshot"}  # the last good config stays


def test_up_and_down_reload_a_running_daemon(world: World, daemons: Daemons) -> None:
    proj = _project(world)
    daemons.write_config('[harness.solo]\nkind = "oneshot"\nargv = ["true"]\n')
    daemons.start()
    assert _run(world, "up", str(proj)) == (
        0, f"project proj registered ({proj}): proj/worker\n"
           "reloaded: added proj/worker; 1 unchanged\n", "")
    assert _names(world) == {"proj/worker": "oneshot", "solo": "oneshot"}
    assert _run(world, "down", str(proj)) == (
        0, f"project proj unregistered ({proj})\nreloaded: removed proj/worker; "
           "1 unchanged\n", "")
    assert _names(world) == {"solo": "oneshot"}


def test_up_and_down_show_the_directory_escaped(world: World) -> None:
    """A directory named with an escape sequence retitled the terminal (and a CSI one,
    which click strips off a pipe only, coloured it)."""
    d = world.root / "p\x1b]0;pwned\x07"
    d.mkdir()
    (d / "harness.toml").write_text(PROJECT)
    shown = f"{world.root}/p\\x1b]0;pwned\\x07"
    assert _run(world, "up", str(d), "--name", "ok") == (
        0, f"project ok registered ({shown}): ok/worker\n"
           "the daemon is not running; the project loads at its next start\n", "")
    assert _run(world, "down", str(d)) == (
        0, f"project ok unregistered ({shown})\n"
           "the daemon is not running; its harnesses are gone at its next start\n", "")


TOKEN = "ghp_" + "A1b2C3d4" * 4 + "abcd"  # the form of a GitHub token


def test_up_and_down_never_repeat_a_secret_in_an_argument(world: World) -> None:
    """A directory or a --name holding a token: every error scrubs it, as a config error
    scrubs what it quotes (and a value scrubbed is never cut to a piece the scrubber no
    longer knows)."""
    base = world.root / TOKEN
    base.mkdir()
    (base / "empty").mkdir()
    proj = _project(world, f"{TOKEN}/p")
    shown = f"{world.root}/[REDACTED]"
    results = [
        (_run(world, "up", str(base / "nowhere")),
         (1, "", f"harness: {shown}/nowhere: not a directory\n")),
        (_run(world, "up", str(base / "empty")),
         (1, "", f"harness: {shown}/empty: no harness.toml in this directory\n")),
        (_run(world, "up", str(proj), "--name", "x"),
         (0, f"project x registered ({shown}/p): x/worker\n"
             "the daemon is not running; the project loads at its next start\n", "")),
        # Refused by register_project itself.
        (_run(world, "up", str(proj), "--name", "y"),
         (1, "", f"harness: {shown}/p: already registered as 'x'\n")),
        (_run(world, "up", str(_project(world, "q")), "--name", "x"),
         (1, "", f"harness: {world.root}/q: project name 'x' is already taken by "
                 f"{shown}/p\n")),
        (_run(world, "down", str(base / "empty")),
         (1, "", f"harness: {shown}/empty is not a registered project\n")),
    ]
    for got, want in results:
        assert got == want
    code, out, err = _run(world, "up", str(proj), "--name", f"{TOKEN}!")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == ("Error: Invalid value for '--name': '[REDACTED]!' is not "
                                    "a usable project name (letters, digits, '.', '_', '-')")
    assert TOKEN not in err

    # A config problem names the project's file by its path, scrubbed the same way.
    assert _run(world, "down", str(proj))[0] == 0
    (proj / "harness.toml").write_text(PROJECT.replace('["echo", "from the project"]',
                                                       '"echo"'))
    assert _run(world, "up", str(proj)) == (
        2, "", f"{shown}/p/harness.toml:4: harness.worker.argv: must be a non-empty list of "
               "strings, got string 'echo'\n"
               f"harness: {shown}/p was not registered\n")


def test_every_line_of_up_and_down_quotes_a_path_as_their_refusals_do(world: World) -> None:
    """The success lines printed the directory only escaped, never scrubbed: a project in
    a directory named after a token had the token echoed on stdout by `up` and `down`,
    which the refusals for the same path hid. Every line now shows a path (and the name
    the registry holds, and the socket's path) through the one helper the refusals use:
    scrubbed, then escaped, a backslash left as it is."""
    proj = world.root / TOKEN / "p\x1b[31m\\q"
    proj.mkdir(parents=True)
    (proj / "harness.toml").write_text(PROJECT)
    shown = f"{world.root}/[REDACTED]/p\\x1b[31m\\q"
    assert _run(world, "up", str(proj), "--name", "x") == (
        0, f"project x registered ({shown}): x/worker\n"
           "the daemon is not running; the project loads at its next start\n", "")
    # The refusal for the very same path shows it the same way.
    assert _run(world, "up", str(proj), "--name", "y") == (
        1, "", f"harness: {shown}: already registered as 'x'\n")
    assert _run(world, "down", str(proj)) == (
        0, f"project x unregistered ({shown})\n"
           "the daemon is not running; its harnesses are gone at its next start\n", "")

    # A registry edited by hand: `down` names the project as the registry holds it.
    other = _project(world, "other")
    (world.state / "projects.json").write_text(json.dumps(
        {"version": 1, "projects": [{"name": TOKEN, "dir": str(other)}]}))
    assert _run(world, "down", str(other)) == (
        0, f"project [REDACTED] unregistered ({other})\n"
           "the daemon is not running; its harnesses are gone at its next start\n", "")

    # A daemon that holds a socket whose path holds a token, and does not answer. (A
    # short directory of its own: a socket's path is limited to about 100 bytes.)
    with tempfile.TemporaryDirectory(prefix="h", dir="/tmp") as short:
        sock = Path(short) / TOKEN / "s.sock"
        sock.parent.mkdir()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(sock))
            listener.listen(4)
            said = f"{short}/[REDACTED]/s.sock"
            assert _run(world, "--socket", str(sock), "up", str(other)) == (
                0, f"project other registered ({other}): other/worker\n"
                   f"the daemon is not responding ({said}); the project loads when it is "
                   "reloaded or started again\n", "")
            assert _run(world, "--socket", str(sock), "reload") == (
                1, "", f"harness: daemon not responding ({said})\n")


def test_a_reload_never_logs_a_secret_in_a_project_path(world: World,
                                                        daemons: Daemons) -> None:
    """The daemon logs a refused config and sends it to `harness reload`: a registered
    project's path is scrubbed in both."""
    proj = _project(world, TOKEN)
    daemons.write_config("")
    assert _run(world, "up", str(proj), "--name", "p")[0] == 0
    daemons.start()
    (proj / "harness.toml").write_text(PROJECT.replace('["echo", "from the project"]',
                                                       '"echo"'))
    problem = (f"{world.root}/[REDACTED]/harness.toml:4: harness.worker.argv: must be a "
               "non-empty list of strings, got string 'echo'")
    assert _run(world, "reload") == (
        2, "", "harness: the daemon refused the new config and keeps its last good one:\n"
               f"{problem}\n")
    assert problem in daemons.stderr()
    assert TOKEN not in daemons.stderr()


def test_a_project_name_that_reads_as_a_secret_is_refused(world: World) -> None:
    """Its harnesses would be `<token>/worker` on every ledger line, which the scrubber
    redacts whole: `up` refused every harness in it with "rename the harness", or, for a
    project of none, registered the token and echoed it. Now the name is refused, by
    `up` and by `register_project` alike, without quoting it."""
    proj = _project(world, "p")
    code, out, err = _run(world, "up", str(proj), "--name", TOKEN)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == ("Error: Invalid value for '--name': '[REDACTED]' reads "
                                    "like a key or a token, which the run ledger would redact")
    assert _registry(world) is None
    named = _project(world, TOKEN, "")  # the default name is the directory's
    code, out, err = _run(world, "up", str(named))
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == (
        "Error: Invalid value for 'DIR': '[REDACTED]' reads like a key or a token, which the "
        "run ledger would redact (the project takes DIR's name; pass --name to give it "
        "another)")
    assert TOKEN not in err
    with pytest.raises(RegistryError) as refused:
        register_project(str(named))
    assert str(refused.value) == (f"{world.root}/[REDACTED]: '[REDACTED]' reads like a key or "
                                  "a token, which the run ledger would redact; pass another "
                                  "name")
