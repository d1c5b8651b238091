"""Orphaned process groups after a daemon crash (orphans.py, runner.Run._spawn's identity
env, daemon.py's boot): real processes, real files, and end to end a real daemon that is
SIGKILLed and booted again in a throwaway XDG world.

Unit level: a run's child carries HARNESS_NAME/RUN_ID/RUN_TRIGGER/SOCKET that no env file
can change; `kill_orphans` ends the whole group of a crashed run of this daemon's world
(SIGTERM, SIGKILL after the grace for one that ignores it) and notes it in the run's log,
and never touches a process of another socket, of a run that did not crash, or of our own
process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import World
from daemons import DEADLINE, Daemons, alive, comm, record_of, until
from harness.ledger.runledger import RunLedger
from harness.supervisor import logs
from harness.supervisor.history import CRASH_NOTE
from harness.supervisor.orphans import Orphan, find_orphans, kill_orphans
from harness.supervisor.runner import RunSpec, run_once
from harness.supervisor.state import RunIds, StateFile


class Procs:
    """Processes a test spawned; every group still alive is killed at teardown."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pids: list[int] = []

    def spawn(self, script: str, env: dict[str, str], *, own_group: bool = True
              ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(["sh", "-c", script], env={**os.environ, **env},
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


def _ident(sock: str, name: str, run_id: int) -> dict[str, str]:
    return {"HARNESS_SOCKET": sock, "HARNESS_NAME": name, "HARNESS_RUN_ID": str(run_id),
            "HARNESS_RUN_TRIGGER": "autostart"}


def _wait_exec(pid: int, name: str) -> None:
    until(f"pid {pid} to exec {name}", lambda: comm(pid) == name)


# -- the child's identity ------------------------------------------------------------------


def test_a_runs_child_carries_its_identity_and_env_files_cannot_change_it(
        world: World, tmp_path: Path, open_ledger: Callable[..., RunLedger],
        monkeypatch: pytest.MonkeyPatch) -> None:
    sock = str(tmp_path / "mine.sock")
    monkeypatch.setenv("HARNESS_SOCKET", sock)
    env_file = tmp_path / "env"
    env_file.write_text("HARNESS_NAME=evil\nHARNESS_RUN_ID=99\nHARNESS_RUN_TRIGGER=forged\n"
                        "HARNESS_SOCKET=/elsewhere.sock\nOTHER=kept\n")
    led = open_ledger(world.ledger)
    jobs = str(world.state / "jobs")
    ids = RunIds(StateFile(str(world.state / "state.json")), led, jobs)
    spec = RunSpec("probe", ["sh", "-c", 'echo "$HARNESS_NAME|$HARNESS_RUN_ID|'
                                         '$HARNESS_RUN_TRIGGER|$HARNESS_SOCKET|$OTHER"'],
                   env_file=str(env_file))
    for run_id in (1, 2):
        rec = asyncio.run(run_once(spec, led, ids, trigger="manual", jobs_dir=jobs))
        assert (rec["run_id"], rec["outcome"]) == (run_id, "success")
        out = logs.read_log(rec["log"])
        assert out == f"probe|{run_id}|manual|{sock}|kept\n".encode()


# -- find and kill ------------------------------------------------------------------------


def test_only_this_worlds_crashed_groups_are_stopped_and_noted(
        tmp_path: Path, procs: Procs) -> None:
    ours, theirs = str(tmp_path / "a" / "harness.sock"), str(tmp_path / "b" / "harness.sock")
    gpid = tmp_path / "grandchild.pid"
    # The crashed run: a shell with a background child, both in the run's group.
    crashed = procs.spawn(f"sleep 300 & echo $! > {gpid}; exec sleep 301",
                          _ident(ours, "res", 4))
    same_run_other_daemon = procs.spawn("exec sleep 302", _ident(theirs, "res", 4))
    live_run = procs.spawn("exec sleep 303", _ident(ours, "res", 5))
    other_name = procs.spawn("exec sleep 304", _ident(ours, "other", 4))
    in_our_group = procs.spawn("exec sleep 305", _ident(ours, "res", 4), own_group=False)
    for p in procs.procs:
        _wait_exec(p.pid, "sleep")
    until("the grandchild's pid", lambda: gpid.exists() and gpid.read_text().strip())
    grandchild = int(gpid.read_text())
    procs.pids.append(grandchild)

    assert find_orphans(ours, {("res", 4)}) == [
        Orphan(crashed.pid, "res", 4, sorted([crashed.pid, grandchild]))]
    assert find_orphans(theirs, {("res", 4)}) == [
        Orphan(same_run_other_daemon.pid, "res", 4, [same_run_other_daemon.pid])]
    assert find_orphans(ours, set()) == []
    assert find_orphans(str(tmp_path / "nobody.sock"), {("res", 4), ("res", 5)}) == []

    log_path = tmp_path / "res.log"
    log_path.write_text("before\n")
    t0 = time.monotonic()
    stopped = kill_orphans(ours, [{"harness": "res", "run_id": 4, "log": str(log_path)},
                                  {"harness": "gone", "run_id": 1, "log": str(log_path)}],
                           grace=DEADLINE)
    assert time.monotonic() - t0 < DEADLINE  # sleep obeys SIGTERM: no wait for the grace
    assert [(o.pgid, o.signalled, o.killed, o.gone) for o in stopped] == [
        (crashed.pid, True, False, True)]
    assert crashed.wait(timeout=DEADLINE) == -signal.SIGTERM
    until("the grandchild to end", lambda: not alive(grandchild))
    assert log_path.read_text() == (
        f"before\nharness: stopped the orphaned process group {crashed.pid} left by the "
        "crashed daemon (SIGTERM)\n")
    for p in (same_run_other_daemon, live_run, other_name, in_our_group):
        assert p.poll() is None and alive(p.pid)


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(
        tmp_path: Path, procs: Procs) -> None:
    sock = str(tmp_path / "harness.sock")
    stubborn = procs.spawn("trap '' TERM; exec sleep 300", _ident(sock, "nightly", 7))
    _wait_exec(stubborn.pid, "sleep")
    log_path = tmp_path / "7.log"
    log_path.write_text("")
    t0 = time.monotonic()
    [o] = kill_orphans(sock, [{"harness": "nightly", "run_id": 7, "log": str(log_path)}],
                       grace=0.5)
    took = time.monotonic() - t0
    assert (o.pgid, o.signalled, o.killed, o.gone) == (stubborn.pid, True, True, True)
    assert 0.5 <= took < DEADLINE
    assert stubborn.wait(timeout=DEADLINE) == -signal.SIGKILL
    assert log_path.read_text() == (
        f"harness: stopped the orphaned process group {stubborn.pid} left by the crashed "
        "daemon (SIGKILL after 0.5s)\n")


def test_no_crashed_runs_means_no_scan_and_no_signal(tmp_path: Path, procs: Procs) -> None:
    sock = str(tmp_path / "harness.sock")
    p = procs.spawn("exec sleep 300", _ident(sock, "res", 1))
    _wait_exec(p.pid, "sleep")
    assert kill_orphans(sock, []) == []
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
