"""The daemon's boot, end to end: which socket it serves, where it creates it, what the
first boot leaves of a legacy state.json (SPEC-0022 REQ-13), and a SIGTERM that comes
while the boot is still stopping a crashed daemon's orphans.

Real daemons (`python -m harness.cli [--socket PATH] daemon`) in the throwaway XDG world:
`--socket PATH` is the path served and the HARNESS_SOCKET every run is given, whatever
HARNESS_SOCKET the daemon itself was started with; a first boot with no XDG_RUNTIME_DIR
creates the state dir (0700) the socket and its lock live in; a first boot on a legacy
state.json moves its records into the ledger and leaves `runs.NAME = {last_run_id}`, which
a second boot does not touch; SIGTERM during the boot's orphan grace lets the orphan's
kill finish, then shuts down cleanly (exit 0, no socket left, no open record). Every
daemon and run is killed at teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import World
from daemons import (
    DEADLINE,
    STUBBORN,
    Daemons,
    alive,
    record_of,
    request,
    runs_of,
    stubborn_pid,
    until,
)
from harness import __version__
from harness.control.client import Client, DaemonUnreachable
from harness.supervisor.runner import DEFAULT_GRACE
from ledgertools import all_lines


def _spawn(d: Daemons, *global_args: str, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.Popen[str]:
    """`harness GLOBAL_ARGS daemon`, owned by `d` (killed at teardown; stderr via d.stderr)."""
    n = len(d.procs)
    out = open(d.world.root / f"daemon{n}.out", "w")  # noqa: SIM115
    err = open(d.world.root / f"daemon{n}.err", "w")  # noqa: SIM115
    d.files += [out, err]
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *global_args, "daemon"],
                            env=d.world.env if env is None else env, cwd=cwd, text=True,
                            stdout=out, stderr=err)
    d.procs.append(proc)
    return proc


def _answers(d: Daemons, proc: subprocess.Popen[str], sock: Path) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"daemon exited {proc.returncode}: {d.stderr()}")
    try:
        Client(str(sock), timeout=2.0).close()
    except DaemonUnreachable:
        return False
    return True


def _harness(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)


# -- --socket PATH ------------------------------------------------------------------------


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative-over-env"])
def test_socket_flag_is_the_socket_served_and_the_one_runs_are_given(
        world: World, daemons: Daemons, relative: bool) -> None:
    daemons.write_config("""
