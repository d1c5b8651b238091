"""The runner and per-run logs against real processes, real files and a real RunLedger.

Every harness here is a small `sh`/Python program; every expectation is read back from the
ledger's day files (or the real `harness runs` CLI), never from the runner's own memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from daemons import read_log
from harness.config.load import load_config
from harness.config.model import HarnessConfig
from harness.ledger.runledger import RunLedger
from harness.supervisor import logs
from harness.supervisor.manager import Manager
from harness.supervisor.runner import Run, RunSpec, SpawnError, read_env_files, run_once
from harness.supervisor.state import RunIds, StateFile

PY = sys.executable


@dataclass
class Rig:
    ledger: RunLedger
    ids: RunIds
    jobs: str
    ledger_dir: Path

    def lines(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for p in sorted(self.ledger_dir.glob("*.jsonl")):
            out.extend(json.loads(x) for x in p.read_text().splitlines() if x)
        return out

    def raw(self) -> bytes:
        return b"".join(p.read_bytes() for p in sorted(self.ledger_dir.glob("*.jsonl")))

    def of(self, harness: str, run_id: int) -> list[dict[str, Any]]:
        return [x for x in self.lines() if x["harness"] == harness and x["run_id"] == run_id]

    def closed(self, harness: str, run_id: int) -> dict[str, Any]:
        (c,) = [x for x in self.of(harness, run_id) if x["type"] == "closed"]
        return c

    def once(self, spec: RunSpec, **kw: Any) -> dict[str, Any]:
        return asyncio.run(run_once(spec, self.ledger, self.ids, trigger="manual",
                                    jobs_dir=self.jobs, **kw))


@pytest.fixture
def rig(world: Any, open_ledger: Callable[..., RunLedger]) -> Rig:
    led = open_ledger(world.ledger)
    jobs = str(world.state / "jobs")
    ids = RunIds(StateFile(str(world.state / "state.json")), led, jobs)
    return Rig(led, ids, jobs, world.ledger)


def _log(rec: dict[str, Any]) -> str:
    data = read_log(rec["log"])
    assert data is not None
    return data.decode()


def _end_fields(line: dict[str, Any]) -> dict[str, Any]:
    return {k: line[k] for k in ("outcome", "reason", "exit_code") if k in line}


# -- ordering and natural ends -------------------------------------------------------------


def test_opened_line_is_on_disk_before_the_spawn(rig: Rig) -> None:
    # The child reads the day files itself: what it finds was durable before it existed.
    probe = (
        "import glob, json, sys\n"
        "found = [json.loads(l) for p in sorted(glob.glob(sys.argv[1] + '/*.jsonl'))\n"
        "         for l in open(p).read().splitlines() if l]\n"
        "mine = [x for x in found if x['harness'] == 'probe' and x['type'] == 'opened']\n"
        "print('FOUND ' + json.dumps(mine[-1], sort_keys=True))\n"
    )
    rec = rig.once(RunSpec("probe", [PY, "-c", probe, str(rig.ledger_dir)]))
    seen = json.loads(_log(rec).split("FOUND ", 1)[1])
    assert seen["run_id"] == rec["run_id"] == 1
    assert (seen["outcome"], seen["kind"], seen["trigger"]) == ("running", "oneshot", "manual")
    assert seen["started_at"] == rec["started_at"]
    assert seen["log"] == os.path.join(rig.jobs, "probe", "1.log") == rec["log"]
    opened, closed = rig.of("probe", 1)
    assert opened == seen
    assert closed["seq"] == opened["seq"] + 1
    assert _end_fields(closed) == {"outcome": "success", "exit_code": 0}
    assert closed["ended_at"] >= opened["started_at"]
    assert closed["duration_ms"] >= 0
    assert rec["outcome"] == "success" and rec["exit_code"] == 0


@pytest.mark.parametrize(("script", "want"), [
    ("exit 0", {"outcome": "success", "exit_code": 0}),
    ("exit 3", {"outcome": "failed", "exit_code": 3}),
    ("kill -KILL $$", {"outcome": "failed", "exit_code": -1}),
])
def test_natural_exit(rig: Rig, script: str, want: dict[str, Any]) -> None:
    rec = rig.once(RunSpec("nat", ["sh", "-c", script]))
    assert _end_fields(rig.closed("nat", rec["run_id"])) == want
    assert _end_fields(rec) == want


@pytest.mark.parametrize("bad", ["argv", "workdir"])
def test_spawn_failure(rig: Rig, tmp_path: Path, bad: str) -> None:
    missing = str(tmp_path / "no-such-thing")
    spec = (RunSpec("sf", [missing]) if bad == "argv"
            else RunSpec("sf", ["true"], workdir=missing))
    rec = rig.once(spec)
    opened, closed = rig.of("sf", 1)
    assert opened["outcome"] == "running"
    assert _end_fields(closed) == {"outcome": "failed", "reason": "spawn"}
    assert "exit_code" not in rec and rec["outcome"] == "failed" and rec["reason"] == "spawn"
    assert "ended_at" in closed and "duration_ms" in closed
    assert f"spawn failed: {missing}" in _log(rec)


def test_a_spawn_failure_never_writes_a_secret_in_its_workdir(rig: Rig, tmp_path: Path) -> None:
    """A project's harnesses run in the project's directory, which may be named after a
    token: `harness up` and `down` scrub that path in every line they print, and the note
    a failed spawn leaves in the run's log (which `harness logs` shows) named it raw."""
    token = "ghp_" + "A1b2C3d4" * 4 + "abcd"  # the form of a GitHub token
    gone = tmp_path / token / "proj"
    rec = rig.once(RunSpec("sf", ["true"], workdir=str(gone)))
    assert (rec["outcome"], rec["reason"]) == ("failed", "spawn")
    assert _log(rec).endswith(f"harness: spawn failed: {tmp_path}/[REDACTED]/proj: No such "
                              "file or directory\n")
    assert token not in _log(rec)


