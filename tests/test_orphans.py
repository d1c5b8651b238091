"""The processes of runs after their run or their daemon is gone (orphans.py, procs.py,
runner.Run's identity env and its end, daemon.py's boot): real processes, real files, and
end to end a real daemon that is SIGKILLed, stopped or booted again in a throwaway XDG world.

Unit level: a run's child carries HARNESS_NAME/RUN_ID/RUN_TRIGGER/SOCKET/STATE_DIR that no
env file can change; `kill_orphans` stops every process group whose processes carry the
state directory's marker (or, from before the marker, this socket), whatever the ledger
says of its run (closed by this boot, closed before, missing), SIGKILLs one that ignores
SIGTERM after the grace, notes each in its run's log, and never touches a process of
another state directory, an operator's shell, or our own process group.

End to end, each way the ledger's view once let a process outlive its daemon: (a) the
crash's closed line the disk refused at boot, (b) a restart whose opened line died queued
with the daemon, (c) a boot killed during the sweep, (d) a daemon booted on another socket
over the same state directory; and (e) a run's own end and its stop, which end the
descendants it left in its group, or that left it (setsid), as the README's "The daemon"
says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import World
from daemons import (
    DEADLINE,
    STUBBORN,
    Daemons,
    FaultDaemons,
    alive,
    comm,
    read_log,
    record_of,
    request,
    runs_of,
    stubborn_pid,
    until,
)
from harness.ledger.runledger import RunLedger
from harness.supervisor.history import CRASH_NOTE
from harness.supervisor.orphans import Orphan, find_orphans, kill_orphans
from harness.supervisor.runner import RunSpec, run_once
from harness.supervisor.state import RunIds, StateFile

LONG = 90.0  # what waits out the ledger writer's retry backoff


class Procs:
    """Processes a test spawned; every group still alive is killed at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []

    def spawn(self, script: str, env: dict[str, str], *, own_group: bool = True
              ) -> subprocess.Popen[bytes]:
        # Not ours to inherit: a suite run under a real daemon carries its marker.
        base = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
        proc = subprocess.Popen(["sh", "-c", script], env={**base, **env},
                                start_new_session=own_group, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    if os.getpgid(proc.pid) == proc.pid:
                        os.killpg(proc.pid, signal.SIGKILL)
                    else:
                        proc.kill()
                proc.wait(timeout=DEADLINE)
        for pid in self.pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.cleanup()


def _ident(sock: str, name: str, run_id: int, state: str | None = None) -> dict[str, str]:
    """A run's identity as the runner sets it; no HARNESS_STATE_DIR (`state` None) is a run
    of a daemon from before the marker."""
    env = {"HARNESS_SOCKET": sock, "HARNESS_NAME": name, "HARNESS_RUN_ID": str(run_id),
           "HARNESS_RUN_TRIGGER": "autostart"}
    if state is not None:
        env["HARNESS_STATE_DIR"] = state
    return env


def _wait_exec(pid: int, name: str) -> None:
    until(f"pid {pid} to exec {name}", lambda: comm(pid) == name)


def _pid_in(path: Path) -> int:
    """The pid `path` names, once a `sleep` runs under it."""
    until(f"{path.name} to name a running sleep",
          lambda: path.exists() and path.read_text().strip()
          and comm(int(path.read_text())) == "sleep")
    return int(path.read_text())


# -- the child's identity ------------------------------------------------------------------


def test_a_runs_child_carries_its_identity_and_env_files_cannot_change_it(
        world: World, tmp_path: Path, open_ledger: Callable[..., RunLedger],
        monkeypatch: pytest.MonkeyPatch) -> None:
    sock = str(tmp_path / "mine.sock")
    monkeypatch.setenv("HARNESS_SOCKET", sock)
    monkeypatch.setenv("HARNESS_STATE_DIR", "/the/daemons/own")
    env_file = tmp_path / "env"
    env_file.write_text("HARNESS_NAME=evil\nHARNESS_RUN_ID=99\nHARNESS_RUN_TRIGGER=forged\n"
                        "HARNESS_SOCKET=/elsewhere.sock\nHARNESS_STATE_DIR=/elsewhere\n"
                        "OTHER=kept\n")
    led = open_ledger(world.ledger)
    jobs = str(world.state / "jobs")
    ids = RunIds(StateFile(str(world.state / "state.json")), led, jobs)
    spec = RunSpec("probe", ["sh", "-c", 'echo "$HARNESS_NAME|$HARNESS_RUN_ID|'
                                         '$HARNESS_RUN_TRIGGER|$HARNESS_SOCKET|'
                                         '$HARNESS_STATE_DIR|$OTHER"'],
                   env_file=str(env_file))
    for run_id in (1, 2):
        rec = asyncio.run(run_once(spec, led, ids, trigger="manual", jobs_dir=jobs))
        assert (rec["run_id"], rec["outcome"]) == (run_id, "success")
        out = read_log(rec["log"])
        # The marker is the state directory holding the run's ledger, resolved.
        assert out == (f"probe|{run_id}|manual|{sock}|{os.path.realpath(world.state)}|"
                       "kept\n").encode()


# -- find and kill ------------------------------------------------------------------------


def test_every_process_of_this_state_dirs_runs_is_stopped_whatever_its_record_says(
        tmp_path: Path, procs: Procs, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "state"
    state.mkdir()
    mark = os.path.realpath(state)
    # The daemon reaches its state directory through a symlink: still the same one.
    link = tmp_path / "link"
    link.symlink_to(state)
    other = tmp_path / "other-state"
    other.mkdir()
    sock = str(tmp_path / "harness.sock")
    gpid = tmp_path / "grandchild.pid"
    # Ours, each a process group: a crashed run's (a shell with a background child in its
    # group), a descendant of the same run that left its group (setsid), a run whose record
    # was closed before this boot, one the ledger has no record of, and one spawned by a
    # daemon from before the marker, known by the socket it was told.
    crashed = procs.spawn(f"sleep 300 & echo $! > {gpid}; exec sleep 301",
                          _ident(sock, "res", 4, mark))
    escaped = procs.spawn("exec sleep 302", _ident(sock, "res", 4, mark))
    closed = procs.spawn("exec sleep 303", _ident(sock, "job", 2, mark))
    unrecorded = procs.spawn("exec sleep 304", _ident(sock, "res", 5, mark))
    legacy = procs.spawn("exec sleep 305", _ident(sock, "old", 1))
    ours = [crashed, escaped, closed, unrecorded, legacy]
    # Not ours: an operator's shell that exported our socket, a run of another state
    # directory (on our very socket), a run of a daemon from before the marker on another
    # socket, and a marked process in our own process group.
    shell = procs.spawn("exec sleep 306", {"HARNESS_SOCKET": sock})
    other_state = procs.spawn("exec sleep 307", _ident(sock, "res", 4, str(other)))
    other_legacy = procs.spawn("exec sleep 308", _ident(str(tmp_path / "b.sock"), "res", 4))
    in_our_group = procs.spawn("exec sleep 309", _ident(sock, "res", 4, mark),
                               own_group=False)
    for p in procs.procs:
        _wait_exec(p.pid, "sleep")
    until("the grandchild's pid", lambda: gpid.exists() and gpid.read_text().strip())
    grandchild = int(gpid.read_text())
    procs.pids.append(grandchild)
    _wait_exec(grandchild, "sleep")

    idents = {crashed.pid: ("res", 4), escaped.pid: ("res", 4), closed.pid: ("job", 2),
              unrecorded.pid: ("res", 5), legacy.pid: ("old", 1)}
    want = [Orphan(p.pid, *idents[p.pid], sorted([p.pid, grandchild]) if p is crashed
                   else [p.pid]) for p in sorted(ours, key=lambda p: p.pid)]
    assert find_orphans(str(link), sock) == want
    assert find_orphans(str(state), sock) == want
    assert find_orphans(str(tmp_path / "nobody"), str(tmp_path / "nobody.sock")) == []

    res_log, job_log = tmp_path / "res.log", tmp_path / "2.log"
    res_log.write_text("before\n")
    job_log.write_text("")
    crashed_rec = {"harness": "res", "run_id": 4, "kind": "resident", "log": str(res_log),
                   "outcome": "interrupted", "reason": "daemon_crash"}
    earlier = {("job", 2): {"harness": "job", "run_id": 2, "kind": "oneshot",
                            "log": str(job_log), "outcome": "success"}}
    caplog.set_level(logging.WARNING, "harness.supervisor")
    t0 = time.monotonic()
    stopped = kill_orphans(str(link), sock, [crashed_rec], lambda h, r: earlier.get((h, r)),
                           grace=DEADLINE)
    assert time.monotonic() - t0 < DEADLINE  # sleep obeys SIGTERM: no wait for the grace
    assert [(o.pgid, o.harness, o.run_id, o.pids, o.signalled, o.killed, o.gone, o.crashed)
            for o in stopped] == [(w.pgid, w.harness, w.run_id, w.pids, True, False, True,
                                   w.harness == "res" and w.run_id == 4) for w in want]
    assert [o.record for o in stopped] == [
        crashed_rec if o.run_id == 4 else earlier.get((o.harness, o.run_id)) for o in want]
    for p in ours:
        assert p.wait(timeout=DEADLINE) == -signal.SIGTERM
    until("the grandchild to end", lambda: not alive(grandchild))
    for p in (shell, other_state, other_legacy, in_our_group):
        assert p.poll() is None and alive(p.pid)

    said = {
        crashed.pid: f"run res/4: its process group {crashed.pid} outlived the crashed "
                     "daemon; stopping it",
        escaped.pid: f"run res/4: its process group {escaped.pid} outlived the crashed "
                     "daemon; stopping it",
        closed.pid: f"run job/2: its process group {closed.pid} outlived the daemon that "
                    "started it (the run's record, closed before this boot, reads success); "
                    "stopping it",
        unrecorded.pid: f"run res/5: its process group {unrecorded.pid} outlived the daemon "
                        "that started it, and the ledger has no record of that run; "
                        "stopping it",
        legacy.pid: f"run old/1: its process group {legacy.pid} outlived the daemon that "
                    "started it, and the ledger has no record of that run; stopping it",
    }
    assert [r.getMessage() for r in caplog.records if r.name == "harness.supervisor"] == [
        said[o.pgid] for o in want]
    first, second = sorted([crashed.pid, escaped.pid])
    assert res_log.read_text() == (
        f"before\nharness: stopped the orphaned process group {first} left by the crashed "
        f"daemon (SIGTERM)\nharness: stopped the orphaned process group {second} left by "
        "the crashed daemon (SIGTERM)\n")
    assert job_log.read_text() == (
        f"harness: stopped the process group {closed.pid} that outlived the run and the "
        "daemon that started it (SIGTERM)\n")


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(
        tmp_path: Path, procs: Procs) -> None:
    state = tmp_path / "state"
    state.mkdir()
    sock = str(tmp_path / "harness.sock")
    stubborn = procs.spawn("trap '' TERM; exec sleep 300",
                           _ident(sock, "nightly", 7, str(state)))
    _wait_exec(stubborn.pid, "sleep")
    log_path = tmp_path / "7.log"
    log_path.write_text("")
    t0 = time.monotonic()
    [o] = kill_orphans(str(state), sock, [{"harness": "nightly", "run_id": 7,
                                           "log": str(log_path)}], grace=0.5)
    took = time.monotonic() - t0
    assert (o.pgid, o.signalled, o.killed, o.gone) == (stubborn.pid, True, True, True)
    assert 0.5 <= took < DEADLINE
    assert stubborn.wait(timeout=DEADLINE) == -signal.SIGKILL
    assert log_path.read_text() == (
        f"harness: stopped the orphaned process group {stubborn.pid} left by the crashed "
        "daemon (SIGKILL after 0.5s)\n")


def test_no_process_of_this_state_dir_means_no_signal(tmp_path: Path, procs: Procs) -> None:
    state = tmp_path / "state"
    state.mkdir()
    sock = str(tmp_path / "harness.sock")
    p = procs.spawn("exec sleep 300", _ident(sock, "res", 1, str(tmp_path)))
    _wait_exec(p.pid, "sleep")
    assert kill_orphans(str(state), sock, [{"harness": "res", "run_id": 1}]) == []
    assert p.poll() is None


# -- end to end ---------------------------------------------------------------------------


def test_a_resident_orphaned_by_a_crash_is_stopped_before_it_is_started_again(
        world: World) -> None:
    d = Daemons(world)
    pidfile = world.root / "res.pid"
    d.pidfiles.append(pidfile)
    old_pid = 0
    try:
        d.write_config(f"""
[harness.res]
kind = "resident"
argv = ["sh", "-c", "echo started $HARNESS_NAME $HARNESS_RUN_ID $HARNESS_RUN_TRIGGER; \
echo $$ > {pidfile}; exec sleep 300"]
""")
        first = d.start()
        until("run 1 to be up", lambda: pidfile.exists() and pidfile.read_text().strip()
               and (rec := record_of(world, "res", 1)) is not None
               and rec["outcome"] == "running")
        old_pid = int(pidfile.read_text())
        _wait_exec(old_pid, "sleep")
        with open(f"/proc/{old_pid}/environ", "rb") as f:
            env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
        assert env[b"HARNESS_SOCKET"] == os.fsencode(str(d.socket))
        assert (env[b"HARNESS_NAME"], env[b"HARNESS_RUN_ID"]) == (b"res", b"1")

        first.kill()
        first.wait(timeout=DEADLINE)
        time.sleep(0.5)
        assert alive(old_pid)  # the crash left it running
        pidfile.unlink()

        d.start()
        until("the orphan to be stopped", lambda: not alive(old_pid))
        until("run 2 to be up", lambda: pidfile.exists() and pidfile.read_text().strip()
               and (rec := record_of(world, "res", 2)) is not None
               and rec["outcome"] == "running")
        new_pid = int(pidfile.read_text())
        assert new_pid != old_pid and alive(new_pid)

        rec1 = record_of(world, "res", 1)
        assert rec1 is not None
        assert (rec1["outcome"], rec1["reason"]) == ("interrupted", "daemon_crash")
        assert "ended_at" not in rec1
        rec2 = record_of(world, "res", 2)
        assert rec2 is not None and rec2["trigger"] == "autostart"

        # The durable log, in order: run 1, the crash note, the orphan stopped, then run 2.
        text = (world.state / "logs" / "res.log").read_text()
        assert re.fullmatch(
            r"started res 1 autostart\n"
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z harness: " + re.escape(CRASH_NOTE) + r"\n"
            r"harness: stopped the orphaned process group " + str(old_pid)
            + r" left by the crashed daemon \(SIGTERM\)\n"
            r"started res 2 autostart\n", text), text
        assert (f"run res/1: its process group {old_pid} outlived the crashed daemon; "
                "stopping it") in d.stderr()

        listed = world.harness("runs", "res", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [(r["run_id"], r["outcome"]) for r in json.loads(listed.stdout)] == [
            (2, "running"), (1, "interrupted")]
    finally:
        d.kill_all()
        if old_pid:
            with contextlib.suppress(OSError):
                os.killpg(old_pid, signal.SIGKILL)


# -- end to end: what the ledger does not know -------------------------------------------


def _resident(name: str, pidfile: Path, *, stubborn: bool = False) -> str:
    """A resident that writes its pid, then sleeps (ignoring SIGTERM when `stubborn`)."""
    tail = STUBBORN if stubborn else "exec sleep 1000"
    return f"""
[harness.{name}]
kind = "resident"
argv = ["sh", "-c", "echo $$ > {pidfile}; {tail}"]
"""


def _records(world: World, name: str) -> list[tuple[int, str, str | None, str]]:
    return [(r["run_id"], r["outcome"], r.get("reason"), r["trigger"])
            for r in runs_of(world, name)]


def _up(world: World, name: str, run_id: int, pidfile: Path) -> int:
    """The pid of run `run_id` of resident `name`, once its record reads running."""
    until(f"{name}/{run_id} to be running",
          lambda: (rec := record_of(world, name, run_id)) is not None
          and rec["outcome"] == "running", LONG)
    return _pid_in(pidfile)


def test_a_orphan_whose_crash_closed_line_the_full_disk_refused_is_stopped_all_the_same(
        world: World, fd: FaultDaemons) -> None:
    """(a) The daemon is SIGKILLed; the next boots on a disk that takes no write, so
    reconcile cannot make run 1's daemon_crash line durable (it stays queued). The
    orphan is stopped all the same before run 2 starts: never two of the resident."""
    pidfile = world.root / "res.pid"
    fd.write_config(_resident("res", pidfile))
    first = fd.start()
    old = _up(world, "res", 1, pidfile)
    first.kill()
    first.wait(timeout=DEADLINE)
    assert alive(old)
    pidfile.unlink()

    fd.start_faulty("--fail-write", "EROFS", "--fail-sync", "EROFS")
    fd.booted()
    new = _pid_in(pidfile)  # run 2, admitted on the failing disk (REQ-6)
    assert new != old and not alive(old)
    err = fd.stderr()
    assert "cannot close open run" in err
    assert "run res/1: closed as interrupted (daemon_crash)" not in err
    assert (f"WARNING harness.supervisor: run res/1: its process group {old} outlived the "
            "crashed daemon; stopping it") in err

    fd.faults()  # the disk is back: the queued lines drain, in order
    until("run 1's closed line and run 2's opened line",
          lambda: _records(world, "res") == [(2, "running", None, "autostart"),
                                             (1, "interrupted", "daemon_crash", "autostart")],
          LONG)
    assert alive(new) and not alive(old)
    text = (world.state / "logs" / "res.log").read_text()
    assert text == (f"harness: stopped the orphaned process group {old} left by the crashed "
                    "daemon (SIGTERM)\n")


def test_b_a_restart_whose_opened_line_died_queued_with_the_daemon_is_stopped_at_boot(
        world: World, fd: FaultDaemons) -> None:
    """(b) REQ-6's exception: an unbudgeted resident exits on its own and is restarted at
    once, its closed line and the restart's opened line queued behind a disk that takes
    no write. The daemon is SIGKILLed with both still queued. Run 2 used to have no record
    at all, though its process ran (stopped by the next boot all the same). state.json
    names it since the write that persisted its id, and the boot finds its process: it
    reads interrupted/daemon_crash, as any run a crash cut short, with what is known of
    it (no start or end time)."""
    gate, pidfile = world.root / "go", world.root / "res.pid"
    fd.write_config(f"""
[harness.res]
kind = "resident"
restart = "always"
restart_delay = "100ms"
argv = ["sh", "-c", 'if [ "$HARNESS_RUN_ID" = 1 ]; then while [ ! -e {gate} ]; do sleep 0.05; \
done; exit 3; fi; echo $$ > {pidfile}; exec sleep 1000']
""")
    first = fd.start_faulty()
    until("run 1 to be running", lambda: (rec := record_of(world, "res", 1)) is not None
          and rec["outcome"] == "running")
    fd.faults(write={"errno": "EIO"})
    gate.touch()  # run 1 exits 3 on its own; the restart does not wait for the disk
    orphan = _pid_in(pidfile)
    until("run 1's closed line and run 2's opened line to be queued",
          lambda: request(fd, "daemon_info")["ledger"]["queued"] == 2)
    first.kill()
    first.wait(timeout=DEADLINE)
    assert alive(orphan)
    pidfile.unlink()

    fd.start()
    fd.booted()
    assert not alive(orphan)
    err = fd.stderr()
    assert ("WARNING harness.supervisor: run res/2: its opened line was lost with the daemon, "
            "but its process outlived it; recorded, to be closed as interrupted "
            "(daemon_crash)") in err
    assert "WARNING harness.daemon: run res/2: closed as interrupted (daemon_crash)" in err
    assert (f"WARNING harness.supervisor: run res/2: its process group {orphan} outlived the "
            "crashed daemon; stopping it") in err
    new = _up(world, "res", 3, pidfile)
    assert new != orphan
    # Run 1's own end died queued too: its record is the crash's.
    assert _records(world, "res") == [(3, "running", None, "autostart"),
                                      (2, "interrupted", "daemon_crash", "restart"),
                                      (1, "interrupted", "daemon_crash", "autostart")]
    assert record_of(world, "res", 2) == {
        "harness": "res", "run_id": 2, "seq": 2, "kind": "resident", "trigger": "restart",
        "outcome": "interrupted", "reason": "daemon_crash",
        "log": str(world.state / "logs" / "res.log")}
    # The shared durable log says it of each crashed run, then names the stopped group.
    text = (world.state / "logs" / "res.log").read_text()
    note = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z harness: " + re.escape(CRASH_NOTE) + "\n"
    assert re.fullmatch(note * 2 + f"harness: stopped the orphaned process group {orphan} "
                        r"left by the crashed daemon \(SIGTERM\)\n", text), text


def test_c_an_orphan_whose_boot_was_killed_mid_sweep_is_stopped_by_the_next_boot(
        world: World, daemons: Daemons) -> None:
    """(c) The boot that closed run 1 as daemon_crash is SIGKILLed inside the orphan's
    grace, and the orphan ignores SIGTERM: its record is closed, its process runs on. The
    next boot stops it (SIGKILL after the grace) before run 2 starts."""
    d = daemons
    pidfile = world.root / "res.pid"
    d.write_config(_resident("res", pidfile, stubborn=True))
    first = d.start()
    until("run 1 to be running", lambda: (rec := record_of(world, "res", 1)) is not None
          and rec["outcome"] == "running")
    old = stubborn_pid(pidfile)
    first.kill()
    first.wait(timeout=DEADLINE)
    pidfile.unlink()

    second = d.start(wait=False)
    until("the second boot to be stopping the orphan",
          lambda: f"its process group {old} outlived the crashed daemon; stopping it"
          in d.stderr())
    second.kill()
    second.wait(timeout=DEADLINE)
    assert alive(old)  # it ignored the SIGTERM, and nobody was left to send a SIGKILL
    assert _records(world, "res") == [(1, "interrupted", "daemon_crash", "autostart")]

    d.start()
    request(d, "list")  # the boot is done: the sweep and the autostart behind it
    assert not alive(old)
    assert (f"WARNING harness.supervisor: run res/1: its process group {old} outlived the "
            "daemon that started it (the run's record, closed before this boot, reads "
            "interrupted); stopping it") in d.stderr()
    new = _up(world, "res", 2, pidfile)
    assert new != old
    assert _records(world, "res") == [(2, "running", None, "autostart"),
                                      (1, "interrupted", "daemon_crash", "autostart")]
    text = (world.state / "logs" / "res.log").read_text()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z harness: " + re.escape(CRASH_NOTE) + "\n"
        r"harness: stopped the process group " + str(old) + " that outlived the run and the "
        r"daemon that started it \(SIGKILL after 5s\)\n", text), text


def test_d_a_daemon_on_another_socket_stops_the_orphans_of_its_state_dir(
        world: World, daemons: Daemons) -> None:
    """(d) The crashed daemon served the XDG socket; the next one, over the same state
    directory, serves another (HARNESS_SOCKET). Its runs are still the ones it stops."""
    d = daemons
    pidfile = world.root / "res.pid"
    d.write_config(_resident("res", pidfile))
    first = d.start()
    old = _up(world, "res", 1, pidfile)
    first.kill()
    first.wait(timeout=DEADLINE)
    pidfile.unlink()

    other = world.root / "other.sock"
    world.env["HARNESS_SOCKET"] = str(other)
    d.start()
    request(d, "list")
    assert not alive(old)
    assert (f"WARNING harness.supervisor: run res/1: its process group {old} outlived the "
            "crashed daemon; stopping it") in d.stderr()
    new = _up(world, "res", 2, pidfile)
    with open(f"/proc/{new}/environ", "rb") as f:
        assert f"HARNESS_SOCKET={other}".encode() in f.read().split(b"\0")
    assert _records(world, "res") == [(2, "running", None, "autostart"),
                                      (1, "interrupted", "daemon_crash", "autostart")]


# -- end to end: a run's descendants -----------------------------------------------------


def test_e_a_run_ends_with_its_group_and_a_stop_with_what_left_the_group(
        world: World, daemons: Daemons) -> None:
    """(e) A one-shot that exits 0 leaving a background child in its group: the child is
    stopped before the record closes. A one-shot that times out, and a resident an
    operator stops, each with a descendant that left the group (setsid): that one is
    stopped too, found by the run's identity."""
    d = daemons
    bg, ss, helper, svc = (world.root / f"{n}.pid" for n in ("bg", "ss", "helper", "svc"))
    escape = "setsid sh -c 'echo $$ > {f}; exec sleep 1000' &"
    d.write_config(f"""
[harness.bg]
kind = "oneshot"
argv = ["sh", "-c", "sleep 1000 & echo $! > {bg}; exit 0"]

[harness.ss]
kind = "oneshot"
timeout = "3s"
argv = ["sh", "-c", "{escape.format(f=ss)} while [ ! -s {ss} ]; do sleep 0.05; done; \
exec sleep 1000"]

[harness.svc]
kind = "resident"
argv = ["sh", "-c", "{escape.format(f=helper)} echo $$ > {svc}; exec sleep 1000"]
""")
    d.start()

    res = world.harness("trigger", "bg", "--wait")
    assert res.returncode == 0, res.stderr
    child = int(bg.read_text())
    until("the background child to be stopped", lambda: not alive(child))
    rec = record_of(world, "bg", 1)
    assert rec is not None and (rec["outcome"], rec["exit_code"]) == ("success", 0)
    assert read_log(str(world.state / "jobs" / "bg" / "1.log")) == (
        b"harness: the process exited and left others running in its process group; "
        b"stopping them\n")

    res = world.harness("trigger", "ss", "--wait")
    assert res.returncode == 124, res.stderr
    left = int(ss.read_text())
    until("the descendant that left the group to be stopped", lambda: not alive(left))
    assert read_log(str(world.state / "jobs" / "ss" / "1.log")) == (
        b"harness: timed out after 3s; stopping the process group\n"
        b"harness: also stopping the process group(s) " + str(left).encode()
        + b" that its descendants started (setsid)\n")

    main, daemonized = _pid_in(svc), _pid_in(helper)
    res = world.harness("stop", "svc")
    assert res.returncode == 0, res.stderr
    until("the resident's helper to be stopped", lambda: not alive(daemonized))
    assert not alive(main)
    rec = record_of(world, "svc", 1)
    assert rec is not None and (rec["outcome"], rec["reason"]) == ("cancelled", "operator")
    assert (world.state / "logs" / "svc.log").read_text() == (
        f"harness: also stopping the process group(s) {daemonized} that its descendants "
        "started (setsid)\n")


def test_e_a_helper_daemonized_by_a_run_that_ended_on_its_own_lives_until_the_next_boot(
        world: World, daemons: Daemons) -> None:
    """(e) README: a helper that left its run's group outlives a run that ended on its own
    (a clean shutdown too), unsupervised; the next boot stops it, whatever the record."""
    d = daemons
    dz = world.root / "dz.pid"
    d.write_config(f"""
[harness.dz]
kind = "oneshot"
argv = ["sh", "-c", "setsid sh -c 'echo $$ > {dz}; exec sleep 1000' & \
while [ ! -s {dz} ]; do sleep 0.05; done; exit 0"]
""")
    first = d.start()
    res = world.harness("trigger", "dz", "--wait")
    assert res.returncode == 0, res.stderr
    helper = _pid_in(dz)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=DEADLINE) == 0
    assert alive(helper)
    assert read_log(str(world.state / "jobs" / "dz" / "1.log")) == b""

    d.start()
    request(d, "list")
    assert not alive(helper)
    assert (f"WARNING harness.supervisor: run dz/1: its process group {helper} outlived the "
            "daemon that started it (the run's record, closed before this boot, reads "
            "success); stopping it") in d.stderr()
    assert [(r["run_id"], r["outcome"]) for r in runs_of(world, "dz")] == [(1, "success")]