[harness.where]
kind = "oneshot"
argv = ["sh", "-c", "echo \\"$HARNESS_SOCKET\\""]
""")
    alt = world.root / "alt.sock"
    env = dict(world.env)
    if relative:
        # The flag wins over HARNESS_SOCKET, and a relative path is the daemon's cwd's.
        env["HARNESS_SOCKET"] = str(world.root / "env.sock")
        proc = _spawn(daemons, "--socket", "alt.sock", env=env, cwd=world.root)
    else:
        proc = _spawn(daemons, "--socket", str(alt), env=env)
    until("the --socket path to answer", lambda: _answers(daemons, proc, alt))
    assert stat.S_IMODE(alt.lstat().st_mode) == 0o600
    assert not (world.root / "run" / "harness.sock").exists()
    assert not (world.root / "env.sock").exists()

    listed = world.harness("--socket", str(alt), "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [{"name": "where", "kind": "oneshot",
                                          "state": "armed"}]
    # The run is told the path the daemon serves, made absolute.
    ran = world.harness("--socket", str(alt), "trigger", "where", "--wait")
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, f"{alt}\n", "where run 1: success\n")
    default = world.harness("list")
    assert default.returncode == 1
    assert default.stderr.startswith("harness: daemon not running")

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    assert not alt.exists()


# -- first boot ---------------------------------------------------------------------------


def test_a_first_boot_without_a_runtime_dir_creates_the_state_dir_for_the_socket(
        world: World, daemons: Daemons) -> None:
    daemons.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    env = {k: v for k, v in world.env.items() if k != "XDG_RUNTIME_DIR"}
    xdg_state = world.root / "state"
    assert not xdg_state.exists()
    sock = world.state / "harness.sock"
    proc = _spawn(daemons, env=env)
    until("the state-dir socket to answer", lambda: _answers(daemons, proc, sock))
    for d in (xdg_state, world.state):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
    assert (world.state / "harness.sock.lock").exists()
    listed = _harness(env, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [h["name"] for h in json.loads(listed.stdout)] == ["ok"]

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    assert not sock.exists()
    assert "cannot serve the control socket" not in daemons.stderr()


def _legacy_run(run_id: int, start: datetime) -> dict[str, Any]:
    """One DESIGN.md §2 legacy record: a scheduled run that succeeded in 90 s."""
    return {"run_id": run_id, "trigger": "schedule", "outcome": "success",
            "started_at": start.isoformat().replace("+00:00", "Z"),
            "ended_at": (start + timedelta(seconds=90)).isoformat().replace("+00:00", "Z"),
            "exit_code": 0, "reason": None, "window": None, "first_window": None,
            "windows": None}


def test_a_symlink_at_the_socket_lock_is_refused_not_followed(
        world: World, daemons: Daemons) -> None:
    """The lock beside the socket is opened without following a link: one planted there
    would have the daemon create (or lock) a file wherever it points. The daemon says so
    in one line naming the path and exits 1, before the ledger is touched."""
    daemons.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    lock = daemons.socket.with_name("harness.sock.lock")
    target = world.root / "elsewhere"
    lock.symlink_to(target)
    proc = daemons.start(wait=False)
    assert proc.wait(timeout=DEADLINE) == 1
    assert daemons.stderr() == (f"harness: cannot serve the control socket: {lock} is a "
                                "symbolic link; not following it\n")
    assert not target.exists()
    assert lock.is_symlink()
    assert not daemons.socket.exists()
    assert not world.ledger.exists()


def test_a_socket_path_too_long_for_a_unix_socket_is_refused_before_anything_is_made(
        world: World) -> None:
    """A --socket longer than sockaddr_un holds (108 bytes with its NUL on Linux) was
    refused only at bind, after the boot had made the socket's directory and its
    PATH.lock, both left behind. Now refused first, in one line naming the path and the
    limit, exit 1; a client refuses it in the same words instead of socket's "AF_UNIX
    path too long". One byte shorter is a path a daemon could serve."""
    parent = world.root / ("d" * 60)
    sock = parent / ("s" * 60 + ".sock")
    size = len(os.fsencode(str(sock)))
    assert size >= 108
    why = f"the path is {size} bytes; a Unix socket's path holds at most 107"
    res = _harness(world.env, "--socket", str(sock), "daemon")
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"harness: cannot serve the control socket {sock}: {why}\n")
    assert sorted(p.name for p in world.root.iterdir()) == ["run"]
    assert list((world.root / "run").iterdir()) == []
    res = _harness(world.env, "--socket", str(sock), "jobs")
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"harness: daemon not reachable ({why}) ({sock})\n")
    fits = world.root / "s"
    fits = fits.with_name("s" * (107 - len(os.fsencode(str(fits))) + 1))
    assert len(os.fsencode(str(fits))) == 107
    res = _harness(world.env, "--socket", str(fits), "jobs")
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", f"harness: daemon not running ({fits}); start it with `harness daemon`\n")


def test_the_first_boot_leaves_state_json_in_the_legacy_shape_less_its_records(
        world: World, daemons: Daemons) -> None:
    """SPEC-0022 REQ-13's upgrade, read as a test outside the code base reads it: the
    daemon boots on DESIGN.md §2's legacy state.json holding 20 runs for nightly; the
    ledger then holds the 20, marked imported, and state.json holds no run records for
    nightly but keeps its last_run_id where it was, ``runs.nightly`` (the reference's
    ``runs.<name> = {last_run_id}``). A second boot imports nothing and leaves the file
    byte for byte as the first left it. Once said ``{"harnesses": {...}}`` and no ``runs``."""
    daemons.write_config('[harness.nightly]\nkind = "oneshot"\nargv = ["true"]\n')
    first = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=21)
    legacy = [_legacy_run(i, first + timedelta(hours=i)) for i in range(1, 21)]
    state = world.state / "state.json"
    world.state.mkdir(parents=True, mode=0o700)
    state.write_text(json.dumps({"runs": {"nightly": {"last_run_id": 20, "runs": legacy}}}))

    proc = daemons.start()
    request(daemons, "daemon_info")  # answered once the boot is done
    assert "ledger import: 20 legacy run(s), 40 line(s)" in daemons.stderr()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()

    with open(state) as f:
        doc = json.load(f)
    assert doc["runs"]["nightly"] == {"last_run_id": 20}
    assert doc == {"runs": {"nightly": {"last_run_id": 20}}}
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    lines = all_lines(world.ledger)
    assert len(lines) == 40 and all(x["imported"] is True for x in lines)
    recs = runs_of(world, "nightly")
    assert [r["run_id"] for r in recs] == list(range(20, 0, -1))
    assert all(r["imported"] is True and r["outcome"] == "success" for r in recs)
    assert [(r["started_at"][:19], r["ended_at"][:19]) for r in reversed(recs)] == [
        (x["started_at"][:19], x["ended_at"][:19]) for x in legacy]

    after_first = state.read_bytes()
    proc = daemons.start()
    request(daemons, "daemon_info")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    assert "ledger import" not in daemons.stderr()
    assert all_lines(world.ledger) == lines
    assert state.read_bytes() == after_first