# -- ends we cause -------------------------------------------------------------------------


def _group_alive(pgid: int) -> list[int]:
    alive = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def test_timeout_kills_the_whole_group(rig: Rig, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    stubborn = ("import os, signal, sys, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\n"
                "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
                "time.sleep(60)\n")
    leader = ("import os, subprocess, sys, time\n"
              f"subprocess.Popen([sys.executable, '-c', {stubborn!r}, sys.argv[1]])\n"
              "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
              "print('child up', flush=True)\n"
              "time.sleep(60)\n")
    t0 = time.monotonic()
    run = Run(RunSpec("slow", [PY, "-c", leader, str(pidfile)], timeout=1.5), rig.ledger,
              rig.ids, "schedule", jobs_dir=rig.jobs, grace=0.5)

    async def go() -> dict[str, Any]:
        await run.start()
        return await run.wait()

    rec = asyncio.run(go())
    elapsed = time.monotonic() - t0
    assert _end_fields(rig.closed("slow", rec["run_id"])) == {"outcome": "timed_out",
                                                              "exit_code": -1}
    assert 1.5 + 0.5 <= elapsed < 1.5 + 0.5 + 5
    child = int(pidfile.read_text())
    assert run.pid is not None
    assert _group_alive(run.pid) == []
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    text = _log(rec)
    assert "child up" in text
    assert "harness: timed out after 1.5s" in text and "sent SIGKILL" in text


def _ended(pid: int) -> bool:
    """Gone, or a zombie: it runs no more."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def test_what_the_process_leaves_in_its_group_ends_before_the_record_closes(
        rig: Rig, tmp_path: Path) -> None:
    """KillMode=control-group: the process exits 0 leaving a child in its group that
    ignores SIGTERM; the child gets SIGTERM, then SIGKILL after the grace, and the run
    keeps its own outcome."""
    pidfile = tmp_path / "left.pid"
    script = (f"sh -c 'echo $$ > {pidfile}; trap \"\" TERM; exec sleep 1000' & "
              f"while [ ! -s {pidfile} ]; do sleep 0.05; done; exit 0")
    t0 = time.monotonic()
    rec = rig.once(RunSpec("left", ["sh", "-c", script]), grace=0.5)
    child = int(pidfile.read_text())
    try:
        deadline = time.monotonic() + 30
        while not _ended(child):
            assert time.monotonic() < deadline, "the child outlived its SIGKILL"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)
    assert time.monotonic() - t0 >= 0.5
    assert _end_fields(rig.closed("left", rec["run_id"])) == {"outcome": "success",
                                                              "exit_code": 0}
    assert re.fullmatch(r"harness: the process exited and left others running in its "
                        r"process group; stopping them\n"
                        r"harness: still running [\d.]+s after SIGTERM; sent SIGKILL\n",
                        _log(rec)), _log(rec)


@pytest.mark.parametrize(("reason", "want"), [
    ("operator", {"outcome": "cancelled", "reason": "operator", "exit_code": -1}),
    ("hours", {"outcome": "cancelled", "reason": "hours", "exit_code": -1}),
    ("replace", {"outcome": "replaced", "exit_code": -1}),
    ("shutdown", {"outcome": "interrupted", "reason": "shutdown", "exit_code": -1}),
])
def test_stop(rig: Rig, reason: str, want: dict[str, Any]) -> None:
    run = Run(RunSpec("st", ["sleep", "30"]), rig.ledger, rig.ids, "manual", jobs_dir=rig.jobs,
              grace=2.0)

    async def go() -> dict[str, Any]:
        await run.start()
        await asyncio.sleep(0.2)
        return await run.stop(reason)

    t0 = time.monotonic()
    rec = asyncio.run(go())
    assert time.monotonic() - t0 < 5
    closed = rig.closed("st", rec["run_id"])
    assert _end_fields(closed) == want
    assert "ended_at" in closed
    assert {k: rec.get(k) for k in want} == want


def test_stop_rejects_an_unknown_reason(rig: Rig) -> None:
    run = Run(RunSpec("st", ["true"]), rig.ledger, rig.ids, "manual", jobs_dir=rig.jobs)

    async def go() -> None:
        await run.start()
        with pytest.raises(ValueError, match="unknown stop reason"):
            await run.stop("because")
        await run.wait()

    asyncio.run(go())


# -- privacy and files ---------------------------------------------------------------------

SECRET = "sk-hunter2-ZZ9-plural-z-alpha"


def test_env_file_secret_reaches_only_the_child(rig: Rig, tmp_path: Path) -> None:
    env_file = tmp_path / "secrets.env"
    env_file.write_text(f"# api key\n\nAPI_KEY=\"{SECRET}\"\nOTHER=x\n")
    out = tmp_path / "child-saw"
    script = ("import os, sys\n"
              "open(sys.argv[1], 'w').write(os.environ['API_KEY'])\n"
              "print('other=' + os.environ['OTHER'] + ' extra=' + os.environ['EXTRA'])\n")
    rec = rig.once(RunSpec("sec", [PY, "-c", script, str(out)], env_file=str(env_file)),
                   env_extra={"EXTRA": "e1"})
    assert rec["outcome"] == "success"
    assert out.read_text() == SECRET
    assert SECRET.encode() not in rig.raw()
    assert b"hunter2" not in rig.raw()
    assert _log(rec) == "other=x extra=e1\n"


def test_malformed_env_file_is_a_spawn_failure_naming_the_line(rig: Rig, tmp_path: Path
                                                               ) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text(f"API_KEY={SECRET}\n{SECRET} no equals sign\n")
    rec = rig.once(RunSpec("bad", ["true"], env_file=[str(env_file)]))
    assert _end_fields(rig.closed("bad", rec["run_id"])) == {"outcome": "failed",
                                                             "reason": "spawn"}
    text = _log(rec)
    assert f"env_file {env_file}:2: not a KEY=VALUE line" in text
    assert "hunter2" not in text
    assert b"hunter2" not in rig.raw()


def test_read_env_files_rules(tmp_path: Path) -> None:
    a, b = tmp_path / "a.env", tmp_path / "b.env"
    a.write_text("A=1\n  # c\nB='two words'\nC=\n")
    b.write_text("A=override\n")
    assert read_env_files([str(a), str(b)]) == {"A": "override", "B": "two words", "C": ""}
    assert read_env_files(None) == {}
    with pytest.raises(SpawnError, match=r"cannot read"):
        read_env_files(str(tmp_path / "missing.env"))
    (tmp_path / "k.env").write_text("1BAD=x\n")
    with pytest.raises(SpawnError, match=r"k\.env:1: not a KEY=VALUE line"):
        read_env_files(str(tmp_path / "k.env"))


def test_run_log_is_private_and_compressed_after_close(rig: Rig) -> None:
    run = Run(RunSpec("mode", ["sh", "-c", "echo hello; sleep 30"]), rig.ledger, rig.ids,
              "manual", jobs_dir=rig.jobs, grace=1.0)
    seen: dict[str, int] = {}

    async def go() -> dict[str, Any]:
        await run.start()
        assert run.log_path is not None
        # Stopped only once it has said hello: a fixed pause could end it, on a loaded
        # machine, before the shell ran its echo, and the log would rightly be empty.
        deadline = time.monotonic() + 30
        while os.path.getsize(run.log_path) < len(b"hello\n"):
            assert time.monotonic() < deadline, "the run never wrote its hello"
            await asyncio.sleep(0.02)
        seen["log"] = stat.S_IMODE(os.stat(run.log_path).st_mode)
        seen["dir"] = stat.S_IMODE(os.stat(os.path.dirname(run.log_path)).st_mode)
        return await run.stop("operator")

    rec = asyncio.run(go())
    assert seen == {"log": 0o600, "dir": 0o700}
    assert not os.path.exists(rec["log"])
    assert stat.S_IMODE(os.stat(rec["log"] + ".zst").st_mode) == 0o600
    assert read_log(rec["log"]) == b"hello\n"
    assert "log_pruned" not in rec


def test_keep_runs_prunes_the_oldest_logs(rig: Rig, world: Any) -> None:
    spec = RunSpec("kr", ["sh", "-c", 'echo "run output"'], keep_runs=2)
    recs = [rig.once(spec) for _ in range(4)]
    assert [r["run_id"] for r in recs] == [1, 2, 3, 4]
    d = Path(rig.jobs) / "kr"
    assert sorted(os.listdir(d)) == ["3.log.zst", "4.log.zst"]
    assert read_log(str(d / "3.log")) == b"run output\n"
    cp = world.harness("runs", "kr", "--json")
    assert cp.returncode == 0, cp.stderr
    got = {r["run_id"]: r for r in json.loads(cp.stdout)}
    assert sorted(got) == [1, 2, 3, 4]
    assert {rid: got[rid].get("log_pruned", False) for rid in got} == {
        1: True, 2: True, 3: False, 4: False}
    assert got[1]["log"] == str(d / "1.log")
    assert all(got[rid]["outcome"] == "success" for rid in got)


def test_prune_logs_spares_protected_ids(tmp_path: Path) -> None:
    d = tmp_path / "h"
    d.mkdir()
    for name in ("1.log", "2.log.zst", "3.log", "3.log.zst", "4.log", "notes.txt"):
        (d / name).write_text("x")
    assert logs.prune_logs(str(tmp_path), "h", 2, protect={1}) == [2]
    assert sorted(os.listdir(d)) == ["1.log", "3.log", "3.log.zst", "4.log", "notes.txt"]
    with pytest.raises(ValueError):
        logs.prune_logs(str(tmp_path), "h", 0)



def test_a_loop_torn_down_mid_run_closes_it_as_shutdown(rig: Rig) -> None:
    # asyncio.run cancels the still-running supervision task on exit: the run must not be
    # left alive with an open record.
    run = Run(RunSpec("gone", ["sleep", "30"]), rig.ledger, rig.ids, "manual",
              jobs_dir=rig.jobs, grace=1.0)

    async def go() -> None:
        await run.start()
        await asyncio.sleep(0.2)

    asyncio.run(go())
    assert run.run_id is not None and run.pid is not None
    closed = rig.closed("gone", run.run_id)
    assert _end_fields(closed) == {"outcome": "interrupted", "reason": "shutdown",
                                   "exit_code": -1}
    assert "ended_at" in closed
    assert _group_alive(run.pid) == []


def test_spec_from_config() -> None:
    cfg = HarnessConfig.model_validate({
        "argv": ["echo", "hi"], "workdir": "/tmp", "env_file": "/etc/x.env",
        "kind": "oneshot", "timeout": "90s", "keep_runs": 3, "restart": "no",
        "enabled": False})
    spec = RunSpec.from_config("h", cfg)
    assert spec == RunSpec("h", ("echo", "hi"), "/tmp", ("/etc/x.env",), 90.0, 3)


@pytest.mark.parametrize("where", ["argv", "workdir", "env_file", "env_extra"])
def test_a_nul_that_reaches_the_spawn_fails_the_run_not_the_runner(
        rig: Rig, tmp_path: Path, where: str) -> None:
    """create_subprocess_exec raises ValueError for a NUL, not OSError: it escaped Run.start
    (the record stayed running, the caller got an exception). It closes failed/spawn."""
    spec = {"argv": RunSpec("nul", ["tr\0ue"]),
            "workdir": RunSpec("nul", ["true"], workdir=f"{tmp_path}\0x"),
            "env_file": RunSpec("nul", ["true"], env_file=f"{tmp_path}\0x.env"),
            "env_extra": RunSpec("nul", ["true"])}[where]
    rec = rig.once(spec, env_extra={"X": "a\0b"} if where == "env_extra" else None)
    assert (rec["outcome"], rec["reason"], rec["run_id"]) == ("failed", "spawn", 1)
    assert _end_fields(rig.closed("nul", 1)) == {"outcome": "failed", "reason": "spawn"}
    note = ("harness: spawn failed: cannot start the command: a NUL character in its argv, "
            "workdir or environment\n")
    assert _log(rec).endswith(note)


def _unblock_a_reader(fifo: Path, within: float) -> threading.Thread:
    """Open `fifo` for writing, and close it, as soon as a reader has it open (within
    `within` seconds): a reader blocked in open(2) then reads EOF instead of hanging."""
    def writer() -> None:
        end = time.monotonic() + within
        while time.monotonic() < end:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                return
            except OSError:  # ENXIO: no reader (yet)
                time.sleep(0.05)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("kind", ["fifo", "char device"])
def test_an_env_file_that_is_not_a_regular_file_fails_the_run_at_once(
        rig: Rig, tmp_path: Path, kind: str) -> None:
    """An env_file naming a FIFO blocked the spawn in open(2) for ever (past the timeout,
    and the daemon then ignored SIGTERM); /dev/zero was read until memory ran out (here
    /dev/null stands for it: a device, but one a test can read to its end)."""
    if kind == "fifo":
        path = tmp_path / "env.fifo"
        os.mkfifo(path)
        writer = _unblock_a_reader(path, within=3.0)  # so the unfixed read ends, and fails
        why = "it is a FIFO, not a regular file"
    else:
        path = Path("/dev/null")
        why = "it is a character device, not a regular file"
    link = tmp_path / "env.link"  # followed like any path the user names, and still refused
    link.symlink_to(path)
    rec = rig.once(RunSpec("ef", ["true"], env_file=[str(link)], timeout=30))
    assert (rec["outcome"], rec["reason"]) == ("failed", "spawn")
    assert _end_fields(rig.closed("ef", 1)) == {"outcome": "failed", "reason": "spawn"}
    assert _log(rec).endswith(f"harness: spawn failed: env_file {link}: cannot read: {why}\n")
    if kind == "fifo":
        writer.join()


def test_an_env_file_is_read_up_to_one_mib(rig: Rig, tmp_path: Path) -> None:
    """No bound on the read: a huge file (or a device without end) was read whole."""
    line = b"K=" + b"v" * 1021 + b"\n"  # 1 KiB
    assert len(line) == 1024
    full = tmp_path / "dotfiles" / "full.env"
    full.parent.mkdir()
    full.write_bytes(line * 1024)
    link = tmp_path / "full.env"  # a symlink is followed to the regular file
    link.symlink_to(full)
    assert read_env_files(str(link)) == {"K": "v" * 1021}
    over = tmp_path / "over.env"
    over.write_bytes(line * 1024 + b"\n")
    rec = rig.once(RunSpec("big", ["true"], env_file=str(over)))
    assert (rec["outcome"], rec["reason"]) == ("failed", "spawn")
    assert _log(rec).endswith(f"harness: spawn failed: env_file {over}: larger than 1 MiB, "
                              "the most an env file may hold\n")


# -- a run log that cannot be created, said once per episode by each Manager ----------------


def test_two_managers_in_one_process_each_say_their_own_run_log_failures(
        world: Any, open_ledger: Callable[..., RunLedger],
        caplog: pytest.LogCaptureFixture) -> None:
    """The memory that says a run's missing log once per episode was the module's: a
    second Manager in the process (a second daemon, as tests make) never said its own
    failure, since the first had said the same one. Each Manager keeps its own now."""
    cfg_file = world.root / "harness.toml"
    cfg_file.write_text('[harness.w]\nkind = "oneshot"\nargv = ["true"]\n')
    config = load_config(str(cfg_file))
    jobs = world.state / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "w").write_text("")  # a file where the log's directory goes: even root fails

    def manager(n: int) -> Manager:
        led = open_ledger(world.root / f"ledger{n}")
        ids = RunIds(StateFile(str(world.root / f"state{n}.json")), led, str(jobs))
        return Manager(config, led, ids, str(jobs))

    async def fire(m: Manager) -> None:
        run_id = (await m.fire("w"))["run_id"]
        deadline = time.monotonic() + 30
        while (rec := m.ledger.get("w", run_id)) is None or rec["outcome"] == "running":
            assert time.monotonic() < deadline, "the run never closed"
            await asyncio.sleep(0.02)
        assert (rec["outcome"], rec["reason"]) == ("failed", "spawn")

    async def main() -> None:
        first, second = manager(1), manager(2)
        for m in (first, first, second, second, first):
            await fire(m)
        for m in (first, second):
            await m.shutdown()

    caplog.set_level(logging.WARNING, logger="harness.supervisor")
    asyncio.run(main())
    said = [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == "harness.supervisor"]
    tail = "(its later runs that fail the same way are not logged again)"
    assert said == [
        ("WARNING", f"run w/1: failed to start: cannot create the run log {jobs}/w/1.log: "
                    f"not a directory {tail}"),
        ("WARNING", f"run w/1: failed to start: cannot create the run log {jobs}/w/1.log: "
                    f"not a directory {tail}"),
    ]