def _logged(err: str) -> list[str]:
    """The daemon's stderr, each line as `LEVEL logger: message` (its time left out); a
    line that is not the log's own shape is kept whole, so it shows in a failed assert."""
    return [line.split(" ", 2)[2] if re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "
                                              r"[A-Z]+ harness\.\S+: ", line) else line
            for line in err.splitlines()]


def test_a_newline_in_the_runtime_dir_cannot_forge_a_log_line(
        world: World, daemons: Daemons) -> None:
    """A path the daemon logs is one line, its controls spelled out: a newline in
    XDG_RUNTIME_DIR once started a line of its own, read as the daemon's ERROR, and an
    escape sequence reached the terminal raw."""
    daemons.write_config('[harness.ok]\nkind = "oneshot"\nargv = ["true"]\n')
    run = world.root / "r\x1b[2J\nERROR harness.daemon: X"  # a socket path is short
    run.mkdir(mode=0o700)
    proc = _spawn(daemons, env={**world.env, "XDG_RUNTIME_DIR": str(run)})
    until("the daemon's socket", lambda: _answers(daemons, proc, run / "harness.sock"))
    with Client(str(run / "harness.sock"), timeout=30.0) as c:
        c.request("list")  # answered once the boot is done: the SIGTERM comes after it
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0, daemons.stderr()
    shown = f"{world.root}/r\\x1b[2J\\nERROR harness.daemon: X"
    assert _logged(daemons.stderr()) == [
        f"INFO harness.control: control: listening on {shown}/harness.sock",
        "INFO harness.daemon: ledger import: 0 legacy run(s), 0 line(s)",
        f"INFO harness.daemon: daemon {__version__} up: pid {proc.pid}, 1 harness(es), "
        f"socket {shown}/harness.sock",
        "INFO harness.daemon: shutting down",
    ]


# -- a signal during the boot -------------------------------------------------------------


def test_sigterm_during_the_boots_orphan_grace_finishes_the_kill_and_exits_cleanly(
        world: World, daemons: Daemons) -> None:
    pidfile = world.root / "stubborn.pid"
    daemons.pidfiles.append(pidfile)
    daemons.write_config(f"""
[harness.stubborn]
kind = "oneshot"
argv = ["sh", "-c", "echo $$ > {pidfile}; {STUBBORN}"]
""")
    first = daemons.start()
    res = world.harness("trigger", "stubborn")
    assert (res.returncode, res.stdout) == (0, "1\n"), res.stderr
    orphan = stubborn_pid(pidfile)
    first.kill()
    first.wait(timeout=DEADLINE)
    assert alive(orphan)

    try:
        booting = daemons.start(wait=False)
        marker = (f"run stubborn/1: its process group {orphan} outlived the crashed daemon; "
                  "stopping it")
        until("the boot to stop the orphan", lambda: marker in daemons.stderr())
        # It ignores SIGTERM, so the boot is inside the orphan's grace while it runs.
        assert alive(orphan)
        booting.send_signal(signal.SIGTERM)
        assert booting.wait(timeout=DEADLINE + 2 * DEFAULT_GRACE) == 0, daemons.stderr()
    finally:
        if alive(orphan):
            with contextlib.suppress(OSError):
                os.killpg(orphan, signal.SIGKILL)

    assert not alive(orphan)
    assert not daemons.socket.exists()
    err = daemons.stderr()
    assert "Traceback" not in err
    rec = record_of(world, "stubborn", 1)  # read from the files: no daemon answers
    assert rec is not None
    assert (rec["outcome"], rec["reason"]) == ("interrupted", "daemon_crash")
    every = world.harness("runs", "--json")
    assert every.returncode == 0, every.stderr
    assert [(r["harness"], r["run_id"], r["outcome"]) for r in json.loads(every.stdout)] == [
        ("stubborn", 1, "interrupted")]
    shown = world.harness("logs", "stubborn", "--run", "1")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.endswith(
        f"harness: stopped the orphaned process group {orphan} left by the crashed daemon "
        f"(SIGKILL after {DEFAULT_GRACE:g}s)\n"), shown.stdout


# -- one writer per ledger ------------------------------------------------------------------


def test_a_second_daemon_on_the_same_state_dir_refuses_the_ledger(
        world: World, daemons: Daemons) -> None:
    """Two daemons with different sockets (one from a systemd unit, one from a shell with
    no XDG_RUNTIME_DIR) but one state directory: the second must not write the ledger,
    where it would issue the first one's seqs again and close its live runs as crashed."""
    daemons.write_config(f"""
[harness.sleeper]
kind = "resident"
argv = ["sh", "-c", "{STUBBORN}"]
""")
    daemons.start()
    until("the resident's run", lambda: record_of(world, "sleeper", 1))
    proc = _spawn(daemons, "--socket", str(world.root / "other.sock"))
    assert proc.wait(timeout=DEADLINE) == 1
    err = daemons.stderr()
    assert "cannot open the ledger" in err and "held by another process" in err, err
    assert "Traceback" not in err
    # The first daemon's run is still open and still its own; one seq each, in order.
    rec = record_of(world, "sleeper", 1)
    assert rec is not None and rec["outcome"] == "running", rec
    res = world.harness("ledger", "verify", "--json")
    assert res.returncode == 0, res.stdout + res.stderr


# -- what a killed daemon left half made ----------------------------------------------------

_KILLED_INSIDE = """
import os, sys, time
from harness.ledger.files import atomic_replace

def fill(fd):
    os.write(fd, b"half made")
    print("inside", flush=True)
    time.sleep(600)

atomic_replace(sys.argv[1], fill)
"""


def _killed_inside_a_replacement(world: World, target: Path) -> str:
    """SIGKILL a process inside `atomic_replace` of `target`; the temporary file it left."""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    before = set(os.listdir(target.parent))
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_INSIDE, str(target)],
                            env=world.env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "inside\n"
    finally:
        proc.kill()
        proc.wait(timeout=DEADLINE)
        if proc.stdout is not None:
            proc.stdout.close()
    (left,) = set(os.listdir(target.parent)) - before
    assert (target.parent / left).read_bytes() == b"half made"
    return left


def test_the_boot_removes_what_a_killed_daemon_left_half_made_and_nothing_else(
        world: World, daemons: Daemons) -> None:
    """A daemon killed inside the atomic replacement of state.json, of a closed run's
    compressed log or of the import marker leaves its temporary file for good; the next
    daemon owns those files alone and removes them at boot, saying so. A replacement of a
    file the daemon does not own (projects.json, which `harness up` writes while a daemon
    runs) and files of other names stay, to the byte."""
    state, jobs = world.state, world.state / "jobs" / "nightly"
    gone = [state / _killed_inside_a_replacement(world, state / "state.json"),
            jobs / _killed_inside_a_replacement(world, jobs / "3.log.zst"),
            world.ledger / _killed_inside_a_replacement(world, world.ledger / ".imported")]
    kept = [state / _killed_inside_a_replacement(world, state / "projects.json")]
    for name in (".3.log.zst.tmp", ".3.log.zst.12.tmp", "notes.tmp", ".4.log.12.34.tmp"):
        (jobs / name).write_bytes(b"not a leftover")
        kept.append(jobs / name)
    (jobs / "2.log").write_bytes(b"a closed run's log\n")
    kept.append(jobs / "2.log")
    before = {p: p.read_bytes() for p in kept}
    daemons.write_config("""
[harness.nightly]
kind = "oneshot"
argv = ["true"]
""")
    daemons.start()
    res = world.harness("jobs")  # answered once the boot is done
    assert res.returncode == 0, res.stdout + res.stderr
    assert [p for p in gone if p.exists()] == []
    assert {p: p.read_bytes() for p in kept} == before
    err = daemons.stderr()
    assert (f"removed {gone[0]}, {gone[1]}, left half made by a daemon that was killed"
            in err), err
    assert (f"ledger: removed {gone[2].name}, left half made by a process that was killed"
            in err), err
    assert "Traceback" not in err
